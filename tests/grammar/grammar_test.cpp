// GBNF: parse errors with their positions, the matcher against std::regex on
// random strings, UTF-8 split across tokens, and the sampler stage against a
// token-by-token check of the whole vocabulary.
#include <gtest/gtest.h>
#include <fmt/format.h>

#include <cmath>
#include <limits>
#include <random>
#include <regex>
#include <set>
#include <string>

#include "models/model_test_util.h"
#include "tessera/gguf/gguf.h"
#include "tessera/grammar/grammar.h"

namespace tessera::grammar {
namespace {

std::string error_of(std::string_view text) {
  try {
    Grammar::parse(text);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(GrammarParse, ErrorsNameLineAndColumn) {
  EXPECT_NE(error_of("root ::= \"a\" b\n").find("line 1, column 14: rule 'b' is used but never defined"),
            std::string::npos) << error_of("root ::= \"a\" b\n");
  EXPECT_NE(error_of("root ::= x\nx = \"a\"\n").find("line 2, column 3: expected '::='"), std::string::npos)
      << error_of("root ::= x\nx = \"a\"\n");
  EXPECT_NE(error_of("root ::= \"abc\n").find("unterminated literal"), std::string::npos);
  EXPECT_NE(error_of("root ::= [a-\n").find("line 1"), std::string::npos);
  EXPECT_NE(error_of("root ::= x \"a\"\nx ::= root | \"b\"\n").find("left-recursive"), std::string::npos)
      << error_of("root ::= x \"a\"\nx ::= root | \"b\"\n");
  EXPECT_NE(error_of("start ::= \"a\"\n").find("no rule 'root'"), std::string::npos);
  EXPECT_NE(error_of("root ::= \"a\"{3,2}\n").find("max < min"), std::string::npos);
  EXPECT_NE(error_of("root ::= \"\\q\"\n").find("unknown escape"), std::string::npos);
  EXPECT_EQ(error_of("# a comment\nroot ::= ( \"a\"\n  | \"b\" ) # trailing\n\nother ::= [^\\n]*\n"), "");
}

bool matches(const std::shared_ptr<const Grammar>& g, const std::string& s) {
  Matcher m(g);
  if (!m.allows(s)) return false;
  m.accept(s);
  return m.can_end();
}

TEST(GrammarMatch, RepetitionsAndAlternatives) {
  const auto g = Grammar::parse("root ::= \"a\" [0-9]{2,3} (\"x\" | \"yz\")*\n");
  for (const char* ok : {"a12", "a123", "a12x", "a123yzx", "a99xxyz"}) EXPECT_TRUE(matches(g, ok)) << ok;
  for (const char* bad : {"a1", "a1234", "b12", "a12y", "a12yx", ""}) EXPECT_FALSE(matches(g, bad)) << bad;
  Matcher m(g);
  EXPECT_TRUE(m.allows("a12y"));  // a prefix that may still end well
  EXPECT_FALSE(m.allows("a12q"));
  const auto fixed = Grammar::parse("root ::= \"ab\"{2}\n");
  Matcher f(fixed);
  f.accept("abab");
  EXPECT_TRUE(f.must_end());
}

// A regular grammar and the same language as an ECMAScript regex: on random
// strings over a small alphabet, both agree on every whole string and the
// matcher allows exactly the prefixes of some member.
TEST(GrammarMatch, AgreesWithARegexOnRandomStrings) {
  const auto g = Grammar::parse(
      "root ::= (\"ab\" | [c-e]+)? \"-\" tail\n"
      "tail ::= [^a]{1,2} | \"a\"+ \".\"\n");
  const std::regex re("^(ab|[c-e]+)?-([^a]{1,2}|a+\\.)$");
  std::mt19937 rng(std::random_device{}());
  const std::string alphabet = "abcde-.x";
  int members = 0;
  for (int i = 0; i < 4000; ++i) {
    std::string s;
    const int n = static_cast<int>(rng() % 7);
    for (int k = 0; k < n; ++k) s += alphabet[rng() % alphabet.size()];
    const bool want = std::regex_match(s, re);
    members += want;
    EXPECT_EQ(matches(g, s), want) << "'" << s << "'";
  }
  EXPECT_GT(members, 50);  // the sample reaches the language, not only its outside
}

TEST(GrammarMatch, Utf8SplitAcrossPiecesAndInvalidBytes) {
  const auto g = Grammar::parse("root ::= [\\u03b1-\\u03c9]+ \"!\"\n");  // Greek small letters
  const std::string text = "\xce\xb1\xce\xb2\xcf\x89!";              // "αβω!"
  for (size_t cut = 0; cut <= text.size(); ++cut) {
    Matcher m(g);
    ASSERT_TRUE(m.allows(text.substr(0, cut))) << cut;
    m.accept(text.substr(0, cut));
    EXPECT_EQ(m.can_end(), cut == text.size());
    m.accept(text.substr(cut));
    EXPECT_TRUE(m.can_end());
  }
  Matcher m(g);
  EXPECT_FALSE(m.allows("\xce\x41"));       // a broken sequence
  EXPECT_FALSE(m.allows("\xd0\xb0"));       // Cyrillic а: valid UTF-8, not in the class
  EXPECT_FALSE(m.allows("\xc0\x80"));       // overlong
  EXPECT_TRUE(m.allows("\xce"));            // may still become α..ο
  EXPECT_FALSE(m.allows("\xd1"));           // U+0440.. cannot
  const auto any = Grammar::parse("root ::= [^a]+\n");
  Matcher n(any);
  EXPECT_TRUE(n.allows("\xed\x9f"));        // U+D7C0..U+D7FF may follow
  EXPECT_FALSE(n.allows("\xed\xa0"));       // surrogates only: a dead end, refused now
  // A negated class whose ranges together cover every character a lead byte
  // can start: that byte is refused at once.
  Matcher cov(Grammar::parse("root ::= [^\\u0080-\\u03df\\u03e0-\\u07ff] \".\"\n"));
  EXPECT_FALSE(cov.allows("\xcf"));  // U+03C0..U+03FF: half in each range
  EXPECT_TRUE(cov.allows("a"));
}

// Grammars a hostile client sends: each is refused at parse (a few
// milliseconds, whatever the grammar asks) with the limit named, or parsed
// without recursion and matched right. They used to hang or overflow.
TEST(GrammarLimits, HostileGrammarsAreRefusedNamingTheLimit) {
  const auto refused = [](const std::string& text, const char* limit) {
    const std::string e = error_of(text);
    EXPECT_NE(e.find(limit), std::string::npos) << text.substr(0, 80) << " -> '" << e << "'";
  };
  // 30 bytes, 4097 ways to place the first "a".
  refused("root ::= (\"a\"?){0,4096}\n", "kMaxStacks");
  // 100,000 alternatives.
  std::string alts = "root ::= \"x0\"";
  for (int i = 1; i < 100000; ++i) alts += " | \"x" + std::to_string(i) + "\"";
  refused(alts + "\n", "kMaxStacks");
  // Each level doubles the ways to reach the first character.
  std::string doubling = "root ::= a0\n";
  for (int i = 0; i < 30; ++i) doubling += fmt::format("a{} ::= a{}? a{}?\n", i, i + 1, i + 1);
  doubling += "a30 ::= \"x\"\n";
  refused(doubling, "too ambiguous");
  // 40,000 nested groups: the recursive-descent parser stops at 256.
  refused("root ::= " + std::string(40000, '(') + "\"a\"" + std::string(40000, ')') + "\n", "kMaxNesting");
  // A chain of 60,000 rules each leaving a character to come: 60,000 open at once.
  std::string chain = "root ::= r0\n";
  for (int i = 0; i < 60000; ++i) chain += fmt::format("r{} ::= r{} \"x\"\n", i, i + 1);
  chain += "r60000 ::= \"y\"\n";
  refused(chain, "kMaxDepth");
  // 300 bytes that expand to 1.2 million elements.
  refused("root ::= \"" + std::string(300, 'a') + "\"{4096}\n", "kMaxElements");
  // More rules than 65,536.
  std::string rules = "root ::= \"a\"\n";
  for (int i = 0; i < 70000; ++i) rules += fmt::format("u{} ::= \"a\"\n", i);
  refused(rules, "kMaxRules");
}

TEST(GrammarLimits, LongChainsAndAmbiguityWithinLimitsStillMatch) {
  // 60,000 rules in a tail chain push nothing: one stack, no recursion.
  std::string chain = "root ::= r0\n";
  for (int i = 0; i < 60000; ++i) chain += fmt::format("r{} ::= r{}\n", i, i + 1);
  chain += "r60000 ::= \"y\" | \"-\" root\n";
  const auto c = Grammar::parse(chain);
  EXPECT_TRUE(matches(c, "y"));
  EXPECT_TRUE(matches(c, "---y"));
  EXPECT_FALSE(matches(c, "y-"));
  // ("a"?){0,n}: every count 0..n, never n + 1, though every "a" may be
  // any of the n optionals (distinct stacks are few; paths to them many).
  const auto g = Grammar::parse("root ::= (\"a\"?){0,200} \"b\"\n");
  EXPECT_TRUE(matches(g, "b"));
  EXPECT_TRUE(matches(g, std::string(200, 'a') + "b"));
  EXPECT_FALSE(matches(g, std::string(201, 'a') + "b"));
  Matcher m(g);
  m.accept(std::string(100, 'a'));
  EXPECT_LE(m.stacks().size(), 202u);
}

// Stacks that grow a level per character and pass a long chain of rules at
// each level: the matcher keeps one character's stacks as a trie of shared
// nodes; what it accepts must be exactly x^n y^m, m <= n (each "x" but the
// last leaves a b that takes one "y" or none).
TEST(GrammarLimits, DeepStacksThroughLongChainsMatchExactly) {
  std::string text = "root ::= a\na ::= \"x\" a b | \"x\"\nb ::= r0\n";
  for (int i = 0; i < 50; ++i) text += fmt::format("r{} ::= r{}\n", i, i + 1);
  text += "r50 ::= \"y\" | \"\"\n";
  const auto g = Grammar::parse(text);
  const std::string xs(100, 'x');
  EXPECT_TRUE(matches(g, xs));
  EXPECT_TRUE(matches(g, xs + std::string(99, 'y')));
  EXPECT_TRUE(matches(g, xs + std::string(57, 'y')));
  EXPECT_FALSE(matches(g, xs + std::string(100, 'y')));
  EXPECT_FALSE(matches(g, xs + "yx"));
  Matcher m(g);
  m.accept(xs);
  // "x" by either alternative of a, "y" for each of the 99 b's, or the end.
  EXPECT_EQ(m.stacks().size(), 102u);
  EXPECT_TRUE(m.can_end());
  // A stack deeper than kMaxDepth is refused, not followed.
  Matcher deep(Grammar::parse("root ::= a\na ::= \"x\" a \"y\" | \"x\"\n"));
  EXPECT_NO_THROW(deep.accept(std::string(1000, 'x')));
  EXPECT_THROW(deep.accept(std::string(100, 'x')), Error);
}

// Rules that can be empty are found in one pass over the grammar, whatever
// the order rules come in: a chain of 60,000 nullable rules, the last first.
TEST(GrammarLimits, NullableChainsAreLinear) {
  std::string text = "root ::= n0 \"z\"\n";
  for (int i = 60000; i-- > 0;) text += fmt::format("n{} ::= n{}\n", i, i + 1);
  text += "n60000 ::= \"b\"?\n";
  const auto g = Grammar::parse(text);
  EXPECT_TRUE(matches(g, "z"));
  EXPECT_TRUE(matches(g, "bz"));
  EXPECT_FALSE(matches(g, "bbz"));
  // n0 is nullable, so a rule that starts with it and refers back is left-recursive.
  EXPECT_NE(error_of(text + "loop ::= n0 loop \"q\"\n").find("left-recursive"), std::string::npos);
}

TEST(GrammarLimits, TheCacheGivesTheSameGrammarForTheSameText) {
  const std::string text = "root ::= \"cached\" [0-9]+\n";
  const auto a = parse_cached(text);
  const auto b = parse_cached(text);
  EXPECT_EQ(a.get(), b.get());
  EXPECT_NE(parse_cached(text, "root").get(), parse_cached("root ::= \"other\"\n").get());
  EXPECT_THROW(parse_cached("root ::= (\"a\"?){0,4096}\n"), Error);
}

class GrammarStageTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    file_ = new gguf::File(gguf::File::open(testing::stories()));
    tok_ = new Tokenizer(Tokenizer::from_gguf(*file_));
  }
  static void TearDownTestSuite() {
    delete tok_;
    delete file_;
  }
  static gguf::File* file_;
  static Tokenizer* tok_;
};
gguf::File* GrammarStageTest::file_ = nullptr;
Tokenizer* GrammarStageTest::tok_ = nullptr;

// The mask equals a check of every token's bytes with a matcher, step after
// step of a generation from random logits; the output is in the language.
TEST_F(GrammarStageTest, MaskEqualsPerTokenCheckAndOutputFitsTheGrammar) {
  const auto g = Grammar::parse(
      "root ::= \"The \" animal \" \" verb (\", and \" verb)? \".\"\n"
      "animal ::= \"cat\" | \"dog\" | \"bird\" | [a-z]{3,6}\n"
      "verb ::= \"ran\" | \"jumped\" | \"sat\"\n");
  std::mt19937 rng(std::random_device{}());
  std::normal_distribution<float> normal(0.0f, 3.0f);
  const auto n = static_cast<int32_t>(tok_->n_vocab());
  for (int trial = 0; trial < 5; ++trial) {
    auto stage = grammar::stage(g, *tok_);
    stage->accept(tok_->bos());  // a prompt token before the first apply: ignored
    Matcher ref(g);
    std::string out;
    for (int step = 0; step < 64; ++step) {
      Candidates c;
      for (int32_t id = 0; id < n; ++id) c.data.push_back({id, normal(rng)});
      stage->apply(c);
      int32_t best = -1;
      for (const TokenData& t : c.data) {
        const std::string piece = tok_->token_to_piece(t.id, false);
        const bool want = tok_->is_eog(t.id) ? ref.can_end() : !piece.empty() && ref.allows(piece);
        ASSERT_EQ(std::isfinite(t.logit), want) << "token " << t.id << " '" << piece << "' after '" << out << "'";
        if (want && (best < 0 || t.logit > c.data[static_cast<size_t>(best)].logit)) best = t.id;
      }
      ASSERT_GE(best, 0);
      if (tok_->is_eog(best)) break;
      stage->accept(best);
      ref.accept(tok_->token_to_piece(best, false));
      out += tok_->token_to_piece(best, false);
      if (ref.must_end()) break;
    }
    EXPECT_TRUE(ref.can_end()) << out;
    EXPECT_TRUE(std::regex_match(out, std::regex("^The (cat|dog|bird|[a-z]{3,6}) (ran|jumped|sat)(, and (ran|jumped|sat))?\\.$")))
        << out;
  }
}

// With a pick limit k (top-k, or 1 when greedy), what top-k keeps after the
// stage is the k best tokens that fit, as after the whole mask; fewer only
// when fewer fit.
TEST_F(GrammarStageTest, APickLimitKeepsTheBestTokensThatFit) {
  const auto g = Grammar::parse("root ::= [a-z ]{1,30} \".\"\n");
  std::mt19937 rng(std::random_device{}());
  std::normal_distribution<float> normal(0.0f, 3.0f);
  const auto n = static_cast<int32_t>(tok_->n_vocab());
  for (int32_t limit : {1, 5, 40, 400}) {
    auto stage = grammar::stage(g, *tok_);
    Matcher ref(g);
    for (int step = 0; step < 12; ++step) {
      Candidates c;
      for (int32_t id = 0; id < n; ++id) c.data.push_back({id, normal(rng)});
      c.pick_limit = limit;
      std::vector<TokenData> fit;  // the reference: every token checked, best first
      for (const TokenData& t : c.data) {
        const std::string piece = tok_->token_to_piece(t.id, false);
        if (tok_->is_eog(t.id) ? ref.can_end() : !piece.empty() && ref.allows(piece)) fit.push_back(t);
      }
      std::sort(fit.begin(), fit.end(), [](const TokenData& a, const TokenData& b) {
        return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
      });
      std::set<int32_t> fits_at_all;
      for (const TokenData& t : fit) fits_at_all.insert(t.id);
      fit.resize(std::min(fit.size(), static_cast<size_t>(limit)));
      stage->apply(c);
      for (const TokenData& t : c.data) {  // nothing that does not fit survives
        if (std::isfinite(t.logit)) {
          ASSERT_TRUE(fits_at_all.contains(t.id)) << t.id;
        }
      }
      // What top-k then keeps: the best `limit` of the tokens left (the
      // stage may leave more, from a whole mask: top-k drops them).
      std::vector<TokenData> left;
      for (const TokenData& t : c.data) {
        if (std::isfinite(t.logit)) left.push_back(t);
      }
      std::sort(left.begin(), left.end(), [](const TokenData& a, const TokenData& b) {
        return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
      });
      left.resize(std::min(left.size(), static_cast<size_t>(limit)));
      std::vector<int32_t> kept, want;
      for (const TokenData& t : left) kept.push_back(t.id);
      for (const TokenData& t : fit) want.push_back(t.id);
      ASSERT_EQ(kept, want) << "limit " << limit << " step " << step;
      const int32_t pick = fit.front().id;
      if (tok_->is_eog(pick)) break;
      stage->accept(pick);
      ref.accept(tok_->token_to_piece(pick, false));
    }
  }
}

}  // namespace
}  // namespace tessera::grammar

