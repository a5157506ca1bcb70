// Grammar-constrained sampling: llama.cpp's GBNF grammars, applied as a
// sampler stage that lets through only the tokens whose bytes keep the
// output inside the grammar, and end-of-generation only where it may end.
//
// GBNF: `name ::= alternatives`, one rule per line (inside parentheses and
// after `|` a rule may continue on the next line); alternatives of sequences;
// "literals" with \n \r \t \\ \" \xHH \uHHHH \UHHHHHHHH escapes; [character
// classes], [^negated], ranges a-z; `.` for any character; ( grouping );
// the postfixes * + ? {m} {m,} {m,n}; # comments. The start rule is `root`.
//
// The matcher is a set of pushdown stacks over the rules' elements (one per
// way the text so far can continue), advanced one code point at a time; a
// token's bytes may end inside a UTF-8 character, which the next token
// completes. The stage walks a trie of every token's bytes once per step, so
// tokens that share a prefix share its matching, and a subtree the grammar
// rules out is never entered.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "tessera/core/error.h"
#include "tessera/engine/sampler.h"
#include "tessera/text/tokenizer.h"

namespace tessera::grammar {

// One element of a rule, as llama.cpp lays rules out: a rule is its
// alternatives, each a sequence of elements, separated by kAlt and ended by kEnd.
struct Element {
  enum Type : uint8_t {
    kEnd,        // end of the rule
    kAlt,        // start of another alternative
    kRuleRef,    // value: the rule's index
    kChar,       // a character class starts: value, the first code point (or range start)
    kCharNot,    // a negated class starts
    kCharRangeUpper,  // value: the upper end of the range whose lower end came before
    kCharAlt,    // another code point (or range start) of the same class
    kCharAny,    // any character
  };
  Type type;
  uint32_t value;
};

// Every grammar is compiled under these bounds, so that no text a client
// sends can make compiling or matching run away (docs/grammar.md, "Limits").
// Past one, parse() or the matcher throws Error(kInvalidArgument) naming it.
struct Limits {
  static constexpr size_t kMaxNesting = 256;        // ( groups ) inside one another
  static constexpr size_t kMaxRules = 65536;        // named and generated rules
  static constexpr size_t kMaxElements = 1 << 20;   // elements of all rules, repetitions expanded
  static constexpr size_t kMaxStacks = 4096;        // ways the text so far may continue, at once
  static constexpr size_t kMaxExpansions = 1 << 18; // stacks visited to find them, per character
  static constexpr size_t kMaxDepth = 1024;         // elements on one stack (rules open at once)
};

class Grammar {
 public:
  // Parses `text`; throws Error(kInvalidArgument) naming the line and column
  // of the first fault (a syntax error, an undefined rule, no `root`, left
  // recursion), or the limit a grammar goes past. The stacks the matcher
  // starts from are found here, once, so a Matcher costs a copy.
  static std::shared_ptr<const Grammar> parse(std::string_view text, std::string_view root = "root");

  const std::vector<std::vector<Element>>& rules() const { return rules_; }
  uint32_t root() const { return root_; }
  // The rule's name (generated rules: name_N).
  const std::string& rule_name(uint32_t rule) const { return names_[rule]; }
  const std::vector<std::vector<const Element*>>& initial_stacks() const { return initial_; }

 private:
  friend class Parser;
  std::vector<std::vector<Element>> rules_;
  std::vector<std::string> names_;
  uint32_t root_ = 0;
  std::vector<std::vector<const Element*>> initial_;
};

// Grammar::parse through a cache of the grammars parsed last, by text (and
// root): a client that sends the same grammar with every request has it
// compiled once. Errors are not cached. Safe from any thread.
std::shared_ptr<const Grammar> parse_cached(std::string_view text, std::string_view root = "root");

// Where a match stands: every stack the text so far can continue with, and
// the bytes of a UTF-8 character a token began but did not end.
class Matcher {
 public:
  explicit Matcher(std::shared_ptr<const Grammar> grammar);

