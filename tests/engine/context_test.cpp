// The engine's Context: many sequences in one batch over the shared KV cache
// give each sequence the logits it gets alone; the cache's sequence
// operations (seq_cp, seq_rm, seq_add) equal the runs they stand for; a full
// cache is an error that names the sequence; quantized caches stay close to
// f16.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "backends/cpu/cpu_backend.h"
#include "models/model_test_util.h"
#include "tessera/backends/builtin.h"
#include "tessera/core/error.h"
#include "tessera/engine/engine.h"

namespace tessera {
namespace {

using Logits = std::vector<float>;
using testing::llama_fixture;
using testing::nmse;
using testing::stories;

int32_t argmax(std::span<const float> v) {
  return static_cast<int32_t>(std::max_element(v.begin(), v.end()) - v.begin());
}

// Prompt of sequence s: BOS and 0..7 more tokens, different per sequence.
std::vector<int32_t> prompt_of(int s) {
  std::vector<int32_t> p = {1};
  for (int i = 0; i < (s * 3) % 8; ++i) p.push_back(260 + (s * 37 + i * 11) % 240);
  return p;
}

// Greedy run of one sequence alone: the logits after the prompt and after
// each of `steps` greedy tokens.
std::vector<Logits> alone(const Model& model, const std::vector<int32_t>& prompt, int steps,
                          DType cache = DType::kF16) {
  Session s(model, {.n_ctx = 256, .type_k = cache, .type_v = cache});
  std::vector<Logits> out;
  auto l = s.decode(prompt);
  out.emplace_back(l.begin(), l.end());
  for (int i = 0; i < steps; ++i) {
    const int32_t t = argmax(out.back());
    l = s.decode(std::span(&t, 1));
    out.emplace_back(l.begin(), l.end());
  }
  return out;
}

// Within one tier the only difference between a sequence decoded alone and
// in a batch is the order of cells the attention sums over (and the rows it
// skips): f32 rounding, far below ggml's whole-model limit of 2e-3.
constexpr double kBatchedNmse = 1e-6;

class ContextTest : public ::testing::Test {
 protected:
  std::unique_ptr<Runtime> rt_ = make_runtime(false);
  std::unique_ptr<Model> model_ = Model::load(*rt_, stories());
  cpu::CpuDevice& cpu_ = dynamic_cast<cpu::CpuDevice&>(rt_->device("CPU0"));
};

TEST_F(ContextTest, SequencesDecodedTogetherEqualEachAloneOnEveryTier) {
  constexpr int kSteps = 6;
  for (cpu::Isa isa : cpu::supported_isas()) {
    cpu_.set_isa(isa);
    cpu_.set_threads(2);
    cpu_.set_min_work_per_thread(0);
    for (int n_seq : {1, 2, 4, 8}) {
      SCOPED_TRACE(fmt::format("tier {}, {} sequences", cpu::isa_name(isa), n_seq));
      std::vector<std::vector<Logits>> expect;
      for (int s = 0; s < n_seq; ++s) expect.push_back(alone(*model_, prompt_of(s), kSteps));

      Context ctx(*model_, {.n_ctx = 256});
      Batch batch;
      for (int s = 0; s < n_seq; ++s) batch.add_sequence(prompt_of(s), 0, s);
      ctx.decode(batch);
      // Where each sequence's logits are in the last batch, and its next position.
      std::vector<size_t> at(static_cast<size_t>(n_seq));
      std::vector<int32_t> pos(static_cast<size_t>(n_seq));
      for (size_t i = 0, s = 0; i < batch.size(); ++i) {
        if (batch.want_logits[i] != 0) {
          at[s] = i;
          pos[s] = batch.pos[i] + 1;
          ++s;
        }
      }
      for (int step = 0; step <= kSteps; ++step) {
        Batch next;
        for (int s = 0; s < n_seq; ++s) {
          const auto got = ctx.logits(at[static_cast<size_t>(s)]);
          const Logits& want = expect[static_cast<size_t>(s)][static_cast<size_t>(step)];
          EXPECT_LT(nmse(got, want), kBatchedNmse) << "sequence " << s << ", step " << step;
          ASSERT_EQ(argmax(got), argmax(want)) << "sequence " << s << ", step " << step;
          at[static_cast<size_t>(s)] = next.size();
          next.add(argmax(got), pos[static_cast<size_t>(s)]++, {s}, true);
        }
        if (step < kSteps) ctx.decode(next);
      }
    }
  }
}

TEST_F(ContextTest, SharedPrefixThenDivergentContinuationsEqualSeparateRuns) {
  const std::vector<int32_t> prefix = {1, 403, 407, 261, 378};
  const std::vector<int32_t> x = {432, 383, 286}, y = {300, 285};
  auto join = [](std::vector<int32_t> a, const std::vector<int32_t>& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
  };
  const auto want_x = alone(*model_, join(prefix, x), 3);
  const auto want_y = alone(*model_, join(prefix, y), 3);

  // Twice: the prefix copied with seq_cp, and the prefix's tokens given both
  // sequences in the batch.
  for (bool tokens_in_both : {false, true}) {
    SCOPED_TRACE(tokens_in_both ? "tokens of both sequences" : "seq_cp");
    Context ctx(*model_, {.n_ctx = 64});
    Batch batch;
    for (size_t i = 0; i < prefix.size(); ++i) {
      if (tokens_in_both) {
        batch.add(prefix[i], static_cast<int32_t>(i), {0, 1}, false);
      } else {
        batch.add(prefix[i], static_cast<int32_t>(i), {0}, false);
      }
    }
    ctx.decode(batch);
    if (!tokens_in_both) ctx.cache().seq_cp(0, 1, 0, -1);
    EXPECT_EQ(ctx.cache().used(), static_cast<int64_t>(prefix.size()));  // shared, not copied

    batch.clear();
    const auto p0 = static_cast<int32_t>(prefix.size());
    for (size_t i = 0; i < x.size(); ++i) batch.add(x[i], p0 + int32_t(i), {0}, i + 1 == x.size());
    for (size_t i = 0; i < y.size(); ++i) batch.add(y[i], p0 + int32_t(i), {1}, i + 1 == y.size());
    ctx.decode(batch);
    EXPECT_LT(nmse(ctx.logits(x.size() - 1), want_x[0]), kBatchedNmse);
    EXPECT_LT(nmse(ctx.logits(x.size() + y.size() - 1), want_y[0]), kBatchedNmse);
    EXPECT_EQ(ctx.cache().seq_pos_max(0), p0 + int32_t(x.size()) - 1);
    EXPECT_EQ(ctx.cache().seq_pos_max(1), p0 + int32_t(y.size()) - 1);
  }
}

TEST_F(ContextTest, RemovingATailThenDecodingEqualsNeverHavingDecodedIt) {
  const std::vector<int32_t> kept = {1, 385, 328, 432}, dropped = {261, 376, 298, 315, 421};
  const std::vector<int32_t> next = {300, 285, 40};
  std::vector<int32_t> straight = kept;
  straight.insert(straight.end(), next.begin(), next.end());
  const auto want = alone(*model_, straight, 0);

  Context ctx(*model_, {.n_ctx = 64});
  Batch batch;
  batch.add_sequence(kept, 0, 0);
  batch.add_sequence(dropped, static_cast<int32_t>(kept.size()), 0);
  ctx.decode(batch);
  ctx.cache().seq_rm(0, static_cast<int32_t>(kept.size()), -1);
  EXPECT_EQ(ctx.cache().used(), static_cast<int64_t>(kept.size()));
  batch.clear();
  batch.add_sequence(next, static_cast<int32_t>(kept.size()), 0);
  ctx.decode(batch);
  EXPECT_LT(nmse(ctx.logits(next.size() - 1), want[0]), kBatchedNmse);

  // seq_keep drops the others; seq_rm of -1 empties the cache.
  ctx.cache().seq_cp(0, 5, 0, 2);
  ctx.cache().seq_keep(5);
  EXPECT_EQ(ctx.cache().used(), 2);
  EXPECT_EQ(ctx.cache().seq_pos_max(0), -1);
  ctx.cache().seq_rm(-1, 0, -1);
  EXPECT_EQ(ctx.cache().used(), 0);
}

// Tokens decoded at positions p0.. then moved by seq_add(delta) give the next
// token the logits of a run that decoded them at p0 + delta from the start:
// the cached keys are rotated by delta before the next pass.
double shifted_against_fresh(const Model& model, DType type, int32_t p0, int32_t delta) {
  const std::vector<int32_t> tokens = {1, 403, 407, 261, 378, 432, 383, 286, 261, 376};
  const int32_t next = 298;
  const auto at_next = p0 + delta + static_cast<int32_t>(tokens.size());
  const ContextOptions options{.n_ctx = 64, .type_k = type, .type_v = type};
  Context fresh(model, options);
  Batch batch;
  batch.add_sequence(tokens, p0 + delta, 0, false);
  batch.add(next, at_next, {0}, true);
  fresh.decode(batch);
  const auto want = fresh.logits(batch.size() - 1);

  Context ctx(model, options);
  batch.clear();
  batch.add_sequence(tokens, p0, 0);
  ctx.decode(batch);
  // A one-token pass, undone: the pass after the shift reuses its plan,
  // made before the shift's own graph (which may grow the buffers).
  batch.clear();
  batch.add(next, p0 + static_cast<int32_t>(tokens.size()), {0}, true);
  ctx.decode(batch);
  ctx.cache().seq_rm(0, p0 + static_cast<int32_t>(tokens.size()), -1);
  ctx.cache().seq_add(0, 0, -1, delta);
  EXPECT_TRUE(ctx.cache().has_shift());
  EXPECT_EQ(ctx.cache().seq_pos_max(0), at_next - 1);
  batch.clear();
  batch.add(next, at_next, {0}, true);
  ctx.decode(batch);
  EXPECT_FALSE(ctx.cache().has_shift());
  return nmse(ctx.logits(0), want);
}

TEST_F(ContextTest, ShiftedPositionsEqualARunAtThosePositions) {
  for (auto [p0, delta] : {std::pair{0, 5}, std::pair{5, -5}, std::pair{3, 100}}) {
    SCOPED_TRACE(fmt::format("positions {}.. moved by {}", p0, delta));
    // f32 keys: the rotation by delta composes with the first one up to f32
    // rounding of the angles (measured ~1e-13).
    EXPECT_LT(shifted_against_fresh(*model_, DType::kF32, p0, delta), 1e-10);
    // f16 keys are rounded once more after the second rotation (measured ~4e-7).
    EXPECT_LT(shifted_against_fresh(*model_, DType::kF16, p0, delta), 1e-5);
  }
  // Cells moved below position 0 are dropped.
  Context ctx(*model_, {.n_ctx = 16});
  Batch batch;
  batch.add_sequence(std::vector<int32_t>{1, 2, 3, 4}, 0, 0);
  ctx.decode(batch);
  ctx.cache().seq_add(0, 0, -1, -2);
  EXPECT_EQ(ctx.cache().used(), 2);
  EXPECT_EQ(ctx.cache().seq_pos_max(0), 1);
}

TEST_F(ContextTest, AFullCacheNamesTheSequenceAndLeavesTheCacheAsItWas) {
  Context ctx(*model_, {.n_ctx = 8, .n_batch = 4});
  Batch batch;
  batch.add_sequence(std::vector<int32_t>{1, 2, 3}, 0, 0);
  ctx.decode(batch);
  batch.clear();
  // 6 tokens (two passes of 4 + 2) where 5 cells are free: refused before
  // any pass runs, every cell claimed for it given back.
  batch.add_sequence(std::vector<int32_t>{4, 5, 6, 7, 8, 9}, 0, 3);
  try {
    ctx.decode(batch);
    ADD_FAILURE() << "decoded past the cache";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("sequence 3 asked for 6 cells, 5 of 8 are free"),
              std::string::npos)
        << e.what();
  }
  EXPECT_EQ(ctx.cache().used(), 3);
  EXPECT_EQ(ctx.cache().seq_pos_max(3), -1);
  // Bad input is refused before anything runs.
  batch.clear();
  batch.add(512, 3, {0}, true);
  EXPECT_THROW(ctx.decode(batch), Error);
  batch.clear();
  batch.token = {1};
  batch.pos = {3};
  batch.seqs = {0};
  batch.want_logits = {1};
  EXPECT_THROW(ctx.decode(batch), Error);  // no sequence
  EXPECT_THROW(batch.add(1, 0, {kMaxSequences}, true), Error);
  EXPECT_EQ(ctx.cache().used(), 3);
}

// Logits of every position of `tokens` with caches of `type`.
std::vector<float> all_positions(const Model& model, const std::vector<int32_t>& tokens,
                                 DType type) {
  Session s(model, {.n_ctx = 64, .type_k = type, .type_v = type});
  const auto l = s.decode(tokens, /*all_logits=*/true);
  return {l.begin(), l.end()};
}

TEST(ContextCacheTypes, QuantizedCachesStayCloseToF16) {
  auto rt = make_runtime(false);
  auto model = Model::load(*rt, llama_fixture());
  const std::vector<int32_t> tokens = {1, 403, 407, 261, 378, 432, 383, 286, 261, 376, 400, 428};
  const auto nv = static_cast<size_t>(model->hparams().n_vocab);
  const auto f16 = all_positions(*model, tokens, DType::kF16);
  auto worst = [&](DType type) {
    const auto got = all_positions(*model, tokens, type);
    double w = 0;
    for (size_t i = 0; i < tokens.size(); ++i) {
      w = std::max(w, nmse(std::span(got).subspan(i * nv, nv), std::span(f16).subspan(i * nv, nv)));
    }
    return w;
  };
  // This random-weight model amplifies K/V error: a bf16 cache (8-bit
  // mantissa) already moves its logits by NMSE ~1e-4. q8_0 (int8 per block of
  // 32, f16 scale) lands next to bf16 (measured <= 9e-4); q4_0 has 4 bits
  // fewer, ~256x the squared error (measured <= 0.24). Limits: 2x the
  // measured worst.
  const double bf16 = worst(DType::kBF16), q8 = worst(DType::kQ8_0), q4 = worst(DType::kQ4_0);
  std::cout << "worst NMSE against f16: bf16 " << bf16 << ", q8_0 " << q8 << ", q4_0 " << q4 << "\n";
  EXPECT_LT(q8, 2e-3);
  EXPECT_LT(q4, 0.5);
  EXPECT_GT(q8, 0.0) << "the cache type was ignored";
  EXPECT_LT(q8, q4);
  // A block size that does not divide the head size is refused by name.
  auto stories_rt = make_runtime(false);
  auto small = Model::load(*stories_rt, stories());
  try {
    Context ctx(*small, {.type_k = DType::kQ8_0});
    ADD_FAILURE() << "q8_0 cache with head size 8";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("head size (8)"), std::string::npos) << e.what();
  }
}

