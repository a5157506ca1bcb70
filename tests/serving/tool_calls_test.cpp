// Tool calls: the format each real template's model writes, the parser per
// format (whole, streamed a byte at a time, several calls, malformed output
// kept as content), the request's fields, the grammar that forces a call,
// rendering tools and tool history through real templates, and forced calls
// sampled from stories260K.
#include <gtest/gtest.h>

#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "models/model_test_util.h"
#include "tessera/backends/builtin.h"
#include "tessera/core/error.h"
#include "tessera/gguf/gguf.h"
#include "tessera/grammar/grammar.h"
#include "tessera/models/model.h"
#include "tessera/runtime/runtime.h"
#include "tessera/serving/chat.h"
#include "tessera/serving/serving.h"
#include "tessera/serving/tool_calls.h"

namespace tessera::serving {
namespace {

using nlohmann::ordered_json;

std::string read_template(const std::string& name) {
  std::ifstream in(testing::fixtures_dir() + "/chat-templates/" + name + ".jinja");
  EXPECT_TRUE(in.good()) << name;
  return {std::istreambuf_iterator<char>(in), {}};
}

// What a parse gives, ids aside (they are random unless the output has one).
struct Parsed {
  std::string content;
  std::vector<std::pair<std::string, std::string>> calls;  // name, arguments
  bool operator==(const Parsed&) const = default;
};

Parsed whole(ToolFormat f, std::string_view text, bool forced = false, std::vector<std::string> names = {}) {
  ParsedToolOutput p = parse_tool_output(f, text, forced, std::move(names));
  Parsed out{p.content, {}};
  for (const ToolCall& c : p.calls) {
    EXPECT_FALSE(c.id.empty());
    out.calls.emplace_back(c.name, c.arguments);
  }
  return out;
}

// The same text fed a byte at a time: the parser must hold back whatever
// may still become a call, and give the same answer.
Parsed streamed(ToolFormat f, std::string_view text, bool forced = false, std::vector<std::string> names = {}) {
  ToolCallParser p(f, forced, std::move(names));
  Parsed out;
  for (char c : text) {
    out.content += p.feed(std::string_view(&c, 1));
    for (const ToolCall& call : p.take_calls()) out.calls.emplace_back(call.name, call.arguments);
  }
  out.content += p.finish();
  for (const ToolCall& call : p.take_calls()) out.calls.emplace_back(call.name, call.arguments);
  return out;
}

void expect_parse(ToolFormat f, std::string_view text, const Parsed& want, bool forced = false,
                  std::vector<std::string> names = {}) {
  EXPECT_EQ(whole(f, text, forced, names), want) << "whole: " << text;
  EXPECT_EQ(streamed(f, text, forced, names), want) << "streamed: " << text;
}

TEST(ToolFormat, ChosenFromTheTemplate) {
  const std::pair<const char*, ToolFormat> cases[] = {
      {"Qwen-Qwen2.5-7B-Instruct", ToolFormat::kHermes},
      {"Qwen-Qwen3-0.6B", ToolFormat::kHermes},
      {"meta-llama-Llama-3.1-8B-Instruct", ToolFormat::kLlama3},
      {"meta-llama-Llama-3.2-3B-Instruct", ToolFormat::kLlama3},
      {"mistralai-Mistral-Nemo-Instruct-2407", ToolFormat::kMistral},
      {"ibm-granite-granite-3.3-2B-Instruct", ToolFormat::kGranite},
      {"google-gemma-2-2b-it", ToolFormat::kGeneric},
      {"microsoft-Phi-3.5-mini-instruct", ToolFormat::kGeneric},
      {"HuggingFaceTB-SmolLM3-3B", ToolFormat::kGeneric},
  };
  for (const auto& [name, format] : cases) {
    EXPECT_EQ(tool_format_name(detect_tool_format(read_template(name))), tool_format_name(format)) << name;
  }
}

TEST(ToolCallParser, Hermes) {
  const ToolFormat f = ToolFormat::kHermes;
  expect_parse(f, "Just text, no call.", {"Just text, no call.", {}});
  expect_parse(f, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>",
               {"", {{"get_weather", R"({"city":"Paris"})"}}});
  // Several calls, text before them; whitespace between calls is not content.
  expect_parse(f,
               "Let me check.\n<tool_call>\n{\"name\": \"a\", \"arguments\": {\"x\": 1}}\n</tool_call>\n"
               "<tool_call>\n{\"name\": \"b\", \"arguments\": {}}\n</tool_call>\n",
               {"Let me check.\n", {{"a", R"({"x":1})"}, {"b", "{}"}}});
  // Arguments as a JSON text are kept as that text.
  expect_parse(f, "<tool_call>{\"name\": \"a\", \"arguments\": \"{\\\"x\\\": 2}\"}</tool_call>",
               {"", {{"a", R"({"x": 2})"}}});
  // The closing tag missing at the end: the call still parses.
  expect_parse(f, "<tool_call>\n{\"name\": \"a\", \"arguments\": {\"k\": [1, 2]}}",
               {"", {{"a", R"({"k":[1,2]})"}}});
  // Malformed: kept as content, tags and all.
  expect_parse(f, "<tool_call>{\"name\": \"a\", \"arguments\": {oops}}</tool_call> after",
               {"<tool_call>{\"name\": \"a\", \"arguments\": {oops}}</tool_call> after", {}});
  expect_parse(f, "<tool_call>{\"arguments\": {}}</tool_call>", {"<tool_call>{\"arguments\": {}}</tool_call>", {}});
  expect_parse(f, "<tool_call>not json", {"<tool_call>not json", {}});
  // A prefix of the tag that does not become it is content.
  expect_parse(f, "a <tool_ca and <b>", {"a <tool_ca and <b>", {}});
}

TEST(ToolCallParser, Llama3) {
  const ToolFormat f = ToolFormat::kLlama3;
  expect_parse(f, "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Oslo\"}}",
               {"", {{"get_weather", R"({"city":"Oslo"})"}}});
  expect_parse(f, "<|python_tag|>{\"name\": \"f\", \"parameters\": {}}", {"", {{"f", "{}"}}});
  // Llama 3.2 writes several calls one after another.
  expect_parse(f, "  {\"name\": \"a\", \"parameters\": {\"n\": 1}}; {\"name\": \"b\", \"parameters\": {}}",
               {"", {{"a", R"({"n":1})"}, {"b", "{}"}}});
  // Code after <|python_tag|> is a call of the python tool when there is one.
  expect_parse(f, "<|python_tag|>print(6 * 7)", {"", {{"python", R"j({"code":"print(6 * 7)"})j"}}}, false,
               {"python"});
  expect_parse(f, "<|python_tag|>print(6 * 7)", {"<|python_tag|>print(6 * 7)", {}});
  // Text is text; a JSON object that is no call is kept.
  expect_parse(f, "The weather is {sunny}.", {"The weather is {sunny}.", {}});
  expect_parse(f, "{\"answer\": 42}", {"{\"answer\": 42}", {}});
}

TEST(ToolCallParser, Mistral) {
  const ToolFormat f = ToolFormat::kMistral;
  expect_parse(f, "[TOOL_CALLS][{\"name\": \"a\", \"arguments\": {\"q\": \"x\"}, \"id\": \"abcDEF123\"}]",
               {"", {{"a", R"({"q":"x"})"}}});
  const ParsedToolOutput p = parse_tool_output(f, R"([TOOL_CALLS][{"name": "a", "arguments": {}, "id": "abcDEF123"}])");
  ASSERT_EQ(p.calls.size(), 1u);
  EXPECT_EQ(p.calls[0].id, "abcDEF123");
  expect_parse(f, "[TOOL_CALLS][{\"name\": \"a\", \"arguments\": {}}, {\"name\": \"b\", \"arguments\": {\"z\": null}}]",
               {"", {{"a", "{}"}, {"b", R"({"z":null})"}}});
  // Forced by a grammar, the marker (a control token) may be missing.
  expect_parse(f, "[{\"name\": \"a\", \"arguments\": {}}]", {"", {{"a", "{}"}}}, true);
  expect_parse(f, "[1, 2]", {"[1, 2]", {}});
  expect_parse(f, "Sure.[TOOL_CALLS][{\"name\": }]", {"Sure.[TOOL_CALLS][{\"name\": }]", {}});
}

TEST(ToolCallParser, Granite) {
  const ToolFormat f = ToolFormat::kGranite;
  expect_parse(f, "<|tool_call|>[{\"name\": \"a\", \"arguments\": {\"x\": true}}]", {"", {{"a", R"({"x":true})"}}});
  expect_parse(f, "No tools needed.", {"No tools needed.", {}});
}

TEST(ToolCallParser, Generic) {
  const ToolFormat f = ToolFormat::kGeneric;
  expect_parse(f, R"({"tool_call": {"name": "a", "arguments": {"x": 1}}})", {"", {{"a", R"({"x":1})"}}});
  expect_parse(f, R"({"tool_calls": [{"name": "a", "arguments": {}}, {"name": "b", "arguments": {}}]})",
               {"", {{"a", "{}"}, {"b", "{}"}}});
  expect_parse(f, R"( {"response": "Hello there"})", {"Hello there", {}});
  expect_parse(f, R"({"tool_call": 3})", {R"({"tool_call": 3})", {}});
  expect_parse(f, "plain text", {"plain text", {}});
}

ordered_json weather_tools() {
  return ordered_json::parse(R"([
    {"type": "function", "function": {"name": "get_weather", "description": "The weather in a city",
      "parameters": {"type": "object", "properties": {"city": {"type": "string"},
                     "unit": {"enum": ["c", "f"]}}, "required": ["city", "unit"]}}},
    {"type": "function", "function": {"name": "add", "description": "Adds two integers",
      "parameters": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"$ref": "#/$defs/n"}},
                     "required": ["a", "b"], "$defs": {"n": {"type": "integer", "minimum": 0}}}}}
  ])");
}

