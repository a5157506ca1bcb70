// Tool calls (OpenAI's `tools`, `tool_choice`, `parallel_tool_calls`): the
// format a chat template's model writes its calls in, a grammar that forces
// a valid call when one is required, and a parser that turns the model's
// output back into calls as it streams.
//
// Formats, chosen from the template's source as llama.cpp chooses them:
//   Hermes (Qwen 2.5, Qwen 3, Hermes 2/3):
//     <tool_call>{"name": N, "arguments": {...}}</tool_call>, one per call;
//   Llama 3.1-3.3: {"name": N, "parameters": {...}} as the whole answer,
//     after an optional <|python_tag|> (which may instead start Python code:
//     a call of the tool named python or ipython, {"code": ...});
//   Mistral (Nemo and its kin): [TOOL_CALLS][{"name": N, "arguments": {...},
//     "id": "abcdefghi"}, ...];
//   Granite 3.x: <|tool_call|>[{"name": N, "arguments": {...}}, ...];
//   harmony (gpt-oss): a commentary message to=functions.N whose body is
//     the arguments (harmony.h parses it, with the reply's channels);
//   generic (any other template): the answer is one JSON object,
//     {"tool_call": {"name": N, "arguments": {...}}}, {"tool_calls": [...]}
//     with parallel calls, or {"response": "text"}; a grammar keeps the model
//     to it and the tools are described in a system message.
// Output that starts like a call but does not parse as one is kept as content.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace tessera::serving {

enum class ToolFormat { kGeneric, kHermes, kLlama3, kMistral, kGranite, kHarmony };
std::string_view tool_format_name(ToolFormat f);
ToolFormat detect_tool_format(std::string_view template_source);

// What a template does with tools: its format, whether it prints `tools`
// and whether it prints an assistant message's `tool_calls`.
struct TemplateTools {
  ToolFormat format = ToolFormat::kGeneric;
  bool prints_tools = false;
  bool prints_calls = false;
};
TemplateTools template_tools(std::string_view template_source);

// One call parsed from the output: arguments as a JSON text (OpenAI's
// function.arguments string).
struct ToolCall {
  std::string id;
  std::string name;
  std::string arguments;
};

// A request's tools as the server and the Node package read them.
struct ToolRequest {
  enum class Choice { kAuto, kNone, kRequired, kNamed };
  nlohmann::ordered_json tools = nlohmann::ordered_json::array();  // checked: [{type, function}]
  Choice choice = Choice::kAuto;
  std::string named;      // with kNamed
  bool parallel = false;  // parallel_tool_calls (llama-server's default: false)
  ToolFormat format = ToolFormat::kGeneric;
  // Tools given and calls allowed.
  bool active() const { return !tools.empty() && choice != Choice::kNone; }
  bool forced() const { return choice == Choice::kRequired || choice == Choice::kNamed; }
};

// Reads `tools`, `tool_choice` and `parallel_tool_calls` from a request
// body; nothing when it has no tools. Throws Error(kInvalidArgument) naming
// the field: a tool that is not {"type": "function", "function": {"name",
// "description"?, "parameters"?}}, a name outside [A-Za-z0-9_.-]{1,64} or
// given twice, a tool_choice naming no tool, a parameters schema the
// grammar cannot express (when a grammar is needed).
std::optional<ToolRequest> parse_tool_request(const nlohmann::ordered_json& body, ToolFormat format);

// The GBNF grammar the request needs: a call of one of the tools (or of the
// named one), with arguments valid against its parameters schema, in the
// format's syntax, when the choice is required or named; for the generic
// format, always (a call or {"response": ...}); otherwise none.
std::optional<std::string> tool_grammar(const ToolRequest& r);

// Markers a format's calls start with that tokenizers keep as control
// tokens ([TOOL_CALLS], <|python_tag|>, <|tool_call|>): the output must
// render them as text for the parser to see them.
std::vector<std::string> tool_markers(ToolFormat f);

// A new id: "call_" and 24 random letters and digits, or 9 for Mistral
// (whose template refuses any other length).
std::string new_tool_call_id(ToolFormat f);

// The messages as the template gets them: each assistant tool call's
// arguments (a JSON text on the wire) as the object templates print with
// tojson. A template that does not print tool_calls gets the calls in the
// content, as the model writes them (Granite's prints only the content). A
// template that knows no tools gets them described in a system message
// with the generic format, and tool results as user messages.
nlohmann::ordered_json tool_messages(const nlohmann::ordered_json& messages,
                                     const nlohmann::ordered_json& tools, const TemplateTools& t);

// Output to calls, as it streams: feed() returns the content that cannot
// be part of a call any more; calls found so far come from take_calls();
// finish() returns what is left, a call that does not parse kept as text.
class ToolCallParser {
 public:
  // `forced`: a grammar made the output a call, so it may lack the marker
  // control tokens the grammar cannot write ([TOOL_CALLS], <|tool_call|>).
  ToolCallParser(ToolFormat format, bool forced, std::vector<std::string> tool_names = {});

  std::string feed(std::string_view text);
  std::string finish();
  std::vector<ToolCall> take_calls() { return std::exchange(calls_, {}); }

 private:
  enum class State { kContent, kCall, kWhole };
  // A Hermes call's body: "" when it parses, else its text for the content.
  std::string end_call(const std::string& body, bool last);
  // A whole-output call (after its marker); false when it does not parse.
  bool parse_calls(std::string_view text, std::string& content);

  ToolFormat format_;
  bool forced_;
  std::vector<std::string> names_;
  State state_ = State::kContent;
  bool started_ = false;     // a non-space character came
  bool emitted_ = false;     // content that is not space went out
  bool after_call_ = false;  // a call just ended: spaces next are dropped
  std::string whole_prefix_;  // the marker (or spaces) before a whole-output call
  std::string held_;
  std::vector<ToolCall> calls_;
};

// The whole output at once: its content and calls.
struct ParsedToolOutput {
  std::string content;
  std::vector<ToolCall> calls;
};
ParsedToolOutput parse_tool_output(ToolFormat format, std::string_view text, bool forced = false,
                                   std::vector<std::string> tool_names = {});

}  // namespace tessera::serving
