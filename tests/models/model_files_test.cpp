// tessera synth and quantize as libraries: random models of the declared
// shape and statistics, the same bytes whatever the thread count, quantized
// tensors equal to the reference quantizer's rows, and llama-quantize's mixes
// (Q4_K_M, IQ4_XS, ...) giving each tensor the type its rules say.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <set>
#include <span>

#include <fmt/format.h>

#include "models/model_test_util.h"
#include "tessera/backends/builtin.h"
#include "tessera/core/error.h"
#include "tessera/core/quants.h"
#include "tessera/engine/engine.h"
#include "tessera/engine/sampler.h"
#include "tessera/gguf/gguf.h"
#include "tessera/models/quantize.h"
#include "tessera/models/synth.h"
#include "tessera/runtime/runtime.h"

namespace tessera::testing {
namespace {

class ModelFilesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::path(::testing::TempDir()) / fmt::format("model_files_{}", getpid());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string vocab() const { return fixtures_dir() + "/tokenizer/ggml-vocab-llama-spm.gguf"; }
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
    o.mix = *quantize_mix_of(type);
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
  o.mix = *quantize_mix_of(DType::kQ4_0);
  o.pure = true;
  o.threads = 1;
  quantize_model(src, dir_ / "pure1.gguf", o);
  o.threads = 3;
  quantize_model(src, dir_ / "pure3.gguf", o);
  EXPECT_EQ(bytes(dir_ / "pure1.gguf"), bytes(dir_ / "pure3.gguf"));
  EXPECT_EQ(gguf::File::open(dir_ / "pure1.gguf").find_tensor("output.weight")->type, DType::kQ4_0);