namespace tessera::grammar {
namespace {

bool fits(const std::string& grammar_text, const std::string& doc) {
  return matches(Grammar::parse(grammar_text), doc);
}

// Integer bounds, against the arithmetic, on fresh random ranges (negative,
// positive, across digit counts, one side open) and numbers around them.
TEST(JsonSchema, IntegerRangesAreExact) {
  std::mt19937_64 rng(std::random_device{}());
  auto pick = [&] {
    const int digits = 1 + static_cast<int>(rng() % 5);
    int64_t v = static_cast<int64_t>(rng() % static_cast<uint64_t>(std::pow(10, digits)));
    return rng() % 3 == 0 ? -v : v;
  };
  for (int trial = 0; trial < 40; ++trial) {
    int64_t lo = pick(), hi = pick();
    if (lo > hi) std::swap(lo, hi);
    nlohmann::json schema = {{"type", "integer"}};
    const int open = static_cast<int>(rng() % 4);  // 0 both, 1 no min, 2 no max, 3 exclusive
    if (open != 1) schema[open == 3 ? "exclusiveMinimum" : "minimum"] = open == 3 ? lo - 1 : lo;
    if (open != 2) schema[open == 3 ? "exclusiveMaximum" : "maximum"] = open == 3 ? hi + 1 : hi;
    const auto g = Grammar::parse(json_schema_to_grammar(schema));
    std::vector<int64_t> probes = {lo, hi, lo - 1, hi + 1, 0, -1, 1, 10 * hi + 7, lo * 10, 99999999, -99999999};
    for (int k = 0; k < 60; ++k) probes.push_back(lo - 40 + static_cast<int64_t>(rng() % static_cast<uint64_t>(hi - lo + 81)));
    for (int64_t v : probes) {
      const bool want = (open == 1 || v >= lo) && (open == 2 || v <= hi);
      EXPECT_EQ(matches(g, std::to_string(v)), want) << schema.dump() << " value " << v;
    }
    EXPECT_FALSE(matches(g, "007"));  // no leading zeros
  }
}

TEST(JsonSchema, ObjectsArraysStringsAndReferences) {
  const nlohmann::ordered_json schema = nlohmann::ordered_json::parse(R"({
    "type": "object",
    "properties": {
      "name": {"type": "string", "minLength": 2, "maxLength": 5},
      "age": {"type": "integer", "minimum": 0, "maximum": 150},
      "tags": {"type": "array", "items": {"enum": ["a", "b", 3]}, "minItems": 1, "maxItems": 2},
      "born": {"type": "string", "format": "date"},
      "id": {"type": "string", "format": "uuid"},
      "kind": {"const": "person"},
      "next": {"$ref": "#/$defs/node"}
    },
    "required": ["name", "age"],
    "$defs": {"node": {"type": ["object", "null"], "properties": {"v": {"type": "number"}, "next": {"$ref": "#/$defs/node"}}, "required": ["v"]}}
  })");
  const std::string g = json_schema_to_grammar(schema);
  for (const char* ok : {
           R"({"name": "Al", "age": 3})",
           R"({"name":"Bobby","age":150,"tags":["a",3],"born":"2024-02-29"})",
           R"({"name": "Al", "age": 3, "born": "2000-02-29"})",
           R"({"name": "Al", "age": 3, "born": "1999-12-31"})",
           R"({ "name": "Al", "age": 0, "id": "123e4567-e89b-12d3-a456-426614174000", "kind": "person" })",
           R"({"name": "Al", "age": 1, "next": {"v": 1.5, "next": {"v": -2e3, "next": null}}})",
       }) {
    EXPECT_TRUE(fits(g, ok)) << ok;
  }
  for (const char* bad : {
           R"({"age": 3, "name": "Al"})",          // required ones come in order
           R"({"name": "A", "age": 3})",           // too short
           R"({"name": "Albert", "age": 3})",      // too long
           R"({"name": "Al", "age": 151})",
           R"({"name": "Al", "age": 3, "tags": []})",
           R"({"name": "Al", "age": 3, "tags": ["c"]})",
           R"({"name": "Al", "age": 3, "born": "2024-13-01"})",
           R"({"name": "Al", "age": 3, "born": "2023-02-29"})",  // not a leap year
           R"({"name": "Al", "age": 3, "born": "1900-02-29"})",  // nor a century not divisible by 400
           R"({"name": "Al", "age": 3, "born": "2024-04-31"})",
           R"({"name": "Al", "age": 3, "kind": "robot"})",
           R"({"name": "Al", "age": 3, "other": 1})",  // no additionalProperties
           R"({"name": "Al", "age": 1, "next": {"next": null}})",
       }) {
    EXPECT_FALSE(fits(g, bad)) << bad;
  }
  // prefixItems, anyOf, allOf, additionalProperties with a schema.
  const std::string g2 = json_schema_to_grammar(nlohmann::ordered_json::parse(R"({
    "anyOf": [
      {"type": "array", "prefixItems": [{"type": "boolean"}, {"type": "string"}], "items": false},
      {"allOf": [{"properties": {"a": {"type": "integer"}}, "required": ["a"]},
                 {"properties": {"b": {"type": "null"}}}],
       "additionalProperties": {"type": "boolean"}}
    ]})"));
  EXPECT_TRUE(fits(g2, R"([true, "x"])"));
  EXPECT_FALSE(fits(g2, R"([true, "x", 1])"));
  EXPECT_TRUE(fits(g2, R"({"a": 1, "b": null, "zz": false})"));
  EXPECT_FALSE(fits(g2, R"({"a": 1, "zz": 3})"));
  // A type list keeps integer bounds on its integer branch only.
  const std::string g3 = json_schema_to_grammar(nlohmann::ordered_json::parse(R"({"type": ["integer", "null"], "minimum": 2, "maximum": 5})"));
  EXPECT_TRUE(fits(g3, "3"));
  EXPECT_TRUE(fits(g3, "null"));
  EXPECT_FALSE(fits(g3, "6"));
  // prefixItems with more items counted by minItems / maxItems.
  const std::string g4 = json_schema_to_grammar(nlohmann::ordered_json::parse(
      R"({"type": "array", "prefixItems": [{"type": "boolean"}], "items": {"type": "integer"}, "minItems": 2, "maxItems": 3})"));
  EXPECT_FALSE(fits(g4, "[true]"));
  EXPECT_TRUE(fits(g4, "[true, 1]"));
  EXPECT_TRUE(fits(g4, "[false, 1, 2]"));
  EXPECT_FALSE(fits(g4, "[false, 1, 2, 3]"));
  EXPECT_TRUE(fits(json_grammar(), R"({"x": [1, {"y": null}], "z": "w"})"));
  EXPECT_FALSE(fits(json_grammar(), R"([1])"));
}

// With no property required, any of them may come first: two rules per
// property (not n^2/2 copies) give every ordered subset, then the others.
TEST(JsonSchema, OptionalPropertiesAreOrderedSubsetsInLinearSize) {
  const std::string g = json_schema_to_grammar(nlohmann::ordered_json::parse(R"({
    "type": "object",
    "properties": {"a": {"type": "integer"}, "b": {"type": "null"}, "c": {"type": "boolean"}},
    "additionalProperties": {"type": "integer"}})"));
  for (const char* ok : {"{}", R"({"a": 1})", R"({"b": null, "c": true})", R"({"a": 1, "c": false, "x": 2})",
                         R"({"x": 2, "y": 3})", R"({"c": true})", R"({"a": 1, "b": null, "c": true})"}) {
    EXPECT_TRUE(fits(g, ok)) << ok;
  }
  for (const char* bad : {R"({,})", R"({"a": 1,})", R"({"x": true})", R"({"a": 1 "b": null})"}) {
    EXPECT_FALSE(fits(g, bad)) << bad;
  }
  const std::string closed = json_schema_to_grammar(nlohmann::ordered_json::parse(
      R"({"properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}, "additionalProperties": false})"));
  EXPECT_TRUE(fits(closed, R"({"b": 2})"));
  EXPECT_TRUE(fits(closed, R"({"a": 1, "b": 2})"));
  EXPECT_FALSE(fits(closed, R"({"b": 2, "a": 1})"));  // in the schema's order
  EXPECT_FALSE(fits(closed, R"({"a": 1, "a": 2})"));
  EXPECT_FALSE(fits(closed, R"({"x": 2})"));
  // 3,000 optional properties: a grammar that grows by a constant per
  // property, and a matcher that follows it.
  nlohmann::ordered_json many = {{"type", "object"}, {"properties", nlohmann::ordered_json::object()}};
  for (int i = 0; i < 3000; ++i) many["properties"]["p" + std::to_string(i)] = {{"type", "integer"}};
  const std::string big = json_schema_to_grammar(many);
  EXPECT_LT(big.size(), 3000u * 200);
  EXPECT_TRUE(fits(big, R"({"p7": 1, "p2999": 2})"));
  EXPECT_FALSE(fits(big, R"({"p2999": 1, "p7": 2})"));
}

