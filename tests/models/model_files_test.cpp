// tessera synth and quantize as libraries: random models of the declared
// shape and statistics, the same bytes whatever the thread count, and
// quantized tensors equal to the reference quantizer's rows.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>

#include "models/model_test_util.h"
#include "tessera/error.h"
#include "tessera/gguf.h"
#include "tessera/quantize.h"
#include "tessera/synth.h"

namespace tessera::testing {
namespace {

class ModelFilesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::path(::testing::TempDir()) / fmt::format("model_files_{}", getpid());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string vocab() const { return shared_dir() + "/fixtures/tokenizer/ggml-vocab-llama-spm.gguf"; }
  std::filesystem::path synth(const std::string& name, DType type, int threads = 2,
                              uint64_t seed = 1, int64_t n_vocab = 0) {
    SynthOptions o;
    o.shape = *find_synth_shape("tiny");
    o.shape.n_vocab = n_vocab;
    o.type = type;
    o.vocab = vocab();
    o.seed = seed;
    o.threads = threads;
    const auto path = dir_ / name;
    synthesize_model(o, path);
    return path;
  }
  static std::vector<uint8_t> bytes(const std::filesystem::path& p) {
    std::ifstream in(p, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), {}};
  }
  static std::vector<float> floats(const gguf::File& f, std::string_view name) {
    const gguf::TensorInfo* t = f.find_tensor(name);
    EXPECT_NE(t, nullptr) << name;
    std::vector<float> v(static_cast<size_t>(t->n_elements()));
    dequantize_row(t->type, f.tensor_data(*t).data(), v.data(), t->n_elements());
    return v;
  }

  std::filesystem::path dir_;
};

TEST_F(ModelFilesTest, SynthWritesTheShapeWithNormalWeightsAndUnitNorms) {
  const auto path = synth("tiny-f32.gguf", DType::kF32);
  const gguf::File f = gguf::File::open(path);
  const SynthShape& s = *find_synth_shape("tiny");
  EXPECT_EQ(f.find("general.architecture")->string(), "llama");
  EXPECT_EQ(f.find("llama.embedding_length")->u32(), s.n_embd);
  EXPECT_EQ(f.find("llama.block_count")->u32(), s.n_layer);
  EXPECT_EQ(f.find("llama.attention.head_count_kv")->u32(), s.n_head_kv);
  EXPECT_EQ(f.find("general.file_type")->u32(), 0u);
  EXPECT_EQ(f.tensors().size(), 3u + 9u * static_cast<size_t>(s.n_layer));
  EXPECT_EQ(f.find("tokenizer.ggml.tokens")->array().size(), 32000u);
  const gguf::TensorInfo* k = f.find_tensor("blk.1.attn_k.weight");
  ASSERT_NE(k, nullptr);
  EXPECT_EQ(k->ne[0], s.n_embd);
  EXPECT_EQ(k->ne[1], s.n_embd / s.n_head * s.n_head_kv);
  // 8M samples: the mean's standard error is 0.02 / 2900, the std's about
  // 0.02 / 4000; 1% of the std is far outside both.
  const std::vector<float> e = floats(f, "token_embd.weight");
  double sum = 0, sq = 0;
  for (float x : e) sum += x, sq += double(x) * x;
  const double mean = sum / double(e.size()), sd = std::sqrt(sq / double(e.size()) - mean * mean);
  EXPECT_NEAR(mean, 0.0, 2e-4);
  EXPECT_NEAR(sd, 0.02, 2e-4);
  for (float x : floats(f, "blk.0.ffn_norm.weight")) ASSERT_EQ(x, 1.0f);
  // Rows differ from each other (per-row seeds are not all alike).
  const std::vector<float> q = floats(f, "blk.0.attn_q.weight");
  EXPECT_NE(std::vector<float>(q.begin(), q.begin() + 256),
            std::vector<float>(q.begin() + 256, q.begin() + 512));
}

TEST_F(ModelFilesTest, SynthIsTheSameForAnyThreadCountAndDiffersBySeed) {
  const auto one = bytes(synth("a.gguf", DType::kQ4_0, 1));
  const auto three = bytes(synth("b.gguf", DType::kQ4_0, 3));
  const auto other_seed = bytes(synth("c.gguf", DType::kQ4_0, 2, 2));
  EXPECT_EQ(one, three);
  EXPECT_EQ(one.size(), other_seed.size());
  EXPECT_NE(one, other_seed);
}

