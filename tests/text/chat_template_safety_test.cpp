// Errors name where and what; limits stop runaway templates with an error,
// never a hang or a crash; built-in templates; the GGUF key; mutated real
// templates either render or fail with tessera::Error.
#include <gtest/gtest.h>

#include <random>
#include <thread>

#include "tessera/gguf/gguf.h"
#include "text/chat_template_util.h"
#include "text/test_util.h"

namespace tessera::text::testing {
namespace {

using nlohmann::ordered_json;

bool contains(std::string_view haystack, std::string_view needle) {
  return haystack.find(needle) != std::string_view::npos;
}

TEST(ChatTemplateErrors, ParseErrorsNameLineColumnAndExpectation) {
  ChatTemplateError e = error_of("ab{{ x");
  EXPECT_EQ(e.category(), ErrorCategory::kInvalidFile);
  EXPECT_EQ(e.line(), 1u);
  EXPECT_EQ(e.column(), 3u);
  EXPECT_TRUE(contains(e.what(), "unterminated '{{' tag, expected '}}'")) << e.what();

  e = error_of("line\n  {{ 1 + }}");
  EXPECT_EQ(e.line(), 2u);
  EXPECT_EQ(e.column(), 10u);
  EXPECT_TRUE(contains(e.what(), "[t 2:10] found '}}', expected an expression")) << e.what();

  e = error_of("{% if x %}a");
  EXPECT_TRUE(
      contains(e.what(), "found the end of the template, expected 'elif' or 'else' or 'endif'"))
      << e.what();
  e = error_of("{% for x in y %}{% endif %}");
  EXPECT_TRUE(contains(e.what(), "found name 'endif'")) << e.what();
  e = error_of("{{ 'abc }}");
  EXPECT_TRUE(contains(e.what(), "unterminated string")) << e.what();
  e = error_of("{% frobnicate %}");
  EXPECT_TRUE(contains(e.what(), "found name 'frobnicate', expected one of if, for, set"))
      << e.what();
  e = error_of("{% include 'other.jinja' %}");
  EXPECT_TRUE(contains(e.what(), "cannot load other templates")) << e.what();
  e = error_of("{# never closed");
  EXPECT_TRUE(contains(e.what(), "unterminated comment")) << e.what();
  e = error_of("{{ a $ b }}");
  EXPECT_TRUE(contains(e.what(), "found '$' inside a tag")) << e.what();
  e = error_of("{{ 99999999999999999999 }}");
  EXPECT_TRUE(contains(e.what(), "expected at most 9223372036854775807")) << e.what();
}

TEST(ChatTemplateErrors, RenderErrors) {
  ChatTemplateError e = error_of("{{ 'x' | nosuchfilter }}");
  EXPECT_EQ(e.category(), ErrorCategory::kInvalidArgument);
  EXPECT_TRUE(contains(e.what(), "unknown filter 'nosuchfilter'")) << e.what();
  e = error_of("{{ 1 is nosuchtest }}");
  EXPECT_TRUE(contains(e.what(), "unknown test 'nosuchtest'")) << e.what();
  e = error_of("{{ foo.bar }}");
  EXPECT_TRUE(contains(e.what(), "found 'foo' undefined, expected a value with attribute 'bar'"))
      << e.what();
  e = error_of("\n{{ 1 + 'a' }}");
  EXPECT_TRUE(contains(e.what(), "[t 2:6] found int + string")) << e.what();
  e = error_of("{{ 1 // 0 }}");
  EXPECT_TRUE(contains(e.what(), "division by zero")) << e.what();
  e = error_of("{{ [1].append(2) }}");
  EXPECT_TRUE(contains(e.what(), "immutable")) << e.what();
  e = error_of("{% set x = 1 %}{% set x.a = 2 %}");
  EXPECT_TRUE(contains(e.what(), "expected a namespace()")) << e.what();
  e = error_of("{% break %}");
  EXPECT_TRUE(contains(e.what(), "outside a loop")) << e.what();
  e = error_of("{% for a, b in [1] %}{% endfor %}");
  EXPECT_TRUE(contains(e.what(), "to unpack into 2 names")) << e.what();
  e = error_of("{{ 9223372036854775807 + 1 }}");
  EXPECT_TRUE(contains(e.what(), "integer overflow")) << e.what();
}

TEST(ChatTemplateErrors, RaiseExceptionCarriesTheTemplatesMessage) {
  const ChatTemplateError e =
      error_of("{% if true %}\n  {{ raise_exception('Roles must alternate') }}{% endif %}");
  ASSERT_TRUE(e.raised_message().has_value());
  EXPECT_EQ(*e.raised_message(), "Roles must alternate");
  EXPECT_EQ(e.category(), ErrorCategory::kInvalidArgument);
  EXPECT_EQ(e.line(), 2u);
  EXPECT_EQ(e.column(), 21u);  // the call's '(' as llama.cpp reports it
  EXPECT_TRUE(contains(e.what(), "raise_exception: Roles must alternate")) << e.what();
  EXPECT_FALSE(error_of("{{ x.y }}").raised_message().has_value());
}

ChatTemplateLimits quick_limits() {
  ChatTemplateLimits limits;
  limits.max_time = std::chrono::milliseconds(0);  // steps, not the clock, in these tests
  return limits;
}

TEST(ChatTemplateLimits, KnownDenialOfServiceTemplatesFail) {
  // Self-recursive macro (llama.cpp#19085).
  ChatTemplateError e =
      error_of("{% macro f(n) %}{{ f(n) }}{% endmacro %}{{ f(1) }}", {}, quick_limits());
  EXPECT_TRUE(contains(e.what(), "macro calls nested deeper than 64")) << e.what();
  // 10,000 nested parentheses, brackets, nots and unary minuses.
  for (const auto& [open, close] : std::vector<std::pair<std::string, std::string>>{
           {"(", ")"}, {"[", "]"}, {"not ", ""}, {"-", ""}, {"{'a': ", "}"}}) {
    std::string deep = "{{ ";
    for (int i = 0; i < 10000; ++i) deep += open;
    deep += "1";
    for (int i = 0; i < 10000; ++i) deep += close;
    deep += " }}";
    e = error_of(deep, {}, quick_limits());
    EXPECT_EQ(e.category(), ErrorCategory::kInvalidFile) << open;
    EXPECT_TRUE(contains(e.what(), "nested deeper than 64 levels")) << e.what();
  }
  // A long flat chain makes a tall tree: refused at parse time too.
  std::string chain = "{{ 1";
  for (int i = 0; i < 100000; ++i) chain += " + 1";
  e = error_of(chain + " }}", {}, quick_limits());
  EXPECT_TRUE(contains(e.what(), "expression nested deeper than 256 levels")) << e.what();
  // 10,000 nested blocks.
  std::string blocks;
  for (int i = 0; i < 10000; ++i) blocks += "{% if true %}";
  e = error_of(blocks, {}, quick_limits());
  EXPECT_TRUE(contains(e.what(), "blocks or brackets nested deeper than 64")) << e.what();
  // String and list repetition.
  e = error_of("{{ 'a' * 10**9 }}", {}, quick_limits());
  EXPECT_TRUE(contains(e.what(), "found a string of 1000000000 bytes, expected at most 4194304"))
      << e.what();
  e = error_of("{{ [1] * 10**12 }}", {}, quick_limits());
  EXPECT_TRUE(contains(e.what(), "found a list of")) << e.what();
  e = error_of("{{ range(10**15) | length }}", {}, quick_limits());
  EXPECT_TRUE(contains(e.what(), "found a list of")) << e.what();
  e = error_of(
      "{% set ns = namespace(s='ab') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}{% "
      "endfor %}",
      {}, quick_limits());
  EXPECT_TRUE(contains(e.what(), "expected at most 4194304")) << e.what();
  // Many strings, each within the limit: the render's budget for built strings.
  e = error_of(
      "{% set ns = namespace(l=[]) %}{% for i in range(100) %}"
      "{% set ns.l = ns.l + ['a' * 4000000] %}{% endfor %}",
      {}, quick_limits());
  EXPECT_TRUE(contains(e.what(), "found more than 67108864 bytes of strings built")) << e.what();
}

TEST(ChatTemplateLimits, StepsIterationsOutputTimeAndDepth) {
  ChatTemplateLimits limits = quick_limits();
  ChatTemplateError e = error_of(
      "{% for i in range(1000) %}{% for j in range(1000) %}{% endfor %}{% endfor %}", {}, limits);
  EXPECT_TRUE(contains(e.what(), "more than 100000 loop iterations")) << e.what();

  limits.max_loop_iterations = 1u << 30;
  limits.max_steps = 100000;
  e = error_of(
      "{% for i in range(1000) %}{% for j in range(1000) %}{{ '' }}{% endfor %}{% endfor %}", {},
      limits);
  EXPECT_TRUE(contains(e.what(), "more than 100000 evaluation steps")) << e.what();

  e = error_of("{% for i in range(100000) %}{{ 'x' * 100 }}{% endfor %}", {}, quick_limits());
  EXPECT_TRUE(contains(e.what(), "output longer than 4194304 bytes")) << e.what();

  limits = ChatTemplateLimits{};
  limits.max_time = std::chrono::milliseconds(1);
  limits.max_steps = UINT64_MAX;
  limits.max_loop_iterations = UINT64_MAX;
  e = error_of("{% for i in range(100000) %}{% for j in range(1000) %}{% endfor %}{% endfor %}", {},
               limits);
  EXPECT_TRUE(contains(e.what(), "running longer than 1 ms")) << e.what();

  // Values built deeper than printing may recurse.
  e = error_of(
      "{% set ns = namespace(x=[]) %}{% for i in range(1000) %}{% set ns.x = [ns.x] %}{% endfor "
      "%}{{ ns.x }}",
      {}, quick_limits());
  EXPECT_TRUE(contains(e.what(), "nested deeper than 256 levels")) << e.what();
  // Deep JSON input.
  ordered_json deep = ordered_json::array();
  for (int i = 0; i < 2000; ++i) deep = ordered_json::array({deep});
  e = error_of("{{ x }}", {{"x", deep}}, quick_limits());
  EXPECT_TRUE(contains(e.what(), "nested deeper than 256 levels")) << e.what();
}

TEST(ChatTemplateBuiltins, NamesAndRenders) {
  const auto names = builtin_chat_template_names();
  EXPECT_EQ(
      std::vector<std::string_view>(names.begin(), names.end()),
      (std::vector<std::string_view>{"chatml", "llama2", "llama3", "gemma", "phi3", "mistral"}));
  const ordered_json messages = ordered_json::array({{{"role", "system"}, {"content", "Be brief."}},
                                                     {{"role", "user"}, {"content", "Hi"}},
                                                     {{"role", "assistant"}, {"content", "Hello"}},
                                                     {{"role", "user"}, {"content", "Bye"}}});
  ChatTemplateInputs in;
  in.bos_token = "<s>";
  in.eos_token = "</s>";
  const auto apply = [&](std::string_view name) {
    return builtin_chat_template(name).apply(messages, in);
  };
  EXPECT_EQ(apply("chatml"),
            "<|im_start|>system\nBe "
            "brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
            "Hello<|im_end|>\n<|im_start|>user\nBye<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(apply("llama2"),
            "[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\nHi [/INST] Hello </s><s>[INST] Bye [/INST]");
  EXPECT_EQ(
      apply("llama3"),
      "<|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|><|start_header_id|>user"
      "<|end_header_id|>\n\nHi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nHello<|"
      "eot_id|>"
      "<|start_header_id|>user<|end_header_id|>\n\nBye<|eot_id|><|start_header_id|>assistant"
      "<|end_header_id|>\n\n");
  EXPECT_EQ(apply("gemma"),
            "<start_of_turn>user\nBe "
            "brief.\n\nHi<end_of_turn>\n<start_of_turn>model\nHello<end_of_turn>\n"
            "<start_of_turn>user\nBye<end_of_turn>\n<start_of_turn>model\n");
  EXPECT_EQ(
      apply("phi3"),
      "<|system|>\nBe "
      "brief.<|end|>\n<|user|>\nHi<|end|>\n<|assistant|>\nHello<|end|>\n<|user|>\nBye<|end|>\n"
      "<|assistant|>\n");
  EXPECT_EQ(apply("mistral"), " [INST] Be brief.\n\nHi [/INST] Hello</s> [INST] Bye [/INST]");
  try {
    builtin_chat_template("vicuna");
    ADD_FAILURE() << "expected an error";
  } catch (const Error& err) {
    EXPECT_TRUE(contains(
        err.what(), "found 'vicuna', expected one of chatml, llama2, llama3, gemma, phi3, mistral"))
        << err.what();
  }
}

TEST(ChatTemplateGguf, ReadsTheTemplateKey) {
  gguf::Writer w;
  w.set_string("general.architecture", "llama");
  w.set_string("tokenizer.chat_template", "{{ 'main' }}");
  w.set_string("tokenizer.chat_template.tool_use", "{{ 'tools' }}");
  const std::vector<uint8_t> bytes = w.to_bytes();
  const gguf::File file = gguf::File::from_bytes(bytes, "t.gguf");
  EXPECT_EQ(gguf_chat_template(file).value_or(""), "{{ 'main' }}");
  EXPECT_EQ(gguf_chat_template(file, "tool_use").value_or(""), "{{ 'tools' }}");
  EXPECT_FALSE(gguf_chat_template(file, "rag").has_value());

  gguf::Writer bad;
  bad.set_string("general.architecture", "llama");
  bad.set_u32("tokenizer.chat_template", 7);
  const std::vector<uint8_t> bad_bytes = bad.to_bytes();
  EXPECT_THROW(gguf_chat_template(gguf::File::from_bytes(bad_bytes, "bad.gguf")), Error);
}

std::filesystem::path template_dir() {
  return std::filesystem::path(fixtures_dir()) / "chat-templates";
}

std::vector<std::pair<std::string, std::string>> all_templates() {
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& entry : std::filesystem::directory_iterator(template_dir())) {
    if (entry.path().extension() == ".jinja")
      out.emplace_back(entry.path().filename(), read_file(entry.path()));
  }
  std::sort(out.begin(), out.end());
  EXPECT_EQ(out.size(), 11u);  // the ten of expected.json and gpt-oss's
  return out;
}

ordered_json tool_conversation() {
  return ordered_json::array({
      {{"role", "system"}, {"content", "You can call tools."}},
      {{"role", "user"}, {"content", "Weather in Paris?"}},
      {{"role", "assistant"},
       {"content", ""},
       {"tool_calls",
        {{{"id", "call12345"},
          {"type", "function"},
          {"function", {{"name", "get_weather"}, {"arguments", {{"city", "Paris"}}}}}}}}},
      {{"role", "tool"}, {"tool_call_id", "call12345"}, {"content", "{\"temp\": 21}"}},
  });
}

ordered_json weather_tools() {
  return ordered_json::array({{{"type", "function"},
                               {"function",
                                {{"name", "get_weather"},
                                 {"description", "Current weather"},
                                 {"parameters",
                                  {{"type", "object"},
                                   {"properties", {{"city", {{"type", "string"}}}}},
                                   {"required", {"city"}}}}}}}});
}

// Tools and tool calls reach the templates' other branches.
TEST(ChatTemplateFixtures, ToolConversationsRender) {
  ChatTemplateInputs in;
  in.bos_token = "<s>";
  in.eos_token = "</s>";
  in.tools = weather_tools();
  for (const auto& [file, source] : all_templates()) {
    const ChatTemplate tmpl = ChatTemplate::parse(source, file);
    if (file == "google-gemma-2-2b-it.jinja") {
      // No tool role: the tool turn breaks its user/model alternation.
      EXPECT_THROW(tmpl.apply(tool_conversation(), in), ChatTemplateError);
      continue;
    }
    std::string out;
    ASSERT_NO_THROW(out = tmpl.apply(tool_conversation(), in)) << file;
    if (file.starts_with("Qwen") || file.starts_with("meta-llama") ||
        file.starts_with("mistralai") || file.starts_with("ibm") || file.starts_with("deepseek") ||
        file.starts_with("openai")) {
      EXPECT_TRUE(contains(out, "get_weather")) << file << "\n" << out;
    }
  }
  const ChatTemplate qwen =
      ChatTemplate::parse(read_file(template_dir() / "Qwen-Qwen2.5-7B-Instruct.jinja"));
  const std::string out = qwen.apply(tool_conversation(), in);
  EXPECT_TRUE(contains(
      out,
      "<tools>\n{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", "
      "\"description\": \"Current weather\", \"parameters\": {\"type\": \"object\", "
      "\"properties\": {\"city\": {\"type\": \"string\"}}, \"required\": [\"city\"]}}}\n</tools>"))
      << out;
  EXPECT_TRUE(
      contains(out,
               "<|im_start|>assistant\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
               "{\"city\": \"Paris\"}}\n</tool_call><|im_end|>\n<|im_start|>user\n<tool_response>\n"
               "{\"temp\": 21}\n</tool_response><|im_end|>\n"))
      << out;
}

TEST(ChatTemplateFixtures, RendersConcurrently) {
  const ChatTemplate tmpl =
      ChatTemplate::parse(read_file(template_dir() / "Qwen-Qwen3-0.6B.jinja"));
  ChatTemplateInputs in;
  const std::string want = tmpl.render(tool_conversation(), in);
  std::vector<std::thread> threads;
  std::atomic<int> mismatches{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 50; ++i) {
        if (tmpl.render(tool_conversation(), in) != want) ++mismatches;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(mismatches.load(), 0);
}

// A few thousand mutations of real templates: each parses and renders or
// fails with tessera::Error; nothing else escapes, nothing crashes or hangs.
TEST(ChatTemplateRobustness, MutatedTemplatesFailCleanly) {
  static constexpr std::string_view kPieces[] = {
      "{{",    "}}",   "{%",   "%}",          "{#",       "#}",         "-",        "(",
      ")",     "[",    "]",    "{",           "}",        "'",          "\"",       "|",
      ",",     ".",    ":",    " if ",        " else ",   " for x in ", " endfor ", " endif ",
      " not ", " in ", " is ", "loop.index",  "messages", "[::-1]",     "**",       "~",
      " and ", " or ", "ns.x", " recursive ", "\\",       "\n",         "0",        "9"};
  std::vector<std::pair<std::string, std::string>> sources = all_templates();
  for (const std::string_view name : builtin_chat_template_names()) {
    sources.emplace_back(std::string(name), builtin_chat_template(name).source());
  }
  std::mt19937 rng(20261130);
  ChatTemplateInputs in;
  in.bos_token = "<s>";
  in.eos_token = "</s>";
  in.tools = weather_tools();
  in.extra_context = {{"enable_thinking", false}};
  in.limits.max_steps = 200000;
  in.limits.max_output_bytes = 1u << 16;
  in.limits.max_time = std::chrono::milliseconds(0);
  size_t parsed = 0;
  size_t rendered = 0;
  size_t total = 0;
  for (const auto& [name, original] : sources) {
    for (int k = 0; k < 250; ++k) {
      std::string s = original;
      const int edits = 1 + static_cast<int>(rng() % 3);
      for (int j = 0; j < edits; ++j) {
        const size_t at = s.empty() ? 0 : rng() % s.size();
        switch (rng() % 4) {
          case 0:
            s.erase(at, 1 + rng() % 8);
            break;
          case 1:
            s.insert(at, kPieces[rng() % std::size(kPieces)]);
            break;
          case 2:
            if (!s.empty()) s[at] = static_cast<char>(rng() % 256);
            break;
          default: {
            const std::string piece = s.substr(rng() % (s.size() + 1), 1 + rng() % 64);
            s.insert(at, piece);
          }
        }
      }
      ++total;
      try {
        const ChatTemplate tmpl = ChatTemplate::parse(s, name, in.limits);
        ++parsed;
        tmpl.apply(tool_conversation(), in);
        ++rendered;
      } catch (const Error&) {
        // refused with a message: fine
      } catch (const std::exception& e) {
        ADD_FAILURE() << name << " mutation " << k << " escaped as std::exception: " << e.what();
      }
    }
  }
  EXPECT_EQ(total, 17u * 250u);
  EXPECT_GT(parsed, total / 10);  // the mutations reach the interpreter
  EXPECT_GT(rendered, total / 20);
  std::printf("mutations: %zu, parsed: %zu, rendered: %zu\n", total, parsed, rendered);
}

}  // namespace
}  // namespace tessera::text::testing
