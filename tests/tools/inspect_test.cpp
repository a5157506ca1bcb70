// `tessera inspect` on the shared models, as a user runs it.
#include <algorithm>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tools/run_command.h"

namespace tessera::testing {
namespace {

using nlohmann::json;

std::string tessera_cmd(const std::string& args) { return std::string(TESSERA_BIN) + " " + args; }

TEST(InspectTest, StoriesFactsAsJson) {
  const CommandResult r =
      run_command(tessera_cmd("inspect --json " + models_dir() + "/stories260K.gguf"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json j = json::parse(r.out);
  EXPECT_EQ(j["architecture"], "llama");
  EXPECT_EQ(j["n_tensors"], 48);
  EXPECT_EQ(j["n_params"], 292800);
  EXPECT_EQ(j["hparams"]["n_ctx_train"], 2048);
  EXPECT_EQ(j["hparams"]["n_embd"], 64);
  EXPECT_EQ(j["hparams"]["n_layer"], 5);
  EXPECT_EQ(j["hparams"]["n_head"], 8);
  EXPECT_EQ(j["hparams"]["n_head_kv"], 4);
  EXPECT_EQ(j["hparams"]["n_ff"], 172);
  EXPECT_DOUBLE_EQ(j["hparams"]["rope_freq_base"].get<double>(), 10000.0);
  EXPECT_NEAR(j["hparams"]["norm_rms_eps"].get<double>(), 1e-5, 1e-12);
  EXPECT_EQ(j["tokenizer"]["model"], "llama");
  EXPECT_EQ(j["tokenizer"]["n_vocab"], 512);
  ASSERT_EQ(j["tensors"].size(), 48u);
  EXPECT_EQ(j["tensors"][0]["name"], "token_embd.weight");
  EXPECT_EQ(j["tensors"][0]["type"], "f32");
  EXPECT_EQ(j["tensors"][0]["shape"], json::array({64, 512}));
  EXPECT_EQ(j["tensors"][0]["bytes"], 64 * 512 * 4);
  EXPECT_EQ(j["tensors"][9]["name"], "blk.0.ffn_down.weight");
  EXPECT_EQ(j["tensors"][9]["shape"], json::array({172, 64}));
  EXPECT_EQ(j["type_counts"]["f32"], 48);
}

TEST(InspectTest, TinyRandomHasF16Weights) {
  const CommandResult r = run_command(
      tessera_cmd("inspect --json " + models_dir() + "/llama-2-tiny-random.gguf"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json j = json::parse(r.out);
  EXPECT_EQ(j["n_tensors"], 12);
  EXPECT_EQ(j["n_params"], 513048);
  EXPECT_EQ(j["type_counts"]["f16"], 9);
  EXPECT_EQ(j["type_counts"]["f32"], 3);
  EXPECT_EQ(j["tokenizer"]["n_vocab"], 32000);
  EXPECT_EQ(j["hparams"]["n_head_kv"], 2);
}

TEST(InspectTest, TextOutputNamesTheFacts) {
  const CommandResult r =
      run_command(tessera_cmd("inspect " + models_dir() + "/stories260K.gguf"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("architecture  llama"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("48, 292800 parameters"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("blk.4.ffn_norm.weight"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("(KV heads 4)"), std::string::npos) << r.out;
}

TEST(InspectTest, VocabOnlyFileHasNoTensors) {
  const CommandResult r = run_command(tessera_cmd(
      "inspect --json " + fixtures_dir() + "/tokenizer/ggml-vocab-gpt-2.gguf"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json j = json::parse(r.out);
  EXPECT_EQ(j["n_tensors"], 0);
  EXPECT_EQ(j["tokenizer"]["model"], "gpt2");
  EXPECT_EQ(j["tokenizer"]["n_vocab"], 50257);
}

TEST(InspectTest, GgufV1IsRefusedWithReason) {
  const CommandResult r = run_command(tessera_cmd(
      "inspect " + models_dir() + "/legacy-gguf-v1/tinyllamas-stories-260k-f32.gguf"));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(r.out.empty()) << r.out;
  EXPECT_NE(r.err.find("GGUF v1 is not supported"), std::string::npos) << r.err;
}

TEST(InspectTest, MissingFileIsOneClearLine) {
  const CommandResult r = run_command(tessera_cmd("inspect /nonexistent/model.gguf"));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("/nonexistent/model.gguf"), std::string::npos) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
}

TEST(InspectTest, MissingArgumentPrintsUsage) {
  const CommandResult r = run_command(tessera_cmd("inspect"));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("model"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace tessera::testing