TEST(ContextCacheTypes, ShiftingAQuantizedCacheRoundTripsThroughF32) {
  auto rt = make_runtime(false);
  auto model = Model::load(*rt, llama_fixture());
  // Keys dequantized, rotated, quantized again: one more q8_0 rounding
  // (measured ~5e-4 on this model, see above).
  EXPECT_LT(shifted_against_fresh(*model, DType::kQ8_0, 0, 5), 2e-3);
  // f16 on the same model, for scale (measured ~6e-7).
  EXPECT_LT(shifted_against_fresh(*model, DType::kF16, 0, 5), 1e-5);
}

TEST_F(ContextTest, APlanMadeBeforeTheBuffersGrewComputesLikeANewOne) {
  // Shape A (one token), then a 100-token pass that grows the compute
  // buffers, then shape A again: its tensors (inputs included) must move to
  // the new buffers before its inputs are written.
  std::vector<int32_t> long_prompt;
  for (int i = 0; i < 100; ++i) long_prompt.push_back(260 + (i * 7) % 240);
  const int32_t t = 432;
  Session s(*model_, {.n_ctx = 256});
  s.decode(std::vector<int32_t>{1, 403, 407});
  s.decode(std::span(&t, 1));
  s.reset();
  s.decode(long_prompt);
  const auto got = s.decode(std::span(&t, 1));
  const uint64_t plans = s.context().plans_built();

  Session fresh(*model_, {.n_ctx = 256});
  fresh.decode(long_prompt);
  const auto want = fresh.decode(std::span(&t, 1));
  EXPECT_LT(nmse(got, want), kBatchedNmse);
  EXPECT_EQ(plans, 3u);  // (3 tokens), (1 token), (100 tokens): the last pass reused (1 token)
}

