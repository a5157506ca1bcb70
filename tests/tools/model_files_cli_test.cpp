// `tessera synth` and `tessera quantize` as a user runs them: the files they
// write run, and bad arguments get one line naming the argument.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "tools/run_command.h"

namespace tessera::testing {
namespace {

std::string tessera(const std::string& args) { return std::string(TESSERA_BIN) + " " + args; }

class ModelFilesCli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("tessera-cli-files-" + std::to_string(getpid()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string at(const std::string& name) const { return (dir_ / name).string(); }
  std::filesystem::path dir_;
};

TEST_F(ModelFilesCli, SynthThenQuantizeThenRun) {
  CommandResult r = run_command(tessera("synth --shape tiny --type f16 -o " + at("t.gguf")));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("100%"), std::string::npos) << r.err;  // progress
  EXPECT_NE(r.err.find("wrote " + at("t.gguf")), std::string::npos) << r.err;

  r = run_command(tessera("quantize " + at("t.gguf") + " " + at("q.gguf") + " Q4_0 2"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("output.weight"), std::string::npos) << r.err;  // a line per tensor
  EXPECT_NE(r.err.find("f16 -> q6_k"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("f16 -> q4_0"), std::string::npos) << r.err;

  r = run_command(tessera("run -m " + at("q.gguf") + " -p 'Once upon a time' -n 8 --temp 0"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("8 tokens"), std::string::npos) << r.err;

  r = run_command(tessera("inspect " + at("q.gguf")));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("q4_0"), std::string::npos) << r.out;

  // A mix by llama-quantize's name, in any case: per-tensor types and why.
  r = run_command(tessera("quantize " + at("t.gguf") + " " + at("k.gguf") + " q4_k_m 2"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("f16 -> q4_k"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("blk.1.attn_v.weight"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("f16 -> q6_k"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("use_more_bits"), std::string::npos) << r.err;
  r = run_command(tessera("inspect " + at("k.gguf")));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("q4_k"), std::string::npos) << r.out;
  r = run_command(tessera("run -m " + at("k.gguf") + " -p 'Once upon a time' -n 8 --temp 0"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("8 tokens"), std::string::npos) << r.err;
  // bench names the file by its mix, as llama-bench does, not by its commonest type.
  r = run_command(tessera("bench -m " + at("k.gguf") + " -p 8 -n 2 -r 1 -t 1 --ceilings 0"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find(" Q4_K_M "), std::string::npos) << r.out;
  // And by number (30: IQ4_XS).
  r = run_command(tessera("quantize " + at("t.gguf") + " " + at("x.gguf") + " 30 2"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("f16 -> iq4_xs"), std::string::npos) << r.err;
}

TEST_F(ModelFilesCli, BadArgumentsAreNamed) {
  CommandResult r = run_command(tessera("synth --shape llama-9b -o " + at("x.gguf")));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("llama-9b"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("tinyllama-1.1b"), std::string::npos) << r.err;  // the list
  r = run_command(tessera("synth --shape tiny --type q9_9 -o " + at("x.gguf")));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("--type"), std::string::npos) << r.err;
  r = run_command(tessera("quantize /nonexistent.gguf " + at("x.gguf") + " Q4_0"));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("/nonexistent.gguf"), std::string::npos) << r.err;
  r = run_command(tessera("quantize /nonexistent.gguf " + at("x.gguf") + " Q4_K_M"));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("/nonexistent.gguf"), std::string::npos) << r.err;  // the mix is known
  r = run_command(tessera("quantize " + at("y.gguf") + " " + at("x.gguf") + " Q4_K_X"));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("Q4_K_X"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("Q4_K_M (15)"), std::string::npos) << r.err;  // what it takes
  EXPECT_NE(r.err.find("IQ4_XS (30)"), std::string::npos) << r.err;
  r = run_command(tessera("quantize " + at("y.gguf") + " " + at("x.gguf") +
                          " Q4_K_M --output-tensor-type q9_k"));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("--output-tensor-type"), std::string::npos) << r.err;
  r = run_command(tessera("quantize --help"));
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_NE(r.out.find("Q4_K_M (15)"), std::string::npos) << r.out;
  EXPECT_FALSE(std::filesystem::exists(dir_ / "x.gguf"));
}

}  // namespace
}  // namespace tessera::testing