  // Whether `bytes` can come next; accept() then moves past them.
  bool allows(std::string_view bytes) const;
  void accept(std::string_view bytes);  // throws Error(kInvalidArgument) when !allows
  // Whether the text so far is a whole sentence of the grammar.
  bool can_end() const;
  // Whether nothing more may come (only the end is left).
  bool must_end() const;

  using Stack = std::vector<const Element*>;
  struct Partial {
    uint32_t value = 0;  // the bits seen so far
    int remaining = 0;   // continuation bytes still to come (0: none pending)
    uint32_t min = 0;    // the smallest code point the sequence may still give
  };
  const std::vector<Stack>& stacks() const { return stacks_; }
  const Partial& partial() const { return partial_; }

  // For the stage: stacks after one more code point / byte (empty: rejected).
  // Throws Error(kInvalidArgument) where the grammar is too ambiguous to
  // follow within Limits (more stacks, expansions or depth than they allow).
  static std::vector<Stack> advance(const Grammar& g, const std::vector<Stack>& stacks, uint32_t cp);
  // One byte after (stacks, p): kFail when it breaks UTF-8 or the grammar;
  // kSame when it only extends a pending character (the stacks stay, `q` is
  // the new pending state); kNew when it completes one (`next` holds the new
  // stacks, `q` is empty).
  enum class Step { kFail, kSame, kNew };
  static Step step(const Grammar& g, const std::vector<Stack>& stacks, const Partial& p,
                   uint8_t byte, Partial& q, std::vector<Stack>& next);
  // step() in place; false when it breaks UTF-8 or the grammar.
  static bool feed(const Grammar& g, std::vector<Stack>& stacks, Partial& partial, uint8_t byte);

 private:
  std::shared_ptr<const Grammar> grammar_;
  std::vector<Stack> stacks_;
  Partial partial_;
};

// The sampler stage: tokens the grammar rules out get -inf, end-of-generation
// tokens are allowed only where the grammar may end (and are the only ones
// left once it must). Tokens accepted before its first apply() are the
// prompt's and do not move it. Throws Error(kInvalidArgument) from apply()
// when the grammar leaves no token at all.
std::unique_ptr<SamplerStage> stage(std::shared_ptr<const Grammar> grammar,
                                    const Tokenizer& tokenizer);

// A JSON schema as a GBNF grammar whose sentences are the JSON texts the
// schema accepts: type (and lists of types), properties, required,
// additionalProperties, items, prefixItems, minItems, maxItems, enum, const,
// anyOf, oneOf, allOf of objects, local $ref ($defs, definitions), minLength,
// maxLength, formats date / time / date-time / uuid, and integer minimum /
// maximum (exclusive too). Whitespace between tokens is optional. Anything
// else that would constrain the output is an Error(kInvalidArgument) naming
// its JSON pointer, never ignored. Properties come in the schema's order
// (required ones first) with an ordered_json; a plain json has already
// sorted its keys. The grammar starts "root ::= "; no other rule is named
// root, ws or json-* but its primitives, nor wrap-* (for grammars that embed it).
std::string json_schema_to_grammar(const nlohmann::ordered_json& schema);
std::string json_schema_to_grammar(const nlohmann::json& schema);
// Any JSON object (response_format json_object).
std::string json_grammar();

// The grammar a request's options ask for, as llama-server and llama.node
// read them: "grammar" (GBNF), "json_schema", or "response_format" ({"type":
// "json_object"} with an optional "schema", {"type": "json_schema",
// "json_schema": {"schema": ...}}, or "text"); nothing when none is given.
// Throws Error(kInvalidArgument) naming the field for a malformed or
// conflicting one, or a schema keyword not supported.
std::optional<std::string> request_grammar(const nlohmann::ordered_json& options);

// serving::GenerationParams::masks for `grammar`: one fresh stage per
// request. `tokenizer` must outlive the requests.
std::function<std::vector<std::unique_ptr<SamplerStage>>()> masks(
    std::shared_ptr<const Grammar> grammar, const Tokenizer& tokenizer);

}  // namespace tessera::grammar
