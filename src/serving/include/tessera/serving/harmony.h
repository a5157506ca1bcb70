// gpt-oss's reply format ("harmony"), read as it streams. A reply is a run
// of messages, each `<|start|>assistant` (implied for the first: the prompt
// ends with it), a header, `<|message|>`, a body and `<|end|>` (the last one
// is ended by <|return|> or <|call|>, which end generation and never reach
// the text). The header names the message's channel and recipient:
//   <|channel|>analysis                       thinking: reasoning
//   <|channel|>final                          the answer: content (what
//                                             follows its <|end|> is dropped)
//   <|channel|>commentary                     a preamble: content
//   to=functions.NAME ... (before or after    a call of tool NAME, its body
//   <|channel|>commentary or analysis,        the arguments as JSON
//   maybe <|constrain|>json)
//   to=anything.else                          a built-in tool's call: dropped
// A stray `<|channel|>commentary to=assistant` before the real channel (as
// gpt-oss-20b writes it) is skipped: the last <|channel|> counts. This is
// what llama.cpp's gpt-oss parser accepts; where it would fail the request,
// tessera keeps the text instead: output that does not start like a header
// is all content, as is everything after an unknown or over-long header; a
// call to an undeclared tool is dropped; a call whose arguments do not parse
// is kept as content, header and body.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tessera/serving/tool_calls.h"

namespace tessera::serving {

class HarmonyParser {
 public:
  // `extract_reasoning`: analysis bodies go to Parts::reasoning; false
  // (reasoning_format none): each analysis message goes to the content as
  // written, header and <|end|> included. `tool_names`: the tools the request
  // declared (none: no call is taken).
  explicit HarmonyParser(bool extract_reasoning, std::vector<std::string> tool_names = {});

  struct Parts {
    std::string reasoning, content;
  };
  // What is certain after `text`: a marker cut between two pieces waits.
  Parts feed(std::string_view text);
  Parts finish();
  std::vector<ToolCall> take_calls() { return std::exchange(calls_, {}); }

  // Headers longer than this (without <|message|>) are not headers.
  static constexpr size_t kMaxHeader = 256;

 private:
  enum class State {
    kHeader,     // between <|start|>assistant and <|message|>
    kBetween,    // after <|end|>: expecting <|start|>assistant
    kReasoning,  // an analysis body
    kContent,    // a final or commentary body
    kCall,       // a call's arguments
    kSkip,       // a built-in tool's call, until <|end|>
    kIgnore,     // after the final answer or a call
    kPlain,      // not harmony: everything is content
  };
  // Routes held_ (the text not yet handled) through the states; `last`: no
  // more text comes.
  void run(Parts& out, bool last);
  void start_body(Parts& out);
  void end_call(Parts& out);

  bool extract_;
  std::vector<std::string> names_;
  State state_ = State::kHeader;
  bool first_ = true;   // the first message (its <|start|>assistant was the prompt's)
  bool final_ = false;  // the current content body is the final channel's
  std::string held_;    // text not yet routed
  std::string header_;  // the current message's header
  std::string body_;    // a call's arguments so far
  std::string call_name_;
  std::vector<ToolCall> calls_;
};

// The whole reply at once.
struct HarmonyOutput {
  std::string reasoning, content;
  std::vector<ToolCall> calls;
};
HarmonyOutput parse_harmony(std::string_view text, bool extract_reasoning,
                            std::vector<std::string> tool_names = {});

}  // namespace tessera::serving