  // Requantizing is refused by name unless allowed; allowed, it dequantizes.
  o.mix = *quantize_mix_of(DType::kQ8_0);
  o.pure = false;
  try {
    quantize_model(dir_ / "pure1.gguf", dir_ / "re.gguf", o);
    ADD_FAILURE() << "requantized without being asked";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("output.weight"), std::string::npos) << e.what();
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
  EXPECT_FALSE(quantize_type_from_name("Q4_K_M").has_value());  // a mix, not a tensor type
  EXPECT_EQ(quantize_type_from_name("iq4_nl"), DType::kIQ4_NL);
  EXPECT_THROW(quantize_model(src, src, o), Error);  // never over its own input
}

// Mixes by llama-quantize's names (any case, its aliases) and llama.h's numbers.
TEST(QuantizeMixNames, NamesNumbersAndAliases) {
  const std::pair<const char*, uint32_t> kNamed[] = {
      {"Q2_K", 10},   {"q3_k_s", 11}, {"Q3_K_M", 12}, {"Q3_K_L", 13}, {"Q4_K_S", 14},
      {"q4_k_m", 15}, {"Q5_K_S", 16}, {"Q5_K_M", 17}, {"Q6_K", 18},   {"IQ4_NL", 25},
      {"iq4_xs", 30}, {"Q4_K", 15},   {"Q3_K", 12},   {"Q5_K", 17},   {"Q8_0", 7},
      {"F16", 1},     {"15", 15},     {"30", 30},     {"2", 2}};
  for (const auto& [name, ftype] : kNamed) {
    const std::optional<QuantizeMix> m = quantize_mix_from_name(name);
    ASSERT_TRUE(m.has_value()) << name;
    EXPECT_EQ(m->ftype, ftype) << name;
  }
  EXPECT_EQ(quantize_mix_from_name("Q4_K_M")->type, DType::kQ4_K);
  EXPECT_EQ(quantize_mix_from_name("IQ4_XS")->type, DType::kIQ4_XS);
  for (const char* bad : {"Q4_K_X", "q9_0", "IQ2_XXS", "19", "", "15x"}) {
    EXPECT_FALSE(quantize_mix_from_name(bad).has_value()) << bad;
  }
  const std::string names = quantize_mix_names();
  EXPECT_NE(names.find("Q4_K_M (15)"), std::string::npos) << names;
  EXPECT_NE(names.find("IQ4_XS (30)"), std::string::npos) << names;
}

// Every quantized tensor of `q` holds, row by row, the reference quantizer's
// bytes for the source row (dequantized first), in the type `q` says.
void expect_reference_rows(const gguf::File& in, const gguf::File& q) {
  for (const gguf::TensorInfo& t : in.tensors()) {
    const gguf::TensorInfo* r = q.find_tensor(t.name);
    ASSERT_NE(r, nullptr) << t.name;
    if (r->type == t.type) continue;
    const size_t in_row = *row_bytes(t.type, t.ne[0]), out_row = *row_bytes(r->type, t.ne[0]);
    std::vector<float> v(static_cast<size_t>(t.ne[0]));
    std::vector<uint8_t> expect(out_row);
    const int64_t rows = t.n_elements() / t.ne[0];
    for (int64_t row : {int64_t{0}, rows / 2, rows - 1}) {
      dequantize_row(t.type, in.tensor_data(t).data() + row * in_row, v.data(), t.ne[0]);
      quantize_row(r->type, v.data(), expect.data(), t.ne[0]);
      const auto got = q.tensor_data(*r).subspan(static_cast<size_t>(row) * out_row, out_row);
      ASSERT_TRUE(std::equal(got.begin(), got.end(), expect.begin())) << t.name << " row " << row;
    }
  }
}

// The tiny shape: 2 layers, 8 heads over 4 KV heads (n_gqa 2), its own output
// head, rows of 256 and 512. use_more_bits(i, 2) holds for layer 1 only
// (i >= 7 * 2 / 8), so Q4_K_M gives blk.1's attn_v and ffn_down Q6_K. The
// expected types are llama_tensor_get_type's, worked out by hand per mix.
struct MixCase {
  const char* mix;
  uint32_t ftype;
  DType base, output, attn_v0, attn_v1, ffn_down0, ffn_down1, attn_output;
};
using enum DType;
constexpr MixCase kMixCases[] = {
    {"Q4_K_M", 15, kQ4_K, kQ6_K, kQ4_K, kQ6_K, kQ4_K, kQ6_K, kQ4_K},
    {"Q5_K_M", 17, kQ5_K, kQ6_K, kQ5_K, kQ6_K, kQ5_K, kQ6_K, kQ5_K},
    {"Q4_K_S", 14, kQ4_K, kQ6_K, kQ5_K, kQ5_K, kQ4_K, kQ4_K, kQ4_K},   // attn_v: first 4 layers
    {"Q3_K_M", 12, kQ3_K, kQ6_K, kQ5_K, kQ5_K, kQ4_K, kQ4_K, kQ4_K},   // attn_v: first 2
    {"Q3_K_L", 13, kQ3_K, kQ6_K, kQ5_K, kQ5_K, kQ5_K, kQ5_K, kQ5_K},
    {"Q2_K", 10, kQ2_K, kQ6_K, kQ3_K, kQ3_K, kQ3_K, kQ3_K, kQ3_K},     // n_gqa 2 < 4: attn_v Q3_K
    {"IQ4_XS", 30, kIQ4_XS, kQ6_K, kIQ4_XS, kIQ4_XS, kIQ4_XS, kIQ4_XS, kIQ4_XS},  // n/8 = 0
    {"IQ4_NL", 25, kIQ4_NL, kQ6_K, kIQ4_NL, kIQ4_NL, kIQ4_NL, kIQ4_NL, kIQ4_NL},
    {"Q6_K", 18, kQ6_K, kQ6_K, kQ6_K, kQ6_K, kQ6_K, kQ6_K, kQ6_K},
};

// One test per mix, so that ctest spreads them over the cores (each quantizes
// the whole model: seconds under ASan).
class ModelFilesMixTest : public ModelFilesTest, public ::testing::WithParamInterface<MixCase> {};

TEST_P(ModelFilesMixTest, GivesEachTensorLlamaQuantizesType) {
  const MixCase& c = GetParam();
  const auto src = synth("mix-src.gguf", DType::kF16);
  const gguf::File in = gguf::File::open(src);
  QuantizeOptions o;
  o.mix = *quantize_mix_from_name(c.mix);
  const auto out = dir_ / fmt::format("{}.gguf", c.mix);
  quantize_model(src, out, o);
  const gguf::File q = gguf::File::open(out);
  EXPECT_EQ(q.find("general.file_type")->u32(), c.ftype);
  for (const gguf::TensorInfo& t : q.tensors()) {
    const std::string_view n = t.name;
    DType want = c.base;
    if (t.n_dims < 2) want = kF32;
    else if (n == "output.weight") want = c.output;
    else if (n == "blk.0.attn_v.weight") want = c.attn_v0;
    else if (n == "blk.1.attn_v.weight") want = c.attn_v1;
    else if (n == "blk.0.ffn_down.weight") want = c.ffn_down0;
    else if (n == "blk.1.ffn_down.weight") want = c.ffn_down1;
    else if (n.ends_with("attn_output.weight")) want = c.attn_output;
    EXPECT_EQ(t.type, want) << t.name;
  }
  expect_reference_rows(in, q);
}

INSTANTIATE_TEST_SUITE_P(Mixes, ModelFilesMixTest, ::testing::ValuesIn(kMixCases),
                         [](const ::testing::TestParamInfo<MixCase>& info) {
                           return std::string(info.param.mix);
                         });

// Q6_K, Q4_K_M and Q2_K files load and generate, with logits nearer the F16
// model's the more bits they keep. Scale of the errors: a Gaussian weight row
// in blocks of 32 spans about +-2.1 sigma, so Q4_K's step is ~0.28 sigma and
// its RMS error ~0.08 sigma: a normalized MSE of ~6e-3 for each product. The
// logits pass through the embedding, two layers and the head; if those errors
// added independently along 5 products, 3e-2 (measured 2.4e-2): bound 5e-2.
// (Measured Q6_K 2.7e-3, Q2_K 0.29; the synthetic model is fixed by its seed.)
// Q6_K (steps 4x finer) must be well under it, Q2_K (4x coarser) well over.
TEST_F(ModelFilesTest, KQuantModelsGenerateNearTheF16Model) {
  const auto src = synth("gen-f16.gguf", DType::kF16);
  std::unique_ptr<Runtime> rt = make_runtime(false);
  const std::unique_ptr<Model> f16 = Model::load(*rt, src);
  const std::vector<int32_t> prompt = {1, 9038, 2501, 263, 931};  // <s> Once upon a time
  Session reference(*f16);
  const std::span<const float> first = reference.decode(prompt);
  const std::vector<float> want(first.begin(), first.end());
  std::map<std::string, double> error;
  for (const char* mix : {"Q6_K", "Q4_K_M", "Q2_K"}) {
    SCOPED_TRACE(mix);
    QuantizeOptions o;
    o.mix = *quantize_mix_from_name(mix);
    const auto path = dir_ / fmt::format("gen-{}.gguf", mix);
    quantize_model(src, path, o);
    const std::unique_ptr<Model> q = Model::load(*rt, path);
    Session s(*q);
    std::span<const float> logits = s.decode(prompt);
    error[mix] = nmse(logits, want);
    Sampler sampler({.temp = 0.0f});
    for (int i = 0; i < 8; ++i) {
      const int32_t t = sampler.sample(logits);
      ASSERT_GE(t, 0);
      ASSERT_LT(t, 32000);
      logits = s.decode(std::span(&t, 1));
      ASSERT_EQ(logits.size(), 32000u);
      for (float x : logits) ASSERT_TRUE(std::isfinite(x));
    }
    EXPECT_EQ(s.n_past(), static_cast<int64_t>(prompt.size()) + 8);
  }
  EXPECT_LT(error["Q4_K_M"], 5e-2);
  EXPECT_LT(error["Q6_K"], error["Q4_K_M"] / 4);
  EXPECT_GT(error["Q2_K"], error["Q4_K_M"] * 2);
  std::cerr << "logits nmse vs F16: Q6_K " << error["Q6_K"] << ", Q4_K_M " << error["Q4_K_M"]
            << ", Q2_K " << error["Q2_K"] << "\n";
}

// A hand-made 16-layer file (n_gqa 8), its tensors written in descending layer
// order: llama-quantize counts attn_v and ffn_down in layer order whatever the
// file order, so the use_more_bits layers are 0, 1, 14, 15 and every third from
// 2 + 2 = 4 (4, 7, 10, 13). Rows of 96 and 40 fall back as tensor_type_fallback does.
TEST_F(ModelFilesTest, MixRulesCountLayersAndFallBackOnOddRows) {
  gguf::Writer w;
  w.set_string("general.architecture", "llama");
  w.set_u32("llama.block_count", 16);
  w.set_u32("llama.attention.head_count", 32);
  w.set_u32("llama.attention.head_count_kv", 4);
  uint32_t state = 12345;
  auto add = [&](const std::string& name, int64_t ne0, int64_t ne1) {
    std::vector<float> v(static_cast<size_t>(ne0 * ne1));
    for (float& x : v) {
      state = state * 1664525u + 1013904223u;
      x = static_cast<float>(static_cast<int32_t>(state >> 8) - (1 << 23)) / float(1 << 23);
    }
    const std::vector<int64_t> shape = {ne0, ne1};
    w.add_tensor(name, DType::kF32, shape,
                 std::span(reinterpret_cast<const uint8_t*>(v.data()), v.size() * sizeof(float)));
  };
  for (int l = 15; l >= 0; --l) {
    add(fmt::format("blk.{}.attn_v.weight", l), 256, 2);
    add(fmt::format("blk.{}.ffn_down.weight", l), 256, 2);
  }
  add("blk.0.ffn_up.weight", 96, 2);
  add("blk.0.ffn_gate.weight", 40, 2);
  add("output.weight", 96, 2);
  const auto src = dir_ / "layers.gguf";
  w.write(src);
  const gguf::File in = gguf::File::open(src);

  auto types_of = [&](const char* mix) {
    QuantizeOptions o;
    o.mix = *quantize_mix_from_name(mix);
    const auto out = dir_ / fmt::format("layers-{}.gguf", mix);
    quantize_model(src, out, o);
    const gguf::File q = gguf::File::open(out);
    expect_reference_rows(in, q);
    std::map<std::string, DType> types;
    for (const gguf::TensorInfo& t : q.tensors()) types[std::string(t.name)] = t.type;
    return types;
  };
  using enum DType;
  {
    SCOPED_TRACE("Q4_K_M");
    auto t = types_of("Q4_K_M");
    const std::set<int> more = {0, 1, 4, 7, 10, 13, 14, 15};
    for (int l = 0; l < 16; ++l) {
      const DType want = more.count(l) ? kQ6_K : kQ4_K;
      EXPECT_EQ(t[fmt::format("blk.{}.attn_v.weight", l)], want) << l;
      EXPECT_EQ(t[fmt::format("blk.{}.ffn_down.weight", l)], want) << l;
    }
    EXPECT_EQ(t["blk.0.ffn_up.weight"], kQ5_0);   // Q4_K -> Q5_0
    EXPECT_EQ(t["blk.0.ffn_gate.weight"], kF16);  // 40: no multiple of 32 either
    EXPECT_EQ(t["output.weight"], kQ8_0);         // 96 % 256: Q8_0 as the head rule says
  }
  {
    SCOPED_TRACE("IQ4_XS");
    auto t = types_of("IQ4_XS");
    for (int l = 0; l < 16; ++l) {
      EXPECT_EQ(t[fmt::format("blk.{}.attn_v.weight", l)], kQ5_K) << l;  // n_gqa 8 >= 4
      EXPECT_EQ(t[fmt::format("blk.{}.ffn_down.weight", l)], l < 2 ? kQ5_K : kIQ4_XS) << l;
    }
    EXPECT_EQ(t["blk.0.ffn_up.weight"], kIQ4_NL);
  }
  {
    SCOPED_TRACE("Q3_K_M");
    auto t = types_of("Q3_K_M");
    for (int l = 0; l < 16; ++l) {
      EXPECT_EQ(t[fmt::format("blk.{}.attn_v.weight", l)], l < 2 ? kQ5_K : kQ4_K) << l;
      EXPECT_EQ(t[fmt::format("blk.{}.ffn_down.weight", l)], l < 1 ? kQ5_K : kQ4_K) << l;
    }
    EXPECT_EQ(t["blk.0.ffn_up.weight"], kQ4_0);  // Q3_K -> Q4_0
  }
  {
    SCOPED_TRACE("Q2_K");
    auto t = types_of("Q2_K");
    EXPECT_EQ(t["blk.3.attn_v.weight"], kQ4_K);  // n_gqa 8 >= 4
    EXPECT_EQ(t["blk.3.ffn_down.weight"], kQ3_K);
  }
  {
    SCOPED_TRACE("Q4_K_M --pure --output-tensor-type q8_0");
    QuantizeOptions o;
    o.mix = *quantize_mix_from_name("Q4_K_M");
    o.pure = true;
    o.output_type = DType::kQ8_0;
    quantize_model(src, dir_ / "layers-pure.gguf", o);
    const gguf::File q = gguf::File::open(dir_ / "layers-pure.gguf");
    EXPECT_EQ(q.find_tensor("blk.1.attn_v.weight")->type, kQ4_K);
    EXPECT_EQ(q.find_tensor("blk.0.ffn_up.weight")->type, kQ5_0);  // pure still falls back
    EXPECT_EQ(q.find_tensor("output.weight")->type, kQ8_0);
    EXPECT_EQ(q.find("general.file_type")->u32(), 15u);
  }
}

// Mixture-of-experts files, as llama_model_quantize treats them (checked
// against node-llama-cpp 3.22.1's libllama by bench/quantize_compare.sh):
// MXFP4_MOE puts the 3-D experts in MXFP4 and every other quantizable weight
// (untied token_embd and the head included) in Q8_0; routers and [n, 1]
// shared-expert gates (1-D by ggml_n_dims) stay as they are and are written
// 1-D; eight experts (Mixtral) bump attn_v / attn_k to Q8_0 and attn_output
// to Q5_K; ffn_down's layer comes from its name. Tensors are written by layer,
// then name, and the quantization version and file type are the last keys.
TEST_F(ModelFilesTest, ExpertFilesFollowLlamaQuantizesRules) {
  auto write = [&](const std::filesystem::path& path, int n_expert) {
    gguf::Writer w;
    w.set_string("general.architecture", "qwen2moe");
    w.set_u32("general.file_type", 0);
    w.set_u32("qwen2moe.block_count", 2);
    w.set_u32("qwen2moe.attention.head_count", 4);
    w.set_u32("qwen2moe.attention.head_count_kv", 4);
    w.set_u32("qwen2moe.expert_count", static_cast<uint32_t>(n_expert));
    w.set_u32("split.count", 1);
    uint32_t state = 99;
    auto add = [&](const std::string& name, std::vector<int64_t> shape) {
      int64_t n = 1;
      for (int64_t d : shape) n *= d;
      std::vector<float> v(static_cast<size_t>(n));
      for (float& x : v) {
        state = state * 1664525u + 1013904223u;
        x = static_cast<float>(static_cast<int32_t>(state >> 8) - (1 << 23)) / float(1 << 23);
      }
      w.add_tensor(name, DType::kF32, shape,
                   std::span(reinterpret_cast<const uint8_t*>(v.data()), v.size() * sizeof(float)));
    };
    for (int l = 1; l >= 0; --l) {  // not in llama's order
      const std::string b = fmt::format("blk.{}.", l);
      add(b + "ffn_up_exps.weight", {256, 64, n_expert});
      add(b + "ffn_down_exps.weight", {64, 256, n_expert});
      add(b + "ffn_gate_exps.weight", {256, 64, n_expert});
      add(b + "ffn_gate_inp.weight", {256, n_expert});
      add(b + "ffn_gate_inp_shexp.weight", {256, 1});
      add(b + "ffn_up_shexp.weight", {256, 64});
      add(b + "attn_v.weight", {256, 256});
      add(b + "attn_k.weight", {256, 256});
      add(b + "attn_q.weight", {256, 256});
      add(b + "attn_output.weight", {256, 256});
      add(b + "attn_norm.weight", {256});
    }
    add("token_embd.weight", {256, 32});
    add("output.weight", {256, 32});
    w.write(path);
    return path;
  };
  using enum DType;
  const auto quantize = [&](const std::filesystem::path& src, const char* mix) {
    QuantizeOptions o;
    o.mix = *quantize_mix_from_name(mix);
    const auto out = dir_ / fmt::format("{}-{}", mix, src.filename().string());
    quantize_model(src, out, o);
    return out;
  };
  {
    SCOPED_TRACE("MXFP4_MOE, 4 experts");
    const auto src = write(dir_ / "moe4.gguf", 4);
    const gguf::File in = gguf::File::open(src);
    const gguf::File q = gguf::File::open(quantize(src, "MXFP4_MOE"));
    expect_reference_rows(in, q);
    std::map<std::string, DType> t;
    std::vector<std::string> names;
    for (const gguf::TensorInfo& ti : q.tensors()) {
      t[std::string(ti.name)] = ti.type;
      names.emplace_back(ti.name);
    }
    for (const char* e : {"ffn_up_exps", "ffn_down_exps", "ffn_gate_exps"}) {
      EXPECT_EQ(t[fmt::format("blk.1.{}.weight", e)], kMXFP4) << e;
    }
    for (const char* d : {"attn_v", "attn_k", "attn_q", "attn_output", "ffn_up_shexp"}) {
      EXPECT_EQ(t[fmt::format("blk.0.{}.weight", d)], kQ8_0) << d;
    }
    EXPECT_EQ(t["token_embd.weight"], kQ8_0);
    EXPECT_EQ(t["output.weight"], kQ8_0);
    EXPECT_EQ(t["blk.0.ffn_gate_inp.weight"], kF32);
    EXPECT_EQ(t["blk.0.ffn_gate_inp_shexp.weight"], kF32);
    EXPECT_EQ(q.find_tensor("blk.0.ffn_gate_inp_shexp.weight")->n_dims, 1u);
    EXPECT_EQ(names.front(), "output.weight");
    EXPECT_EQ(names[2], "blk.0.attn_k.weight");
    EXPECT_TRUE(std::is_sorted(names.begin() + 2, names.begin() + 13));
    EXPECT_EQ(names[13], "blk.1.attn_k.weight");
    const auto kvs = q.kvs();
    ASSERT_GE(kvs.size(), 2u);
    EXPECT_EQ(kvs[kvs.size() - 2].key, "general.quantization_version");
    EXPECT_EQ(kvs.back().key, "general.file_type");
    EXPECT_EQ(kvs.back().value.u32(), 38u);
    EXPECT_EQ(q.find("split.count"), nullptr);
  }
  {
    SCOPED_TRACE("Q4_K_M, 8 experts");
    const auto src = write(dir_ / "moe8.gguf", 8);
    const gguf::File q = gguf::File::open(quantize(src, "Q4_K_M"));
    std::map<std::string, DType> t;
    for (const gguf::TensorInfo& ti : q.tensors()) t[std::string(ti.name)] = ti.type;
    for (int l = 0; l < 2; ++l) {
      EXPECT_EQ(t[fmt::format("blk.{}.attn_v.weight", l)], kQ8_0) << l;
      EXPECT_EQ(t[fmt::format("blk.{}.attn_k.weight", l)], kQ8_0) << l;
      EXPECT_EQ(t[fmt::format("blk.{}.attn_output.weight", l)], kQ5_K) << l;
      EXPECT_EQ(t[fmt::format("blk.{}.attn_q.weight", l)], kQ4_K) << l;
      // use_more_bits(l, 2) holds for layer 1 only; layer from the name (rows of 64: Q6_K -> Q8_0).
      EXPECT_EQ(t[fmt::format("blk.{}.ffn_down_exps.weight", l)], l == 1 ? kQ8_0 : kQ5_0) << l;
      EXPECT_EQ(t[fmt::format("blk.{}.ffn_up_exps.weight", l)], kQ4_K) << l;
    }
  }
}

// An importance matrix as llama-imatrix writes it: per weight, in_sum2 [ne0]
// and counts [1]; `zero_count` names one whose count is 0 (values read as 1).
std::filesystem::path write_imatrix(const std::filesystem::path& path, const gguf::File& model,
                                    const std::vector<std::string>& weights,
                                    const std::string& zero_count = {}) {
  gguf::Writer w;
  w.set_string("general.type", "imatrix");
  const std::vector<std::string> datasets = {"calibration.txt"};
  w.set_array_strings("imatrix.datasets", datasets);
  w.set_u32("imatrix.chunk_count", 12);
  w.set_u32("imatrix.chunk_size", 512);
  uint32_t state = 7;
  for (const std::string& name : weights) {
    const int64_t ne0 = model.find_tensor(name)->ne[0];
    std::vector<float> sums(static_cast<size_t>(ne0));
    for (float& x : sums) {
      state = state * 1664525u + 1013904223u;
      x = static_cast<float>(state >> 8) * (1.0f / 65536.0f);  // 0 .. 256
    }
    const std::vector<float> count = {name == zero_count ? 0.0f : 6.0f};
    const std::vector<int64_t> sums_shape = {ne0, 1}, count_shape = {1, 1};
    w.add_tensor(name + ".in_sum2", DType::kF32, sums_shape,
                 std::span(reinterpret_cast<const uint8_t*>(sums.data()), sums.size() * 4));
    w.add_tensor(name + ".counts", DType::kF32, count_shape,
                 std::span(reinterpret_cast<const uint8_t*>(count.data()), 4));
  }
  w.write(path);
  return path;
}

// --imatrix: tensors with an entry hold quantize_row_weighted's bytes for the
// importance sums / counts (1 where the count is 0), those without the plain
// quantizer's; llama-quantize's keys are recorded; the IQ4 ffn_down rule drops
// and Q4_0 guards its first ffn_down layers, as with llama-quantize.
TEST_F(ModelFilesTest, ImatrixWeightsTheTensorsItNames) {
  const auto src = synth("im-src.gguf", DType::kF16);
  const gguf::File in = gguf::File::open(src);
  const std::vector<std::string> named = {"blk.0.attn_q.weight", "blk.1.ffn_down.weight",
                                          "blk.0.attn_v.weight", "output.weight"};
  const auto imatrix = write_imatrix(dir_ / "im.gguf", in, named, "blk.0.attn_v.weight");
  QuantizeOptions o;
  o.mix = *quantize_mix_from_name("Q4_K_M");
  o.imatrix = imatrix;
  std::map<std::string, bool> weighted_by_report;  // QuantizeTensor::name views the input file
  quantize_model(src, dir_ / "im-q4km.gguf", o, [&](size_t, size_t, const QuantizeTensor& t) {
    weighted_by_report[std::string(t.name)] = t.imatrix;
  });
  const gguf::File q = gguf::File::open(dir_ / "im-q4km.gguf");
  EXPECT_EQ(q.find("quantize.imatrix.file")->string(), imatrix.string());
  EXPECT_EQ(q.find("quantize.imatrix.dataset")->string(), "calibration.txt");
  EXPECT_EQ(q.find("quantize.imatrix.entries_count")->u32(), 4u);
  EXPECT_EQ(q.find("quantize.imatrix.chunks_count")->u32(), 12u);

  const gguf::File im = gguf::File::open(imatrix);
  for (const gguf::TensorInfo& t : in.tensors()) {
    const gguf::TensorInfo* r = q.find_tensor(t.name);
    if (r->type == t.type) continue;
    SCOPED_TRACE(t.name);
    const bool weighted = std::find(named.begin(), named.end(), t.name) != named.end();
    ASSERT_TRUE(weighted_by_report.count(std::string(t.name)));
    EXPECT_EQ(weighted_by_report[std::string(t.name)], weighted);
    std::vector<float> importance(static_cast<size_t>(t.ne[0]), 1.0f);
    if (weighted && t.name != "blk.0.attn_v.weight") {
      const std::vector<float> sums = floats(im, std::string(t.name) + ".in_sum2");
      for (size_t i = 0; i < importance.size(); ++i) importance[i] = sums[i] / 6.0f;
    }
    const size_t in_row = *row_bytes(t.type, t.ne[0]), out_row = *row_bytes(r->type, t.ne[0]);
    std::vector<float> v(static_cast<size_t>(t.ne[0]));
    std::vector<uint8_t> expect(out_row);
    const int64_t rows = t.n_elements() / t.ne[0];
    for (int64_t row : {int64_t{0}, rows - 1}) {
      dequantize_row(t.type, in.tensor_data(t).data() + row * in_row, v.data(), t.ne[0]);
      quantize_row_weighted(r->type, v.data(), expect.data(), t.ne[0], weighted ? importance.data() : nullptr);
      const auto got = q.tensor_data(*r).subspan(static_cast<size_t>(row) * out_row, out_row);
      ASSERT_TRUE(std::equal(got.begin(), got.end(), expect.begin())) << "row " << row;
    }
  }
}

TEST_F(ModelFilesTest, ImatrixChangesTheMixRulesAsLlamaQuantize) {
  // 16 layers, so that n/8 = 2 layers are "first layers".
  gguf::Writer w;
  w.set_string("general.architecture", "llama");
  w.set_u32("llama.block_count", 16);
  w.set_u32("llama.attention.head_count", 8);
  w.set_u32("llama.attention.head_count_kv", 8);
  std::vector<float> v(256 * 2);
  for (size_t i = 0; i < v.size(); ++i) v[i] = std::sin(0.37f * static_cast<float>(i));
  const std::vector<int64_t> shape = {256, 2};
  std::vector<std::string> names;
  for (int l = 0; l < 16; ++l) names.push_back(fmt::format("blk.{}.ffn_down.weight", l));
  for (const std::string& n : names) {
    w.add_tensor(n, DType::kF32, shape, std::span(reinterpret_cast<const uint8_t*>(v.data()), v.size() * 4));
  }
  const auto src = dir_ / "im-layers.gguf";
  w.write(src);
  const auto imatrix = write_imatrix(dir_ / "im-layers-imatrix.gguf", gguf::File::open(src), names);
  auto type_of = [&](const char* mix, bool with_imatrix, int layer) {
    QuantizeOptions o;
    o.mix = *quantize_mix_from_name(mix);
    if (with_imatrix) o.imatrix = imatrix;
    const auto out = dir_ / fmt::format("im-{}-{}.gguf", mix, with_imatrix);
    quantize_model(src, out, o);
    return gguf::File::open(out).find_tensor(fmt::format("blk.{}.ffn_down.weight", layer))->type;
  };
  EXPECT_EQ(type_of("IQ4_XS", false, 1), DType::kQ5_K);
  EXPECT_EQ(type_of("IQ4_XS", true, 1), DType::kIQ4_XS);
  EXPECT_EQ(type_of("Q4_0", false, 1), DType::kQ4_0);
  EXPECT_EQ(type_of("Q4_0", true, 1), DType::kQ4_1);
  EXPECT_EQ(type_of("Q4_0", true, 2), DType::kQ4_0);
  EXPECT_EQ(type_of("Q5_0", true, 0), DType::kQ5_1);
}

TEST_F(ModelFilesTest, BadImatrixFilesAreNamed) {
  const auto src = synth("im-bad-src.gguf", DType::kF16);
  const gguf::File in = gguf::File::open(src);
  QuantizeOptions o;
  o.mix = *quantize_mix_from_name("Q4_K_M");
  auto expect_error = [&](const std::filesystem::path& imatrix, const std::string& phrase) {
    o.imatrix = imatrix;
    try {
      quantize_model(src, dir_ / "im-bad.gguf", o);
      ADD_FAILURE() << "accepted " << imatrix;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(phrase), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(imatrix.filename().string()), std::string::npos) << e.what();
    }
    EXPECT_FALSE(std::filesystem::exists(dir_ / "im-bad.gguf"));
  };
  {  // the legacy binary format
    std::ofstream(dir_ / "legacy.dat", std::ios::binary) << std::string("\x02\x00\x00\x00junk", 8);
    expect_error(dir_ / "legacy.dat", "legacy .dat");
  }
  {  // no imatrix metadata
    gguf::Writer w;
    w.set_u32("imatrix.chunk_count", 1);
    w.write(dir_ / "nometa.gguf");
    expect_error(dir_ / "nometa.gguf", "imatrix.datasets");
  }
  {  // sums without counts
    gguf::Writer w;
    const std::vector<std::string> datasets = {"d"};
    w.set_array_strings("imatrix.datasets", datasets);
    w.set_u32("imatrix.chunk_count", 1);
    w.set_u32("imatrix.chunk_size", 1);
    const std::vector<float> sums(256, 1.0f);
    const std::vector<int64_t> shape = {256, 1};
    w.add_tensor("blk.0.attn_q.weight.in_sum2", DType::kF32, shape,
                 std::span(reinterpret_cast<const uint8_t*>(sums.data()), sums.size() * 4));
    w.write(dir_ / "nocounts.gguf");
    expect_error(dir_ / "nocounts.gguf", "blk.0.attn_q.weight");
  }
  {  // an entry whose length is not the tensor's row
    gguf::Writer w;
    const std::vector<std::string> datasets = {"d"};
    w.set_array_strings("imatrix.datasets", datasets);
    w.set_u32("imatrix.chunk_count", 1);
    w.set_u32("imatrix.chunk_size", 1);
    const std::vector<float> sums(128, 1.0f), counts = {1.0f};
    const std::vector<int64_t> shape = {128, 1}, count_shape = {1, 1};
    w.add_tensor("blk.1.ffn_up.weight.in_sum2", DType::kF32, shape,
                 std::span(reinterpret_cast<const uint8_t*>(sums.data()), sums.size() * 4));
    w.add_tensor("blk.1.ffn_up.weight.counts", DType::kF32, count_shape,
                 std::span(reinterpret_cast<const uint8_t*>(counts.data()), 4));
    w.write(dir_ / "short.gguf");
    expect_error(dir_ / "short.gguf", "'blk.1.ffn_up.weight': found 128 importance values");
  }
}

}  // namespace
}  // namespace tessera::testing