TEST_F(ContextTest, APlanIsBuiltOncePerShape) {
  Session s(*model_, {.n_ctx = 512});
  s.decode(std::vector<int32_t>{1, 403, 407, 261, 378});
  int32_t t = 432;
  s.decode(std::span(&t, 1));
  const uint64_t plans = s.context().plans_built();
  for (int i = 0; i < 200; ++i) s.decode(std::span(&t, 1));  // 206 cells: one 256-row bucket
  EXPECT_EQ(s.context().plans_built(), plans);
  for (int i = 0; i < 100; ++i) s.decode(std::span(&t, 1));  // into the 512-row bucket
  EXPECT_EQ(s.context().plans_built(), plans + 1);
}

}  // namespace
}  // namespace tessera

namespace tessera::testing {
namespace {

// With embeddings on, a row is the normed final hidden state: the logits of
// the same row are the output matrix times it (within f32 rounding of the
// n_embd-long dot products).
TEST_F(ContextTest, EmbeddingsAreTheHiddenStatesTheLogitsProject) {
  const std::vector<int32_t> prompt{1, 403, 407, 261, 378, 432};
  Batch b;
  b.add_sequence(prompt, 0, 0, /*all_logits=*/true);
  Context logits(*model_, {.n_ctx = 64});
  Context hidden(*model_, {.n_ctx = 64, .embeddings = true});
  logits.decode(b);
  hidden.decode(b);
  const Hparams& hp = model_->hparams();
  ASSERT_EQ(hidden.output_width(), hp.n_embd);
  const Tensor& w = *model_->output();  // [n_embd, n_vocab]
  std::vector<float> wrow(static_cast<size_t>(hp.n_embd));
  std::vector<uint8_t> bytes(w.n_bytes());
  w.buffer->get_tensor(w, bytes.data(), 0, bytes.size());
  const size_t row_bytes = w.nb[1];
  for (size_t i = 0; i < prompt.size(); ++i) {
    const std::span<const float> h = hidden.logits(i);
    const std::span<const float> l = logits.logits(i);
    for (int64_t v = 0; v < hp.n_vocab; v += 37) {
      dequantize_row(w.type, bytes.data() + static_cast<size_t>(v) * row_bytes, wrow.data(), hp.n_embd);
      double dot = 0, mag = 0;
      for (int64_t j = 0; j < hp.n_embd; ++j) {
        dot += double(wrow[size_t(j)]) * h[size_t(j)];
        mag += std::fabs(double(wrow[size_t(j)]) * h[size_t(j)]);
      }
      ASSERT_NEAR(l[size_t(v)], dot, 1e-5 * mag + 1e-6) << "row " << i << " token " << v;
    }
  }
}

}  // namespace
}  // namespace tessera::testing
