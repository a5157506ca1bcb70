// `tessera run` and `inspect` on each architecture's fixture: greedy text as
// llama.cpp's greedy tokens spell it, and a file that lacks tensors named
// tensor by tensor.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "models/arch_fixture.h"
#include "tessera/text/tokenizer.h"
#include "tools/run_command.h"

namespace tessera::testing {
namespace {

std::string tessera_cmd(const std::string& args) {
  return std::string(TESSERA_BIN) + " " + args;
}

// The text whose stories260K tokens are each fixture's prompt (PROVENANCE.md).
constexpr const char* kPromptText =
    "Once upon a time, there was a little dog named Max. He liked to run in";

class ArchCliTest : public ::testing::TestWithParam<std::string> {};

TEST_P(ArchCliTest, RunPrintsLlamaCppsGreedyText) {
  const ArchFixture f = ArchFixture::load(GetParam());
  const Tokenizer tok = Tokenizer::from_gguf(gguf::File::open(f.gguf));
  ASSERT_EQ(tok.tokenize(kPromptText, true), f.prompt);
  // run stops at the first end-of-generation token, which it does not print.
  std::string want;
  int n = 0;
  for (int32_t t : f.greedy) {
    if (tok.is_eog(t)) break;
    want += tok.token_to_piece(t, /*render_special=*/false);
    n += 1;
  }
  const CommandResult r =
      run_command(tessera_cmd("run -m " + f.gguf + " -p '" + kPromptText + "' -n " +
                              std::to_string(n) + " --temp 0 --no-display-prompt"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, want + "\n");
  EXPECT_NE(r.err.find("tok/s"), std::string::npos) << r.err;
}

TEST_P(ArchCliTest, InspectNamesTheArchitectureAndSaysItLoads) {
  const ArchFixture f = ArchFixture::load(GetParam());
  const CommandResult r = run_command(tessera_cmd("inspect --json " + f.gguf));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["architecture"], f.architecture);
  EXPECT_EQ(j["loads"], true) << r.out;
  EXPECT_TRUE(j["tensor_problems"].empty()) << r.out;
}

INSTANTIATE_TEST_SUITE_P(Archs, ArchCliTest, ::testing::ValuesIn(kFixtureArchs),
                         [](const auto& info) { return info.param; });

TEST(ArchCli, MissingTensorsAreListedByInspectAndRun) {
  const auto path =
      rewrite_gguf(fixtures_dir() + "/archs/qwen3.gguf", "cli-missing", [](gguf::Writer&) {},
                   {"blk.1.attn_q_norm.weight", "blk.3.attn_k_norm.weight"});
  CommandResult r = run_command(tessera_cmd("inspect " + path.string()));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("loads         no: architecture 'qwen3' needs 2 tensors"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("tensor 'blk.1.attn_q_norm.weight' is missing"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("tensor 'blk.3.attn_k_norm.weight' is missing"), std::string::npos) << r.out;

  r = run_command(tessera_cmd("run -m " + path.string() + " -p hi -n 2"));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("tensor 'blk.1.attn_q_norm.weight' is missing"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("tensor 'blk.3.attn_k_norm.weight' is missing"), std::string::npos) << r.err;
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace tessera::testing