TEST(ToolRequest, FieldsAreChecked) {
  auto parse = [](const std::string& body) {
    return parse_tool_request(ordered_json::parse(body), ToolFormat::kHermes);
  };
  EXPECT_FALSE(parse(R"({"messages": []})").has_value());
  const std::optional<ToolRequest> r =
      parse(R"({"tools": )" + weather_tools().dump() + R"(, "tool_choice": {"type": "function", "function": {"name": "add"}}, "parallel_tool_calls": true})");
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->choice, ToolRequest::Choice::kNamed);
  EXPECT_EQ(r->named, "add");
  EXPECT_TRUE(r->parallel && r->active() && r->forced());
  const std::pair<const char*, const char*> bad[] = {
      {R"({"tools": {}})", "'tools'"},
      {R"({"tools": [{"type": "retrieval"}]})", "'tools[0]'"},
      {R"({"tools": [{"type": "function", "function": {"name": "a b"}}]})", "'tools[0].function.name'"},
      {R"({"tools": [{"type": "function", "function": {"name": "a"}}, {"type": "function", "function": {"name": "a"}}]})",
       "'tools[1].function.name'"},
      {R"({"tools": [{"type": "function", "function": {"name": "a", "parameters": 3}}]})", "'tools[0].function.parameters'"},
      {R"({"tools": [{"type": "function", "function": {"name": "a"}}], "tool_choice": "always"})", "'tool_choice'"},
      {R"({"tools": [{"type": "function", "function": {"name": "a"}}], "tool_choice": {"type": "function", "function": {"name": "b"}}})",
       "'b'"},
      {R"({"tool_choice": "required"})", "'tool_choice' needs 'tools'"},
      {R"({"tools": [{"type": "function", "function": {"name": "a"}}], "parallel_tool_calls": "yes"})",
       "'parallel_tool_calls'"},
  };
  for (const auto& [body, want] : bad) {
    try {
      parse(body);
      ADD_FAILURE() << "accepted: " << body;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
    }
  }
  // A parameters schema the grammar cannot express names the tool.
  ToolRequest q = *parse(R"({"tools": [{"type": "function", "function": {"name": "a", "parameters": {"type": "object", "patternProperties": {}}}}], "tool_choice": "required"})");
  try {
    tool_grammar(q);
    ADD_FAILURE() << "patternProperties accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'tools[0].function.parameters'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("patternProperties"), std::string::npos) << e.what();
  }
}

