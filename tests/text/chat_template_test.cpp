// Real models' chat templates (shared/fixtures/chat-templates) over five
// conversations must render exactly as llama.cpp b10470 rendered them, with
// llama.cpp's inputs (PROVENANCE.md): bos "<s>", eos "</s>",
// enable_thinking, date_string and datetime set, the clock at 2026-11-30,
// the leading BOS text dropped and system messages folded for templates
// without a system role. The two error renders must raise the same message
// at the same line and column.
#include <gtest/gtest.h>

#include <cstdlib>
#include <ctime>
#include <regex>

#include <nlohmann/json.hpp>

#include "tessera/text/chat_template.h"
#include "text/test_util.h"

namespace tessera::text::testing {
namespace {

using nlohmann::ordered_json;

std::filesystem::path template_dir() {
  return std::filesystem::path(fixtures_dir()) / "chat-templates";
}

ordered_json read_json(const std::string& file) {
  return ordered_json::parse(read_file(template_dir() / file));
}

ChatTemplateInputs llama_cpp_inputs(bool add_generation_prompt) {
  // strftime_now formats local time; the renders were made in UTC.
  setenv("TZ", "UTC", 1);
  tzset();
  ChatTemplateInputs in;
  in.add_generation_prompt = add_generation_prompt;
  in.bos_token = "<s>";
  in.eos_token = "</s>";
  in.extra_context = {
      {"enable_thinking", true}, {"date_string", "30 Nov 2026"}, {"datetime", "Nov 30 2026"}};
  std::tm tm{};
  tm.tm_year = 2026 - 1900;
  tm.tm_mon = 10;
  tm.tm_mday = 30;
  tm.tm_hour = 12;
  in.now = std::chrono::system_clock::from_time_t(timegm(&tm));
  return in;
}

struct Pair {
  std::string file;
  std::string conversation;
};

std::vector<Pair> all_pairs() {
  std::vector<Pair> pairs;
  const ordered_json expected = read_json("expected.json");
  for (const auto& [file, by_conversation] : expected.items()) {
    for (const auto& [conversation, result] : by_conversation.items()) {
      pairs.push_back({file, conversation});
    }
  }
  return pairs;
}

class ChatTemplateFixture : public ::testing::TestWithParam<Pair> {};

TEST_P(ChatTemplateFixture, MatchesLlamaCpp) {
  const Pair& p = GetParam();
  const ordered_json expected = read_json("expected.json")[p.file][p.conversation];
  ordered_json conversation;
  for (const auto& c : read_json("conversations.json")) {
    if (c["name"] == p.conversation) conversation = c;
  }
  ASSERT_FALSE(conversation.is_null()) << p.conversation;
  const ChatTemplate tmpl = ChatTemplate::parse(read_file(template_dir() / p.file), p.file);
  const ChatTemplateInputs inputs =
      llama_cpp_inputs(conversation["add_generation_prompt"].get<bool>());
  if (!expected["error"].get<bool>()) {
    EXPECT_EQ(escaped(tmpl.apply(conversation["messages"], inputs)),
              escaped(expected["prompt"].get<std::string>()));
    return;
  }
  const std::string message = expected["message"].get<std::string>();
  std::smatch m;
  ASSERT_TRUE(std::regex_search(message, m, std::regex(R"(at line (\d+), column (\d+))")));
  const std::string raised = message.substr(message.find("Jinja Exception: ") + 17);
  try {
    tmpl.apply(conversation["messages"], inputs);
    ADD_FAILURE() << "expected the template to raise: " << raised;
  } catch (const ChatTemplateError& e) {
    ASSERT_TRUE(e.raised_message().has_value()) << e.what();
    EXPECT_EQ(*e.raised_message(), raised);
    EXPECT_EQ(e.line(), std::stoul(m[1])) << e.what();
    EXPECT_EQ(e.column(), std::stoul(m[2])) << e.what();
    EXPECT_EQ(e.category(), ErrorCategory::kInvalidArgument);
  }
}

std::string pair_name(const ::testing::TestParamInfo<Pair>& info) {
  std::string name =
      info.param.file.substr(0, info.param.file.find(".jinja")) + "_" + info.param.conversation;
  for (char& c : name) {
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  }
  return name;
}

INSTANTIATE_TEST_SUITE_P(Fixtures, ChatTemplateFixture, ::testing::ValuesIn(all_pairs()),
                         pair_name);

// gpt-oss's template (harmony), which llama.cpp b10470's renders do not
// cover: the five conversations as Python's Jinja2 renders them
// (expected-jinja2.json, PROVENANCE.md), the clock at 2026-11-30.
TEST(ChatTemplateFixtures, GptOssMatchesJinja2) {
  const std::string file = "openai-gpt-oss-120b.jinja";
  const ordered_json expected = read_json("expected-jinja2.json")[file];
  ASSERT_EQ(expected.size(), 5u);
  const ChatTemplate tmpl = ChatTemplate::parse(read_file(template_dir() / file), file);
  for (const auto& c : read_json("conversations.json")) {
    const std::string name = c["name"].get<std::string>();
    SCOPED_TRACE(name);
    ASSERT_TRUE(expected.contains(name));
    ASSERT_FALSE(expected[name]["error"].get<bool>());
    ChatTemplateInputs inputs = llama_cpp_inputs(true);
    inputs.bos_token = "<|startoftext|>";
    inputs.eos_token = "<|return|>";
    EXPECT_EQ(escaped(tmpl.apply(c["messages"], inputs)),
              escaped(expected[name]["prompt"].get<std::string>()));
  }
}

// Only gemma-2 lacks a system role among the ten (PROVENANCE.md, point 3).
TEST(ChatTemplateFixtures, SystemRoleCapsMatchLlamaCpp) {
  const ordered_json expected = read_json("expected.json");
  size_t count = 0;
  for (const auto& [file, unused] : expected.items()) {
    const ChatTemplate tmpl = ChatTemplate::parse(read_file(template_dir() / file), file);
    EXPECT_EQ(tmpl.caps().supports_system_role, file != "google-gemma-2-2b-it.jinja") << file;
    ++count;
  }
  EXPECT_EQ(count, 10u);
}

}  // namespace
}  // namespace tessera::text::testing
