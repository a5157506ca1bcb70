// Encoders against llama.cpp on their random-weight fixtures
// (tests/fixtures/archs/NAME.{gguf,json,embd.f32}, made by
// bench/embd_fixture.sh): each text's ids with special tokens exactly
// llama.cpp's, and its pooled embedding (the model's pooling, not
// normalized) within an NMSE limit, on every CPU tier the machine has, one
// text at a time through the serving core's Embedder.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <span>
#include <thread>
#include <fstream>
#include <nlohmann/json.hpp>

#include "backends/cpu/cpu_backend.h"
#include "models/model_test_util.h"
#include "tessera/backends/builtin.h"
#include "tessera/core/error.h"
#include "tessera/engine/engine.h"
#include "tessera/serving/embedder.h"
#include "tessera/text/tokenizer.h"

namespace tessera {
namespace {

// f16 weights on both sides, sums in other orders (llama.cpp also rounds
// activations to f16 for its matmuls), LayerNorms at eps 1e-12: measured
// worst 2.2e-8 on bert-tiny on every tier; without the token type row 0.39,
// without the position embeddings 0.31.
constexpr double kEmbdNmseLimit = 1e-4;

// The same input packed with others and alone: the pass's matmuls take other
// kernels (blocks of rows, f16 activations on the SIMD tiers), so the two
// differ by rounding, which a pre-norm stack (modern_bert) carries to the
// output: measured NMSE up to 1.1e-9 (modern_bert on avx2 and avx512); a
// neighbour's tokens leaking in would give ~1.
constexpr double kPackedNmseLimit = 1e-7;

double nmse(std::span<const float> got, std::span<const float> want) {
  double err = 0, ref = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    err += (double(got[i]) - want[i]) * (double(got[i]) - want[i]);
    ref += double(want[i]) * want[i];
  }
  return err / ref;
}

struct EncoderFixture {
  std::string architecture, gguf;
  std::vector<std::string> texts;
  std::vector<std::vector<int32_t>> ids;
  int pooling = 0;
  int64_t n_embd = 0;
  std::vector<float> embd;  // [texts][n_embd]
  // NAME.tokens.embd.f32 where made (TOKENS=1): every token's state, pooling
  // none, [all texts' tokens][n_embd]; empty otherwise.
  std::vector<float> token_embd;

  static EncoderFixture load(const std::string& name) {
    const std::string dir = testing::fixtures_dir() + "/archs/";
    std::ifstream js(dir + name + ".json");
    if (!js) throw std::runtime_error("cannot open " + dir + name + ".json");
    const nlohmann::json j = nlohmann::json::parse(js);
    EncoderFixture f;
    f.architecture = j.at("architecture").get<std::string>();
    f.gguf = dir + name + ".gguf";
    for (const auto& t : j.at("texts")) {
      f.texts.push_back(t.at("text").get<std::string>());
      f.ids.push_back(t.at("ids").get<std::vector<int32_t>>());
    }
    f.pooling = j.at("pooling").get<int>();
    f.n_embd = j.at("n_embd").get<int64_t>();
    std::ifstream e(dir + j.at("embeddings").get<std::string>(), std::ios::binary);
    f.embd.resize(f.texts.size() * static_cast<size_t>(f.n_embd));
    e.read(reinterpret_cast<char*>(f.embd.data()), static_cast<std::streamsize>(f.embd.size() * sizeof(float)));
    if (!e) throw std::runtime_error("short " + name + " embeddings");
    if (std::ifstream te(dir + name + ".tokens.embd.f32", std::ios::binary); te) {
      size_t rows = 0;
      for (const auto& ids : f.ids) rows += ids.size();
      f.token_embd.resize(rows * static_cast<size_t>(f.n_embd));
      te.read(reinterpret_cast<char*>(f.token_embd.data()),
              static_cast<std::streamsize>(f.token_embd.size() * sizeof(float)));
      if (!te) throw std::runtime_error("short " + name + " token embeddings");
    }
    return f;
  }
};

struct TierCase {
  std::string name;
  cpu::Isa isa;
};
void PrintTo(const TierCase& c, std::ostream* os) { *os << c.name << " on " << cpu::isa_name(c.isa); }

std::vector<TierCase> cases_of(std::initializer_list<const char*> names) {
  std::vector<TierCase> out;
  for (const char* name : names) {
    for (cpu::Isa isa : cpu::kAllIsas) out.push_back({name, isa});
  }
  return out;
}

class EncoderFixtureTest : public ::testing::TestWithParam<TierCase> {
 protected:
  void SetUp() override {
    const auto supported = cpu::supported_isas();
    if (std::find(supported.begin(), supported.end(), GetParam().isa) == supported.end()) {
      GTEST_SKIP() << "this CPU has no " << cpu::isa_name(GetParam().isa) << " tier";
    }
    rt_ = make_runtime(false);
    auto& cpu = dynamic_cast<cpu::CpuDevice&>(rt_->device("CPU0"));
    cpu.set_isa(GetParam().isa);
    cpu.set_threads(2);
    cpu.set_min_work_per_thread(0);
    fixture_ = EncoderFixture::load(GetParam().name);
    model_ = Model::load(*rt_, fixture_.gguf);
  }

