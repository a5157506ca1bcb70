// `tessera chat` driven through stdin: replies stream, later turns reuse the
// cached conversation, /reset starts over, a bad template name is named.
#include <gtest/gtest.h>

#include "tools/run_command.h"

namespace tessera::testing {
namespace {

std::string tessera(const std::string& args) { return std::string(TESSERA_BIN) + " " + args; }
std::string model() { return "-m " + shared_dir() + "/models/stories260K.gguf"; }

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

TEST(ChatCli, UnknownTemplateIsNamed) {
  const CommandResult r =
      run_command("echo hi | " + tessera("chat " + model() + " --chat-template vicuna-9"));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("vicuna-9"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("chatml"), std::string::npos) << r.err;  // the names it takes
}

}  // namespace
}  // namespace tessera::testing