// Whether `text` is a whole sentence of `g`.
bool matches(const std::string& g, const std::string& text) {
  grammar::Matcher m(grammar::Grammar::parse(g));
  if (!m.allows(text)) return false;
  m.accept(text);
  return m.can_end();
}

TEST(ToolGrammar, ForcesAValidCallInEachFormat) {
  ToolRequest r;
  r.tools = weather_tools();
  r.choice = ToolRequest::Choice::kRequired;
  const std::string weather = R"({"name": "get_weather", "arguments": {"city": "Paris", "unit": "c"}})";
  const std::string add = R"({"name": "add", "arguments": {"a": -3, "b": 4}})";
  {
    r.format = ToolFormat::kHermes;
    const std::string g = *tool_grammar(r);
    EXPECT_TRUE(matches(g, "<tool_call>\n" + weather + "\n</tool_call>"));
    EXPECT_TRUE(matches(g, "<tool_call>" + add + "</tool_call>"));
    EXPECT_FALSE(matches(g, "<tool_call>" + weather + "</tool_call><tool_call>" + add + "</tool_call>"));
    EXPECT_FALSE(matches(g, R"(<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>)"));
    EXPECT_FALSE(matches(g, R"(<tool_call>{"name": "add", "arguments": {"a": 1, "b": -1}}</tool_call>)"));
    EXPECT_FALSE(matches(g, R"(<tool_call>{"name": "other", "arguments": {}}</tool_call>)"));
    EXPECT_FALSE(matches(g, "Sure! " + weather));
    r.parallel = true;
    EXPECT_TRUE(matches(*tool_grammar(r), "<tool_call>" + weather + "</tool_call>\n<tool_call>" + add + "</tool_call>"));
    r.parallel = false;
  }
  {
    r.format = ToolFormat::kLlama3;
    const std::string g = *tool_grammar(r);
    EXPECT_TRUE(matches(g, R"({"name": "add", "parameters": {"a": 1, "b": 2}})"));
    EXPECT_FALSE(matches(g, add));  // "arguments" is not Llama 3's key
  }
  for (ToolFormat f : {ToolFormat::kMistral, ToolFormat::kGranite}) {
    r.format = f;
    const std::string g = *tool_grammar(r);
    EXPECT_TRUE(matches(g, "[" + weather + "]"));
    EXPECT_FALSE(matches(g, "[" + weather + ", " + add + "]"));
    EXPECT_FALSE(matches(g, "[]"));
  }
  {
    r.format = ToolFormat::kGeneric;
    EXPECT_TRUE(matches(*tool_grammar(r), R"({"tool_call": )" + add + "}"));
    EXPECT_FALSE(matches(*tool_grammar(r), R"({"response": "hi"})"));
    r.choice = ToolRequest::Choice::kAuto;  // the generic format keeps a grammar: a call or an answer
    EXPECT_TRUE(matches(*tool_grammar(r), R"({"response": "hi"})"));
    EXPECT_TRUE(matches(*tool_grammar(r), R"({"tool_call": )" + weather + "}"));
    r.parallel = true;
    EXPECT_TRUE(matches(*tool_grammar(r), R"({"tool_calls": [)" + weather + ", " + add + "]}"));
    r.parallel = false;
  }
  // A named function: only it.
  r.format = ToolFormat::kHermes;
  r.choice = ToolRequest::Choice::kNamed;
  r.named = "add";
  EXPECT_TRUE(matches(*tool_grammar(r), "<tool_call>" + add + "</tool_call>"));
  EXPECT_FALSE(matches(*tool_grammar(r), "<tool_call>" + weather + "</tool_call>"));
  // Auto in a format of its own: no grammar, the model may answer or call.
  r.choice = ToolRequest::Choice::kAuto;
  EXPECT_FALSE(tool_grammar(r).has_value());
  r.choice = ToolRequest::Choice::kNone;
  r.format = ToolFormat::kGeneric;
  EXPECT_FALSE(tool_grammar(r).has_value());
}