  std::unique_ptr<Runtime> rt_;
  EncoderFixture fixture_;
  std::unique_ptr<Model> model_;
};

TEST_P(EncoderFixtureTest, PooledEmbeddingsMatchLlamaCpp) {
  EXPECT_EQ(model_->hparams().architecture, fixture_.architecture);
  EXPECT_FALSE(model_->hparams().causal);
  const Tokenizer tok = Tokenizer::from_gguf(model_->file());
  ASSERT_EQ(fixture_.pooling, 1);  // mean
  EXPECT_EQ(serving::model_pooling(*model_), serving::Pooling::kMean);
  serving::Embedder embedder(*model_, serving::Pooling::kMean, 512);
  // Learned positions end at the training context (bert's 512); RoPE's do not.
  EXPECT_EQ(serving::Embedder(*model_, serving::Pooling::kMean, 4096).max_tokens(),
            model_->weights().position_embd != nullptr ? 512 : 4096);
  const auto n = static_cast<size_t>(fixture_.n_embd);
  double worst = 0;
  for (size_t t = 0; t < fixture_.texts.size(); ++t) {
    SCOPED_TRACE(fixture_.texts[t]);
    const std::vector<TokenId> ids = tok.tokenize(fixture_.texts[t], /*add_special=*/true);
    EXPECT_EQ(ids, fixture_.ids[t]);
    const std::vector<float> got = embedder.embed(fixture_.ids[t], /*normalize=*/-1);
    ASSERT_EQ(got.size(), n);
    const std::span<const float> want(fixture_.embd.data() + t * n, n);
    double err = 0, ref = 0;
    for (size_t i = 0; i < n; ++i) {
      err += (double(got[i]) - want[i]) * (double(got[i]) - want[i]);
      ref += double(want[i]) * want[i];
    }
    const double e = err / ref;
    worst = std::max(worst, e);
    EXPECT_LT(e, kEmbdNmseLimit) << "text " << t;
  }
  std::printf("[ encoder  ] %s: worst embedding NMSE %.3g\n", GetParam().name.c_str(), worst);
}

// Pooling none: every token's state, each normalized alone, as llama.cpp's
// with its context's pooling set to none (the fixtures that have them).
TEST_P(EncoderFixtureTest, TokenEmbeddingsMatchLlamaCpp) {
  if (fixture_.token_embd.empty()) GTEST_SKIP() << GetParam().name << " has no .tokens.embd.f32";
  serving::Embedder embedder(*model_, serving::Pooling::kNone, 512, 2048);
  const auto all = embedder.embed_all(fixture_.ids, /*normalize=*/-1);
  const auto n = static_cast<size_t>(fixture_.n_embd);
  size_t row = 0;
  double worst = 0;
  for (size_t t = 0; t < all.size(); ++t) {
    ASSERT_EQ(all[t].size(), fixture_.ids[t].size() * n) << "text " << t;
    for (size_t i = 0; i < fixture_.ids[t].size(); ++i, ++row) {
      double err = 0, ref = 0;
      for (size_t j = 0; j < n; ++j) {
        const double want = fixture_.token_embd[row * n + j];
        err += (all[t][i * n + j] - want) * (all[t][i * n + j] - want);
        ref += want * want;
      }
      worst = std::max(worst, err / ref);
      EXPECT_LT(err / ref, kEmbdNmseLimit) << "text " << t << " token " << i;
    }
  }
  EXPECT_EQ(row * n, fixture_.token_embd.size());
  // Normalized, each row is a unit vector of its own.
  const std::vector<float> unit = embedder.embed(fixture_.ids[0], 2);
  for (size_t i = 0; i < fixture_.ids[0].size(); ++i) {
    double sum = 0;
    for (size_t j = 0; j < n; ++j) sum += double(unit[i * n + j]) * unit[i * n + j];
    EXPECT_NEAR(sum, 1.0, 1e-5) << "token " << i;
  }
  std::printf("[ encoder  ] %s: worst token embedding NMSE %.3g\n", GetParam().name.c_str(), worst);
}

// Several inputs a pass (each its own sequence, attending only to itself)
// give what each gives alone: the fixture's texts 17 times over (68 inputs:
// two passes of at most 64 sequences, and passes cut by tokens too).
TEST_P(EncoderFixtureTest, BatchedInputsEqualEachAlone) {
  serving::Embedder alone(*model_, serving::Pooling::kMean, 512);
  serving::Embedder packed(*model_, serving::Pooling::kMean, 512, 400);
  std::vector<std::vector<int32_t>> inputs;
  for (int r = 0; r < 17; ++r) inputs.insert(inputs.end(), fixture_.ids.begin(), fixture_.ids.end());
  std::vector<size_t> done;
  const auto all = packed.embed_all(inputs, -1, [&](size_t n) { done.push_back(n); });
  ASSERT_EQ(all.size(), inputs.size());
  EXPECT_GE(done.size(), 2u);
  EXPECT_EQ(done.back(), inputs.size());
  double worst = 0;
  for (size_t i = 0; i < fixture_.ids.size(); ++i) {
    const std::vector<float> one = alone.embed(fixture_.ids[i], -1);
    for (size_t k = i; k < inputs.size(); k += fixture_.ids.size()) {
      ASSERT_EQ(all[k].size(), one.size());
      worst = std::max(worst, nmse(all[k], one));
      EXPECT_LT(nmse(all[k], one), kPackedNmseLimit) << "input " << k;
    }
  }
  std::printf("[ encoder  ] %s: packed vs alone, worst NMSE %.3g\n", GetParam().name.c_str(), worst);
  // An input too long, or empty, is named before anything runs.
  std::vector<std::vector<int32_t>> bad = {fixture_.ids[0], std::vector<int32_t>(513, 1037)};
  try {
    packed.embed_all(bad);
    FAIL() << "embedded 513 tokens";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("input 1 has 513 tokens"), std::string::npos) << e.what();
  }
}