TEST(JsonSchema, RefChainsDeeperThanTheLimitAreRefused) {
  nlohmann::ordered_json s = {{"$ref", "#/$defs/d0"}, {"$defs", nlohmann::ordered_json::object()}};
  for (int i = 0; i < 10000; ++i) s["$defs"]["d" + std::to_string(i)] = {{"$ref", "#/$defs/d" + std::to_string(i + 1)}};
  s["$defs"]["d10000"] = {{"type", "integer"}};
  try {
    json_schema_to_grammar(s);
    ADD_FAILURE() << "a 10,000-deep $ref chain was converted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("deeper than 128 levels"), std::string::npos) << e.what();
  }
  // 100 deep is within the limit.
  nlohmann::ordered_json ok = {{"$ref", "#/$defs/d0"}, {"$defs", nlohmann::ordered_json::object()}};
  for (int i = 0; i < 100; ++i) ok["$defs"]["d" + std::to_string(i)] = {{"$ref", "#/$defs/d" + std::to_string(i + 1)}};
  ok["$defs"]["d100"] = {{"type", "integer"}};
  EXPECT_TRUE(fits(json_schema_to_grammar(ok), "42"));
}

TEST(JsonSchema, UnsupportedKeywordsNameTheirPointer) {
  auto error = [](const char* schema) {
    try {
      json_schema_to_grammar(nlohmann::ordered_json::parse(schema));
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(error(R"({"properties": {"a/b": {"type": "string", "pattern": "x+"}}})").find("at '/properties/a~1b/pattern'"),
            std::string::npos) << error(R"({"properties": {"a/b": {"type": "string", "pattern": "x+"}}})");
  EXPECT_NE(error(R"({"type": "number", "minimum": 1})").find("'/minimum'"), std::string::npos);
  EXPECT_NE(error(R"({"$ref": "#/$defs/missing"})").find("no target"), std::string::npos);
  EXPECT_NE(error(R"({"type": "string", "format": "email"})").find("format 'email'"), std::string::npos);
  EXPECT_NE(error(R"({"type": "integer", "minimum": 5, "maximum": 4})").find("empty"), std::string::npos);
  EXPECT_NE(error(R"({"type": "integer", "minimum": 1e300})").find("10^18"), std::string::npos);
  EXPECT_NE(error(R"({"type": 5})").find("wrong type"), std::string::npos);
  EXPECT_NE(error(R"({"allOf": [3]})").find("'/allOf/0'"), std::string::npos);
  EXPECT_NE(error(R"({"type": "array", "prefixItems": [true, true], "maxItems": 1})").find("'/maxItems'"), std::string::npos);
  // Counts are whole numbers in range; a float past int64 once reached an integer conversion (UB).
  EXPECT_NE(error(R"({"type": "array", "minItems": 3.3e29})").find("'/minItems'"), std::string::npos);
  EXPECT_NE(error(R"({"type": "array", "maxItems": 2.5})").find("whole number"), std::string::npos);
  EXPECT_NE(error(R"({"type": "string", "minLength": -1})").find("'/minLength'"), std::string::npos);
  EXPECT_NE(error(R"({"type": "string", "maxLength": "3"})").find("'/maxLength'"), std::string::npos);
  EXPECT_NE(error(R"({"type": "string", "maxLength": 1e300})").find("from 0 to 4096"), std::string::npos);
  EXPECT_TRUE(fits(json_schema_to_grammar(nlohmann::ordered_json::parse(R"({"type": "array", "minItems": 2.0})")),
                   "[1, 2]"));
}

// A $ref whose last segment is a name the grammar keeps (json-*, wrap-*,
// root, ws) once made the rule numbering loop forever (found by
// fuzz_json_schema: "#x/$defs/json-time_98node"). Such names get a prefix.
TEST(JsonSchema, RefsNamedLikeReservedRulesConvert) {
  for (const char* name : {"json-time", "wrap-x", "root", "ws", ""}) {
    SCOPED_TRACE(name);
    nlohmann::ordered_json s = {{"type", "object"},
                                {"properties", {{"a", {{"$ref", std::string("#/$defs/") + name}}},
                                                {"b", {{"$ref", std::string("#/$defs/") + name}}}}},
                                {"$defs", {{name, {{"type", "integer"}}}}}};
    const std::string g = json_schema_to_grammar(s);
    EXPECT_TRUE(fits(g, R"({"a": 1, "b": 2})")) << g;
  }
}

}  // namespace
}  // namespace tessera::grammar