class ToolTemplates : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    rt_ = make_runtime(false).release();
    model_ = Model::load(*rt_, testing::stories()).release();
    tok_ = new Tokenizer(Tokenizer::from_gguf(model_->file()));
  }
  static void TearDownTestSuite() {
    delete tok_;
    delete model_;
    delete rt_;
  }
  static inline Runtime* rt_ = nullptr;
  static inline Model* model_ = nullptr;
  static inline Tokenizer* tok_ = nullptr;
};

// A conversation with a call in its history (arguments as the JSON text
// OpenAI clients send) and the tool's result, for the model to answer.
ordered_json history(const std::string& id) {
  return ordered_json::parse(R"([
    {"role": "system", "content": "You are a helpful assistant."},
    {"role": "user", "content": "What is the weather in Paris?"},
    {"role": "assistant", "content": null, "tool_calls": [{"id": ")" + id + R"(", "type": "function",
      "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\", \"unit\": \"c\"}"}}]},
    {"role": "tool", "tool_call_id": ")" + id + R"(", "name": "get_weather", "content": "18 degrees, sunny"}
  ])");
}

TEST_F(ToolTemplates, ToolsAndHistoryRenderThroughRealTemplates) {
  for (const char* name : {"Qwen-Qwen2.5-7B-Instruct", "Qwen-Qwen3-0.6B", "meta-llama-Llama-3.1-8B-Instruct",
                           "meta-llama-Llama-3.2-3B-Instruct", "mistralai-Mistral-Nemo-Instruct-2407",
                           "ibm-granite-granite-3.3-2B-Instruct"}) {
    SCOPED_TRACE(name);
    const ChatRenderer chat(model_->file(), *tok_, read_template(name));
    EXPECT_TRUE(chat.native_tools());
    const std::string id = chat.tool_format() == ToolFormat::kMistral ? "abcDEF123" : "call_1";
    std::string text;
    ASSERT_NO_THROW(text = chat.render(history(id), true, nlohmann::json::object(), weather_tools()));
    EXPECT_NE(text.find("The weather in a city"), std::string::npos) << text;  // the tools
    EXPECT_NE(text.find("18 degrees, sunny"), std::string::npos) << text;      // the result
    // The call's arguments reach the template as an object, printed as JSON
    // (not a string with escaped quotes).
    EXPECT_NE(text.find("\"city\": \"Paris\""), std::string::npos) << text;
    EXPECT_EQ(text.find("\\\"city\\\""), std::string::npos) << text;
  }
}