// Calls from several threads share runs of passes (the server's clients):
// each still gets what it gets alone.
TEST_P(EncoderFixtureTest, ConcurrentCallsShareRunsAndEqualEachAlone) {
  serving::Embedder alone(*model_, serving::Pooling::kMean, 512);
  std::vector<std::vector<float>> want;
  for (const auto& ids : fixture_.ids) want.push_back(alone.embed(ids, -1));
  serving::Embedder shared(*model_, serving::Pooling::kMean, 512);
  constexpr int kThreads = 6, kCalls = 8;
  std::vector<std::thread> threads;
  std::atomic<int> bad{0};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int c = 0; c < kCalls; ++c) {
        const size_t i = static_cast<size_t>(t + c) % fixture_.ids.size();
        const std::vector<float> got = shared.embed(fixture_.ids[i], -1);
        if (got.size() != want[i].size() || nmse(got, want[i]) > kPackedNmseLimit) ++bad;
      }
    });
  }
  for (std::thread& th : threads) th.join();
  EXPECT_EQ(bad.load(), 0);
  EXPECT_LE(shared.runs(), kThreads * kCalls);
  std::printf("[ encoder  ] %d concurrent calls in %lld runs of passes\n", kThreads * kCalls,
              static_cast<long long>(shared.runs()));
}

// An encoder gives no next-token logits: generation is refused, named.
TEST_P(EncoderFixtureTest, GenerationIsRefused) {
  Session s(*model_);
  try {
    s.decode(fixture_.ids[0], false);
    FAIL() << "decoded logits from an encoder";
  } catch (const Error& e) {
    EXPECT_EQ(e.category(), ErrorCategory::kUnsupported) << e.what();
    EXPECT_NE(std::string(e.what()).find("encoder"), std::string::npos) << e.what();
  }
}

