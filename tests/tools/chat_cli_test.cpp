// `tessera chat` driven through stdin: replies stream, later turns reuse the
// cached conversation, /reset starts over, a bad template name is named.
#include <gtest/gtest.h>

#include "tools/run_command.h"

namespace tessera::testing {
namespace {

std::string tessera(const std::string& args) { return std::string(TESSERA_BIN) + " " + args; }
std::string model() { return "-m " + models_dir() + "/stories260K.gguf"; }

std::vector<std::string> lines_of(const std::string& s) {
  std::vector<std::string> out;
  for (size_t at = 0, next; at < s.size(); at = next + 1) {
    next = s.find('\n', at);
    if (next == std::string::npos) next = s.size();
    out.push_back(s.substr(at, next - at));
  }
  return out;
}

TEST(ChatCli, TurnsReuseTheCacheAndResetStartsOver) {
  const CommandResult r = run_command("printf 'Hello\\nTell me a story\\n/reset\\nHello\\n/exit\\nNever\\n' | " +
                                      tessera("chat " + model() + " --temp 0 -n 12"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::vector<std::string> replies = lines_of(r.out);
  ASSERT_EQ(replies.size(), 3u) << r.out;  // /exit: "Never" is not sent
  EXPECT_FALSE(replies[0].empty());
  EXPECT_EQ(replies[2], replies[0]);  // after /reset, the first turn again
  const std::vector<std::string> info = lines_of(r.err);
  ASSERT_GE(info.size(), 4u) << r.err;
  EXPECT_NE(info[0].find("(0 cached)"), std::string::npos) << r.err;
  EXPECT_EQ(info[1].find("(0 cached)"), std::string::npos) << r.err;  // the first turn was kept
  EXPECT_NE(r.err.find("[conversation cleared]"), std::string::npos) << r.err;
}

// Every sampling flag `run` has, and --stop: the same seed gives the same
// replies, a stop string cuts a reply, the penalties change greedy text.
TEST(ChatCli, TakesEverySamplingFlagOfRun) {
  const std::string flags =
      " --temp 0.9 --top-k 20 --top-p 0.9 --min-p 0.1 --repeat-penalty 1.1 --repeat-last-n 32"
      " --presence-penalty 0.1 --frequency-penalty 0.1 -s 5 --ignore-eos -n 16 -c 512 -b 64"
      " -ctk f32 -ctv f16";
  const std::string in = "printf 'Hello\\nTell me a story\\n' | ";
  const CommandResult a = run_command(in + tessera("chat " + model() + flags));
  const CommandResult b = run_command(in + tessera("chat " + model() + flags));
  ASSERT_EQ(a.exit_code, 0) << a.err;
  EXPECT_EQ(a.out, b.out);  // seed 5 for turn 0, 6 for turn 1
  ASSERT_EQ(lines_of(a.out).size(), 2u) << a.out;
  EXPECT_NE(a.err.find("16 tokens"), std::string::npos) << a.err;  // --ignore-eos: all 16
  // Greedy replies, then cut at a stop string taken from the first one.
  const CommandResult g = run_command("echo Hello | " + tessera("chat " + model() + " --temp 0 -n 24"));
  ASSERT_EQ(g.exit_code, 0) << g.err;
  const std::string reply = lines_of(g.out)[0];
  ASSERT_GE(reply.size(), 8u) << g.out;
  const std::string stop = reply.substr(reply.size() / 2, 3);
  const CommandResult s = run_command("echo Hello | " + tessera("chat " + model() + " --temp 0 -n 24 --stop '" + stop + "'"));
  ASSERT_EQ(s.exit_code, 0) << s.err;
  EXPECT_EQ(lines_of(s.out)[0], reply.substr(0, reply.find(stop)));
  const CommandResult p = run_command("echo Hello | " + tessera("chat " + model() + " --temp 0 -n 24 --repeat-penalty 2 --repeat-last-n -1"));
  ASSERT_EQ(p.exit_code, 0) << p.err;
  EXPECT_NE(lines_of(p.out)[0], reply);
}

// gpt-oss's template (harmony, given as its source): the analysis channel
// goes to stderr, the final answer to stdout. (A grammar writes the markers,
// as plain text in stories260K's vocabulary.)
TEST(ChatCli, HarmonyRepliesShowTheAnswerAndThinkApart) {
  const std::string tmpl = fixtures_dir() + "/chat-templates/openai-gpt-oss-120b.jinja";
  const std::string grammar =
      "root ::= \"<|channel|>analysis<|message|>\" \"thinking\" \"<|end|><|start|>assistant<|channel|>final<|message|>\" "
      "\"Answer.\"";
  const CommandResult r = run_command(
      "echo Hi | " + tessera("chat " + model() + " --temp 0 -n 300 --chat-template \"$(cat " + tmpl +
                             ")\" --grammar '" + grammar + "'"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  ASSERT_EQ(lines_of(r.out).size(), 1u) << r.out;
  EXPECT_EQ(lines_of(r.out)[0], "Answer.");
  EXPECT_NE(r.err.find("thinking"), std::string::npos) << r.err;
  EXPECT_EQ(r.out.find("<|channel|>"), std::string::npos) << r.out;
}

TEST(ChatCli, UnknownTemplateIsNamed) {
  const CommandResult r =
      run_command("echo hi | " + tessera("chat " + model() + " --chat-template vicuna-9"));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("vicuna-9"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("chatml"), std::string::npos) << r.err;  // the names it takes
}

}  // namespace
}  // namespace tessera::testing