TEST_F(ToolTemplates, TemplatesWithoutToolsGetThemInASystemMessage) {
  const ChatRenderer chat(model_->file(), *tok_, read_template("google-gemma-2-2b-it"));
  EXPECT_FALSE(chat.native_tools());
  EXPECT_EQ(chat.tool_format(), ToolFormat::kGeneric);
  const ordered_json messages = history("call_1");
  std::string text;
  ASSERT_NO_THROW(text = chat.render(messages, true, nlohmann::json::object(), weather_tools()));
  EXPECT_NE(text.find("\"description\": \"The weather in a city\""), std::string::npos) << text;
  EXPECT_NE(text.find("\"response\""), std::string::npos) << text;
  EXPECT_NE(text.find("\"tool_call\""), std::string::npos) << text;      // the call in the history
  EXPECT_NE(text.find("\"tool_response\""), std::string::npos) << text;  // the result, as a user turn
}

// Forced calls sampled hot from stories260K (a model that knows nothing of
// tools): every request ends with calls whose arguments fit the schema.
TEST_F(ToolTemplates, ForcedCallsFromTheGenerator) {
  ToolRequest r;
  r.tools = weather_tools();
  r.choice = ToolRequest::Choice::kRequired;
  for (ToolFormat f : {ToolFormat::kHermes, ToolFormat::kGeneric, ToolFormat::kMistral}) {
    r.format = f;
    const std::shared_ptr<const grammar::Grammar> g = grammar::Grammar::parse(*tool_grammar(r));
    Generator gen(*model_, *tok_, {.n_slots = 1, .n_ctx = 1024});
    int ended = 0;
    for (uint32_t seed = 0; seed < 6; ++seed) {
      SCOPED_TRACE(std::string(tool_format_name(f)) + " seed " + std::to_string(seed));
      GenerationParams p;
      p.sampling.temp = 1.5f;
      p.sampling.seed = seed;
      p.max_tokens = 600;
      p.masks = grammar::masks(g, *tok_);
      p.tools = GenerationParams::Tools{.format = f, .forced = true, .tool_names = {"get_weather", "add"}};
      std::vector<Event> events;
      gen.submit(std::make_shared<Request>(tok_->tokenize("Once upon a time", true), p,
                                           [&](Event&& e) { events.push_back(std::move(e)); }));
      gen.run();
      ASSERT_FALSE(events.empty());
      if (events.back().finish == FinishReason::kLength) continue;  // cut inside a long string
      ++ended;
      EXPECT_EQ(events.back().finish, FinishReason::kEndOfText);
      std::vector<ToolCall> calls;
      std::string content;
      for (const Event& e : events) {
        calls.insert(calls.end(), e.tool_calls.begin(), e.tool_calls.end());
        content += e.text;
      }
      EXPECT_EQ(content, "");
      ASSERT_EQ(calls.size(), 1u);
      const ordered_json args = ordered_json::parse(calls[0].arguments);
      if (calls[0].name == "get_weather") {
        EXPECT_TRUE(args["city"].is_string());
        EXPECT_TRUE(args["unit"] == "c" || args["unit"] == "f") << args;
      } else {
        ASSERT_EQ(calls[0].name, "add");
        EXPECT_TRUE(args["a"].is_number_integer() && args["b"].is_number_integer()) << args;
        EXPECT_GE(args["b"].get<int64_t>(), 0);
      }
    }
    EXPECT_GE(ended, 4) << "most requests must end with their call within 600 tokens";
  }
}

}  // namespace
}  // namespace tessera::serving