// Rerankers, each (query, document) pair laid out as llama-server does and
// its scores near llama.cpp's. bert_rerank: bert-tiny with a one-label
// classifier head on [CLS]; scores are ~0.05, and llama.cpp rounds the
// head's inputs to f16 (2^-11 relative) for its F16 cls matmul, which
// through 32 weights of std 0.1 and the output row moves a score by up to
// ~3e-4 (limit 5e-4); measured 8.2e-5 on every tier. qwen3_reranker:
// Qwen3-Reranker's layout and prompt (tokenizer.chat_template.rerank, ~270
// tokens), the labels' ("yes", "no") rows on the last token and their
// softmax; the last hidden state agrees to ~1e-3 relative (a
// decoder's, through llama.cpp's f16 KV cache: NMSE ~1e-6), logits of ~2
// then differ by ~2e-3 and the softmax's slope (at most 1/4) makes that
// ~5e-4 (limit 1.5e-3); measured 1.3e-4 on every tier.
TEST_P(EncoderFixtureTest, RerankScoresMatchLlamaCpp) {
  const std::string dir = testing::fixtures_dir() + "/archs/";
  for (const auto& [name, limit] : {std::pair<std::string, double>{"bert_rerank", 5e-4}, {"qwen3_reranker", 1.5e-3}}) {
    SCOPED_TRACE(name);
    std::ifstream js(dir + name + ".json");
    const nlohmann::json j = nlohmann::json::parse(js);
    ASSERT_EQ(j.at("pooling").get<int>(), 4);
    const auto n_out = j.at("n_out").get<size_t>();
    const auto model = Model::load(*rt_, dir + name + ".gguf");
    EXPECT_EQ(serving::model_pooling(*model), serving::Pooling::kRank);
    EXPECT_EQ(model->hparams().n_cls_out, static_cast<int64_t>(n_out));
    const Tokenizer tok = Tokenizer::from_gguf(model->file());
    std::ifstream e(dir + j.at("embeddings").get<std::string>(), std::ios::binary);
    serving::Embedder ranker(*model, serving::Pooling::kRank, 512);
    double worst = 0;
    for (const auto& pair : j.at("pairs")) {
      const auto ids = pair.at("ids").get<std::vector<int32_t>>();
      EXPECT_EQ(serving::rerank_tokens(tok, pair.at("query").get<std::string>(),
                                       pair.at("document").get<std::string>(), serving::rerank_template(*model)),
                ids);
      std::vector<float> want(n_out);
      e.read(reinterpret_cast<char*>(want.data()), static_cast<std::streamsize>(n_out * sizeof(float)));
      const std::vector<float> got = ranker.embed(ids);
      ASSERT_EQ(got.size(), n_out);
      for (size_t k = 0; k < n_out; ++k) {
        worst = std::max(worst, std::abs(double(got[k]) - want[k]));
        EXPECT_NEAR(got[k], want[k], limit) << pair.at("document") << " label " << k;
      }
    }
    ASSERT_TRUE(e) << "short " << name << " scores";
    std::printf("[ encoder  ] %s: worst score difference %.3g\n", name.c_str(), worst);
  }
  // An embedding model has no head to rank with.
  try {
    serving::Embedder no(*model_, serving::Pooling::kRank, 512);
    FAIL() << "ranked with an embedding model";
  } catch (const Error& err) {
    EXPECT_EQ(err.category(), ErrorCategory::kUnsupported) << err.what();
  }
}

// A rerank template: each "{query}" and "{document}" filled in, the
// template's own special-token text parsed, the query's and document's kept
// as text; without one, the plain layout.
TEST(RerankTokens, TemplateFillsQueryAndDocumentAsPlainText) {
  const gguf::File file = gguf::File::open(testing::fixtures_dir() + "/tokenizer/ggml-vocab-llama-spm.gguf");
  const Tokenizer tok = Tokenizer::from_gguf(file);
  ASSERT_EQ(tok.eos(), 2);  // </s>, a control token
  const auto ids = serving::rerank_tokens(tok, "q</s>", "d {query}", "<s>Q: {query}</s>D: {document}</s>");
  const std::string text = tok.detokenize(ids, {.render_special = true});
  EXPECT_EQ(text, "<s> Q: q</s></s> D: d {query}</s>") << text;  // SPM: a space after a special token
  // The template's two </s> are the control token; the query's is text.
  EXPECT_EQ(std::count(ids.begin(), ids.end(), tok.eos()), 2);
  EXPECT_EQ(ids.front(), tok.bos());
  EXPECT_EQ(ids.back(), tok.eos());
  EXPECT_EQ(serving::rerank_tokens(tok, "q", "d", ""), serving::rerank_tokens(tok, "q", "d"));
}

