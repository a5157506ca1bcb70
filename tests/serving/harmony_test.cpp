// gpt-oss replies (harmony): the parser on the cases llama.cpp's gpt-oss
// tests cover, whole and a byte at a time; reasoning_format none; calls
// in either header form, to undeclared or built-in tools, malformed; the
// lenient fallbacks; the template's format, message preparation and tools;
// and a forced call's grammar.
#include <gtest/gtest.h>

#include <fstream>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include "models/model_test_util.h"
#include "tessera/grammar/grammar.h"
#include "tessera/serving/harmony.h"
#include "tessera/serving/tool_calls.h"

namespace tessera::serving {
namespace {

struct Got {
  std::string reasoning, content;
  std::vector<std::pair<std::string, std::string>> calls;  // name, arguments
  bool operator==(const Got&) const = default;
};

std::ostream& operator<<(std::ostream& os, const Got& g) {
  os << "{reasoning '" << g.reasoning << "', content '" << g.content << "', calls";
  for (const auto& [n, a] : g.calls) os << " " << n << " " << a;
  return os << "}";
}

Got whole(std::string_view text, bool extract, std::vector<std::string> names) {
  HarmonyOutput o = parse_harmony(text, extract, std::move(names));
  Got g{o.reasoning, o.content, {}};
  for (const ToolCall& c : o.calls) {
    EXPECT_TRUE(c.id.starts_with("call_")) << c.id;
    g.calls.emplace_back(c.name, c.arguments);
  }
  return g;
}

Got streamed(std::string_view text, bool extract, std::vector<std::string> names) {
  HarmonyParser p(extract, std::move(names));
  Got g;
  auto take = [&](HarmonyParser::Parts parts) {
    g.reasoning += parts.reasoning;
    g.content += parts.content;
    for (const ToolCall& c : p.take_calls()) g.calls.emplace_back(c.name, c.arguments);
  };
  for (char c : text) take(p.feed(std::string_view(&c, 1)));
  take(p.finish());
  return g;
}

void expect(std::string_view text, const Got& want, bool extract = true,
            std::vector<std::string> names = {"f"}) {
  EXPECT_EQ(whole(text, extract, names), want) << "whole: " << text;
  EXPECT_EQ(streamed(text, extract, names), want) << "streamed: " << text;
}

TEST(Harmony, ChannelsGoToReasoningAndContent) {
  expect("<|channel|>final<|message|>Hello", {"", "Hello", {}});
  expect("<|channel|>commentary<|message|>Hello", {"", "Hello", {}});
  const std::string think =
      "<|channel|>analysis<|message|>I'm\nthinking<|end|><|start|>assistant<|channel|>final<|message|>Hi";
  expect(think, {"I'm\nthinking", "Hi", {}});
  // reasoning_format none: the analysis message as written, in the content.
  expect(think, {"", "<|channel|>analysis<|message|>I'm\nthinking<|end|>Hi", {}}, false);
  // Cut off while thinking.
  expect("<|channel|>analysis<|message|>I'm\nthinking", {"I'm\nthinking", "", {}});
  // Several analysis messages; what follows the final answer's <|end|> is dropped.
  expect("<|channel|>analysis<|message|>a<|end|><|start|>assistant<|channel|>analysis<|message|>b<|end|>"
         "<|start|>assistant<|channel|>final<|message|>c<|end|>junk",
         {"ab", "c", {}});
  // gpt-oss-20b's stray prefix before the real channel.
  expect("<|channel|>commentary to=assistant<|channel|>analysis<|message|>x<|end|><|start|>assistant"
         "<|channel|>final<|message|>y",
         {"x", "y", {}});
  // A partial marker at the end of the text is text.
  expect("<|channel|>final<|message|>a <|en", {"", "a <|en", {}});
}

TEST(Harmony, CallsInEitherHeaderForm) {
  const std::string think = "<|channel|>analysis<|message|>I'm\nthinking<|end|><|start|>assistant";
  expect(think + "<|channel|>commentary to=functions.f <|constrain|>json<|message|>{\"arg1\": 1}",
         {"I'm\nthinking", "", {{"f", "{\"arg1\": 1}"}}});
  expect(" to=functions.f<|channel|>analysis <|constrain|>json<|message|>{\"arg1\": 1}",
         {"", "", {{"f", "{\"arg1\": 1}"}}});
  expect("<|channel|>analysis to=functions.f<|message|>{\"arg1\": 1}", {"", "", {{"f", "{\"arg1\": 1}"}}});
  // A preamble before the call; trailing whitespace of the arguments trimmed;
  // an <|end|> after the call, and anything after it, dropped.
  expect("<|channel|>commentary<|message|>Let me check.<|end|><|start|>assistant"
         "<|channel|>commentary to=functions.f<|message|>{} \n<|end|>more",
         {"", "Let me check.", {{"f", "{}"}}});
}

TEST(Harmony, UnknownCallsAreDroppedAndBadOnesKept) {
  // A built-in tool's call (no function): dropped, as is one to an undeclared tool.
  expect("<|channel|>analysis<|message|>r<|end|><|start|>assistant to=container.exec<|channel|>commentary"
         "<|message|>python3 x.py<|end|><|start|>assistant<|channel|>final<|message|>done",
         {"r", "done", {}});
  expect("<|channel|>commentary to=functions.g<|message|>{\"a\": 1}", {"", "", {}});
  expect("<|channel|>commentary to=functions.f<|message|>{\"a\": 1}", {"", "", {}}, true, {});
  // Arguments that are not JSON: the message as text.
  expect("<|channel|>commentary to=functions.f<|message|>{\"a\": ",
         {"", "<|channel|>commentary to=functions.f<|message|>{\"a\": ", {}});
}

TEST(Harmony, WhatIsNotHarmonyIsContent) {
  expect("Hello there", {"", "Hello there", {}});
  expect("", {"", "", {}});
  expect("<|channel|>weird<|message|>text", {"", "<|channel|>weird<|message|>text", {}});
  const std::string long_header = "<|channel|>" + std::string(HarmonyParser::kMaxHeader, 'x');
  expect(long_header + "<|message|>a", {"", long_header + "<|message|>a", {}});
  // After an <|end|>, something other than <|start|>assistant.
  expect("<|channel|>analysis<|message|>a<|end|>oops", {"a", "oops", {}});
  // A header cut off at the end says nothing.
  expect("<|channel|>fin", {"", "", {}});
}

std::string read_template(const std::string& name) {
  std::ifstream in(testing::fixtures_dir() + "/chat-templates/" + name);
  EXPECT_TRUE(in.good()) << name;
  return {std::istreambuf_iterator<char>(in), {}};
}

TEST(Harmony, TheTemplateIsItsFormat) {
  EXPECT_EQ(detect_tool_format(read_template("openai-gpt-oss-120b.jinja")), ToolFormat::kHarmony);
  EXPECT_EQ(tool_format_name(ToolFormat::kHarmony), "harmony");
}

// A forced call: analysis or commentary messages, then the call with its
// arguments valid for the tool's schema.
TEST(Harmony, AForcedCallsGrammar) {
  const nlohmann::ordered_json body = {
      {"tools",
       {{{"type", "function"},
         {"function",
          {{"name", "get_weather"},
           {"parameters",
            {{"type", "object"},
             {"properties", {{"city", {{"type", "string"}}}}},
             {"required", {"city"}}}}}}},
        {{"type", "function"}, {"function", {{"name", "now"}}}}}},
      {"tool_choice", "required"}};
  const std::optional<ToolRequest> r = parse_tool_request(body, ToolFormat::kHarmony);
  ASSERT_TRUE(r);
  const std::optional<std::string> g = tool_grammar(*r);
  ASSERT_TRUE(g);
  const auto parsed = grammar::parse_cached(*g);
  auto accepts = [&](std::string_view text) {
    grammar::Matcher m(parsed);
    if (!m.allows(text)) return false;
    m.accept(text);
    return m.can_end();
  };
  EXPECT_TRUE(accepts("<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>"
                      "{\"city\": \"Paris\"}"));
  EXPECT_TRUE(accepts("<|channel|>analysis<|message|>The user wants <b>weather</b>.<|end|>"
                      "<|start|>assistant<|channel|>commentary to=functions.now<|message|>{}"));
  EXPECT_FALSE(accepts("<|channel|>commentary to=functions.get_weather<|message|>{\"town\": \"Paris\"}"));
  EXPECT_FALSE(accepts("<|channel|>commentary to=functions.other<|message|>{}"));
  EXPECT_FALSE(accepts("<|channel|>final<|message|>Sunny."));
  EXPECT_FALSE(accepts("<|channel|>analysis<|message|>a<|end|>b<|end|><|start|>assistant"
                       "<|channel|>commentary to=functions.now<|message|>{}"));
  // Auto: no grammar.
  ToolRequest automatic = *r;
  automatic.choice = ToolRequest::Choice::kAuto;
  EXPECT_FALSE(tool_grammar(automatic));
}

}  // namespace
}  // namespace tessera::serving