TEST_F(ModelFilesTest, SynthPadsASmallerVocabularyAndRefusesALargerOne) {
  const gguf::File f = gguf::File::open(synth("pad.gguf", DType::kF16, 2, 1, 32005));
  const gguf::ArrayView& tokens = f.find("tokenizer.ggml.tokens")->array();
  ASSERT_EQ(tokens.size(), 32005u);
  EXPECT_EQ(tokens.string(32004), "<unused32004>");
  EXPECT_EQ(f.find("tokenizer.ggml.token_type")->array().number<int>(32004), 5);
  EXPECT_EQ(f.find("tokenizer.ggml.scores")->array().size(), 32005u);
  EXPECT_EQ(f.find_tensor("output.weight")->ne[1], 32005);
  try {
    synth("small.gguf", DType::kF16, 2, 1, 1000);
    ADD_FAILURE() << "a 32000-token vocabulary went into a 1000-token shape";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("32000 tokens"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(std::filesystem::exists(dir_ / "small.gguf"));
}

TEST_F(ModelFilesTest, QuantizedRowsEqualTheReferenceQuantizer) {
  const auto src = synth("src.gguf", DType::kF32);
  const gguf::File in = gguf::File::open(src);
  for (DType type : {DType::kQ8_0, DType::kQ4_0, DType::kQ5_1, DType::kBF16}) {
    SCOPED_TRACE(dtype_name(type));
    const auto out = dir_ / fmt::format("{}.gguf", dtype_name(type));
    QuantizeOptions o;
    o.type = type;
    const QuantizeSummary s = quantize_model(src, out, o);
    const gguf::File q = gguf::File::open(out);
    EXPECT_EQ(q.find("general.file_type")->u32(), *llama_file_type(type));
    EXPECT_EQ(q.find("tokenizer.ggml.tokens")->array().size(), 32000u);
    EXPECT_EQ(s.tensors, in.tensors().size());
    for (const gguf::TensorInfo& t : in.tensors()) {
      const gguf::TensorInfo* r = q.find_tensor(t.name);
      ASSERT_NE(r, nullptr) << t.name;
      DType want = t.n_dims >= 2 ? type : DType::kF32;
      if (t.name == "output.weight" && dtype_info(type).quantized) {
        want = type == DType::kQ8_0 ? DType::kQ8_0 : DType::kQ6_K;
      }
      ASSERT_EQ(r->type, want) << t.name;
      // Row by row, the bytes the reference quantizer gives.
      const size_t in_row = *row_bytes(t.type, t.ne[0]), out_row = *row_bytes(want, t.ne[0]);
      std::vector<float> v(static_cast<size_t>(t.ne[0]));
      std::vector<uint8_t> expect(out_row);
      const int64_t rows = t.n_elements() / t.ne[0];
      for (int64_t row : {int64_t{0}, rows / 2, rows - 1}) {
        dequantize_row(t.type, in.tensor_data(t).data() + row * in_row, v.data(), t.ne[0]);
        quantize_row(want, v.data(), expect.data(), t.ne[0]);
        const auto got = q.tensor_data(*r).subspan(static_cast<size_t>(row) * out_row, out_row);
        ASSERT_TRUE(std::equal(got.begin(), got.end(), expect.begin())) << t.name << " row " << row;
      }
    }
  }
}

TEST_F(ModelFilesTest, QuantizeFollowsPureRequantizeAndThreadsRules) {
  const auto src = synth("src16.gguf", DType::kF16);
  QuantizeOptions o;
  o.type = DType::kQ4_0;
  o.pure = true;
  o.threads = 1;
  quantize_model(src, dir_ / "pure1.gguf", o);
  o.threads = 3;
  quantize_model(src, dir_ / "pure3.gguf", o);
  EXPECT_EQ(bytes(dir_ / "pure1.gguf"), bytes(dir_ / "pure3.gguf"));
  EXPECT_EQ(gguf::File::open(dir_ / "pure1.gguf").find_tensor("output.weight")->type, DType::kQ4_0);

  // Requantizing is refused by name unless allowed; allowed, it dequantizes.
  o.type = DType::kQ8_0;
  o.pure = false;
  try {
    quantize_model(dir_ / "pure1.gguf", dir_ / "re.gguf", o);
    ADD_FAILURE() << "requantized without being asked";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("token_embd.weight"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("--allow-requantize"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(std::filesystem::exists(dir_ / "re.gguf"));
  o.allow_requantize = true;
  quantize_model(dir_ / "pure1.gguf", dir_ / "re.gguf", o);
  const gguf::File re = gguf::File::open(dir_ / "re.gguf");
  const gguf::File q4 = gguf::File::open(dir_ / "pure1.gguf");
  // Requantized to Q8_0, each value is within half a step (block max / 127)
  // of the Q4_0 one, plus the step's own f16 rounding (127 * 2^-11 steps).
  const std::vector<float> a = floats(q4, "blk.1.ffn_up.weight"), b = floats(re, "blk.1.ffn_up.weight");
  for (size_t i = 0; i < a.size(); i += 32) {
    float amax = 0;
    for (size_t j = i; j < i + 32; ++j) amax = std::max(amax, std::fabs(a[j]));
    for (size_t j = i; j < i + 32; ++j) ASSERT_LE(std::fabs(a[j] - b[j]), amax / 127 * 0.6f + 1e-6f);
  }

  EXPECT_EQ(quantize_type_from_name("q4_0"), DType::kQ4_0);
  EXPECT_EQ(quantize_type_from_name("BF16"), DType::kBF16);
  EXPECT_EQ(quantize_type_from_name("7"), DType::kQ8_0);
  EXPECT_FALSE(quantize_type_from_name("Q4_K_M").has_value());
  EXPECT_THROW(quantize_model(src, src, o), Error);  // never over its own input
}

}  // namespace
}  // namespace tessera::testing