// Truncation keeps a closing [SEP] in last place; an input that fits, or
// ends otherwise, is only cut.
TEST(EncoderTruncate, KeepsTheClosingSeparator) {
  auto rt = make_runtime(false);
  const auto model = Model::load(*rt, testing::fixtures_dir() + "/archs/bert.gguf");
  const Tokenizer tok = Tokenizer::from_gguf(model->file());
  std::vector<int32_t> ids = {101, 7592, 2088, 1037, 102};
  serving::truncate_tokens(ids, 3, tok);
  EXPECT_EQ(ids, (std::vector<int32_t>{101, 7592, 102}));
  std::vector<int32_t> open = {101, 7592, 2088, 1037};
  serving::truncate_tokens(open, 3, tok);
  EXPECT_EQ(open, (std::vector<int32_t>{101, 7592, 2088}));
  std::vector<int32_t> fits = {101, 102};
  serving::truncate_tokens(fits, 3, tok);
  EXPECT_EQ(fits, (std::vector<int32_t>{101, 102}));
}

std::string case_name(const ::testing::TestParamInfo<TierCase>& info) {
  return info.param.name + "_cpu_" + std::string(cpu::isa_name(info.param.isa));
}

INSTANTIATE_TEST_SUITE_P(Encoders, EncoderFixtureTest,
                         ::testing::ValuesIn(cases_of({"bert", "nomic_bert", "xlm_roberta", "jina_bert_v2",
                                                       "jina_bert_v2_gate", "modern_bert"})),
                         case_name);

// A decoder that embeds (qwen3_embedding: Qwen3-Embedding's layout, tied
// embeddings, `qwen3.pooling_type` 3): llama.cpp's llama_decode keeps the
// attention causal and pools the last token's final-normed state. Each
// text's ids and pooled embedding as llama.cpp's, alone and packed.
class DecoderEmbeddingTest : public EncoderFixtureTest {};

TEST_P(DecoderEmbeddingTest, LastTokenEmbeddingsMatchLlamaCpp) {
  EXPECT_EQ(model_->hparams().architecture, fixture_.architecture);
  EXPECT_TRUE(model_->hparams().causal);
  EXPECT_FALSE(model_->is_encoder());
  ASSERT_EQ(fixture_.pooling, 3);  // last
  EXPECT_EQ(serving::model_pooling(*model_), serving::Pooling::kLast);
  const Tokenizer tok = Tokenizer::from_gguf(model_->file());
  serving::Embedder embedder(*model_, serving::Pooling::kLast, 512);
  const auto n = static_cast<size_t>(fixture_.n_embd);
  double worst = 0;
  for (size_t t = 0; t < fixture_.texts.size(); ++t) {
    SCOPED_TRACE(fixture_.texts[t]);
    EXPECT_EQ(tok.tokenize(fixture_.texts[t], /*add_special=*/true), fixture_.ids[t]);
    const std::vector<float> got = embedder.embed(fixture_.ids[t], /*normalize=*/-1);
    ASSERT_EQ(got.size(), n);
    double err = 0, ref = 0;
    for (size_t i = 0; i < n; ++i) {
      const double want = fixture_.embd[t * n + i];
      err += (got[i] - want) * (got[i] - want);
      ref += want * want;
    }
    worst = std::max(worst, err / ref);
    EXPECT_LT(err / ref, kEmbdNmseLimit) << "text " << t;
  }
  // Packed several to a pass, each input still attends only to itself
  // (measured NMSE 1.5e-11 against alone; ref: 0).
  serving::Embedder packed(*model_, serving::Pooling::kLast, 512, 100);
  const auto all = packed.embed_all(fixture_.ids, -1);
  ASSERT_EQ(all.size(), fixture_.ids.size());
  double worst_packed = 0;
  for (size_t t = 0; t < all.size(); ++t) {
    const std::vector<float> one = embedder.embed(fixture_.ids[t], -1);
    worst_packed = std::max(worst_packed, nmse(all[t], one));
    EXPECT_LT(nmse(all[t], one), kPackedNmseLimit) << "input " << t;
  }
  std::printf("[ encoder  ] %s: worst embedding NMSE %.3g, packed vs alone %.3g\n", GetParam().name.c_str(),
              worst, worst_packed);
}

INSTANTIATE_TEST_SUITE_P(Decoders, DecoderEmbeddingTest, ::testing::ValuesIn(cases_of({"qwen3_embedding"})),
                         case_name);

}  // namespace
}  // namespace tessera
