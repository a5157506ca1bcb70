// Sampling: each filter does what llama.cpp's does, and a seed fixes the draws.
#include "tessera/engine/sampler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <deque>
#include <limits>
#include <map>
#include <random>
#include <unordered_map>

#include "tessera/core/error.h"

namespace tessera {
namespace {

std::vector<float> random_logits(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 2.0f);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

int32_t argmax(const std::vector<float>& v) {
  return static_cast<int32_t>(std::max_element(v.begin(), v.end()) - v.begin());
}

TEST(SamplerTest, ZeroTemperatureIsGreedy) {
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE(::testing::Message() << "logits seed " << seed);
  const auto logits = random_logits(1000, seed);
  Sampler s({.temp = 0.0f});
  EXPECT_EQ(s.sample(logits), argmax(logits));
  Sampler k1({.temp = 1.0f, .top_k = 1});
  EXPECT_EQ(k1.sample(logits), argmax(logits));  // top-k 1 leaves only the best
}

TEST(SamplerTest, SameSeedSameDrawsOtherSeedOtherDraws) {
  const auto logits = random_logits(50, 1);
  auto draws = [&](uint32_t seed) {
    Sampler s({.temp = 1.5f, .top_k = 0, .top_p = 1.0f, .min_p = 0.0f, .seed = seed});
    std::vector<int32_t> out;
    for (int i = 0; i < 64; ++i) out.push_back(s.sample(logits));
    return out;
  };
  EXPECT_EQ(draws(42), draws(42));
  EXPECT_NE(draws(42), draws(43));
}

TEST(SamplerTest, TopKTopPMinPKeepOnlyTheirTokens) {
  // Logits with known probabilities: softmax of log(p) is p.
  const std::vector<float> logits = {std::log(0.5f), std::log(0.3f), std::log(0.15f),
                                     std::log(0.05f)};
  auto seen = [&](SamplerParams p) {
    p.seed = 7;
    Sampler s(p);
    std::map<int32_t, int> count;
    for (int i = 0; i < 4000; ++i) count[s.sample(logits)] += 1;
    return count;
  };
  auto only = [](const std::map<int32_t, int>& c, std::vector<int32_t> ids) {
    for (const auto& [id, n] : c) {
      if (std::find(ids.begin(), ids.end(), id) == ids.end()) return false;
    }
    return c.size() == ids.size();
  };
  const SamplerParams off{.temp = 1.0f, .top_k = 0, .top_p = 1.0f, .min_p = 0.0f};
  EXPECT_TRUE(only(seen(off), {0, 1, 2, 3}));
  SamplerParams k = off;
  k.top_k = 2;
  EXPECT_TRUE(only(seen(k), {0, 1}));
  SamplerParams p = off;
  p.top_p = 0.9f;  // 0.5 + 0.3 = 0.8 < 0.9 <= 0.95: three tokens
  EXPECT_TRUE(only(seen(p), {0, 1, 2}));
  SamplerParams m = off;
  m.min_p = 0.2f;  // keeps p >= 0.1: tokens 0, 1, 2
  EXPECT_TRUE(only(seen(m), {0, 1, 2}));
  // With everything off, frequencies follow the probabilities.
  const auto c = seen(off);
  EXPECT_NEAR(c.at(0) / 4000.0, 0.5, 0.03);
  EXPECT_NEAR(c.at(3) / 4000.0, 0.05, 0.015);
}

TEST(SamplerTest, PenaltiesActOnRecentTokensOnly) {
  std::vector<float> logits = {2.0f, 1.9f, -1.0f};
  Sampler s({.temp = 0.0f, .repeat_penalty = 1.5f, .repeat_last_n = 2});
  EXPECT_EQ(s.sample(logits), 0);
  s.accept(0);  // 2.0 / 1.5 < 1.9: token 1 wins
  EXPECT_EQ(s.sample(logits), 1);
  s.accept(1);
  s.accept(2);  // window of 2 now holds {1, 2}: token 0 is free again
  EXPECT_EQ(s.sample(logits), 0);

  Sampler f({.temp = 0.0f, .repeat_last_n = 8, .frequency_penalty = 0.06f});
  f.accept(0);
  f.accept(0);  // 2.0 - 2 * 0.06 = 1.88 < 1.9
  EXPECT_EQ(f.sample(logits), 1);
  Sampler pr({.temp = 0.0f, .repeat_last_n = 8, .presence_penalty = 0.2f});
  pr.accept(0);
  EXPECT_EQ(pr.sample(logits), 1);
}

TEST(SamplerTest, BannedTokensAreNeverDrawn) {
  const auto logits = random_logits(100, 3);
  Sampler s({.temp = 0.0f, .banned = {argmax(logits)}});
  EXPECT_NE(s.sample(logits), argmax(logits));
}

// The fixed chain the sampler was before it became a chain of stages, kept
// as it was (stop 22's src/engine/sampler.cpp): the stages must pick the
// same token for the same logits, parameters, history and seed.
class FixedChain {
 public:
  FixedChain(const SamplerParams& p, int64_t n_ctx) : p_(p), rng_(p.seed) {
    cap_ = p.repeat_last_n < 0 ? static_cast<size_t>(n_ctx) : static_cast<size_t>(p.repeat_last_n);
  }
  void accept(int32_t t) {
    if (cap_ == 0) return;
    history_.push_back(t);
    if (history_.size() > cap_) history_.pop_front();
  }
  int32_t sample(std::span<const float> logits) {
    constexpr float kNegInf = -std::numeric_limits<float>::infinity();
    struct C {
      int32_t id;
      float logit;
    };
    std::vector<C> c(logits.size());
    for (size_t i = 0; i < logits.size(); ++i) c[i] = {static_cast<int32_t>(i), logits[i]};
    for (int32_t id : p_.banned) c[static_cast<size_t>(id)].logit = kNegInf;
    if ((p_.repeat_penalty != 1 || p_.presence_penalty != 0 || p_.frequency_penalty != 0) &&
        !history_.empty()) {
      std::unordered_map<int32_t, int> count;
      for (int32_t t : history_) count[t] += 1;
      for (C& x : c) {
        auto it = count.find(x.id);
        if (it == count.end()) continue;
        x.logit = x.logit <= 0 ? x.logit * p_.repeat_penalty : x.logit / p_.repeat_penalty;
        x.logit -= static_cast<float>(it->second) * p_.frequency_penalty + p_.presence_penalty;
      }
    }
    auto by = [](const C& a, const C& b) { return a.logit > b.logit || (a.logit == b.logit && a.id < b.id); };
    for (C& x : c) {
      if (std::isnan(x.logit)) x.logit = kNegInf;
    }
    if (p_.temp <= 0) return std::min_element(c.begin(), c.end(), by)->id;
    size_t k = c.size();
    if (p_.top_k > 0) k = std::min(k, static_cast<size_t>(p_.top_k));
    std::partial_sort(c.begin(), c.begin() + static_cast<ptrdiff_t>(k), c.end(), by);
    c.resize(k);
    std::vector<float> lg(c.size()), probs;
    for (size_t i = 0; i < c.size(); ++i) lg[i] = c[i].logit;
    auto softmax = [&] {
      probs.resize(lg.size());
      double sum = 0;
      for (size_t i = 0; i < lg.size(); ++i) sum += (probs[i] = std::exp(lg[i] - lg[0]));
      for (float& q : probs) q = static_cast<float>(q / sum);
    };
    if (p_.top_p < 1) {
      softmax();
      double cum = 0;
      size_t keep = c.size();
      for (size_t i = 0; i < c.size(); ++i) {
        cum += probs[i];
        if (cum >= p_.top_p) {
          keep = i + 1;
          break;
        }
      }
      c.resize(keep);
      lg.resize(keep);
    }
    if (p_.min_p > 0) {
      const float floor = lg[0] + std::log(p_.min_p);
      size_t keep = 1;
      while (keep < lg.size() && lg[keep] >= floor) ++keep;
      c.resize(keep);
      lg.resize(keep);
    }
    if (!std::isfinite(lg[0])) return c[0].id;
    for (float& x : lg) x /= p_.temp;
    softmax();
    std::discrete_distribution<size_t> draw(probs.begin(), probs.end());
    return c[draw(rng_)].id;
  }

 private:
  SamplerParams p_;
  std::mt19937 rng_;
  std::deque<int32_t> history_;
  size_t cap_;
};

TEST(SamplerTest, TheChainPicksWhatTheFixedChainPicked) {
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  for (int trial = 0; trial < 200; ++trial) {
    SamplerParams p;
    p.temp = trial % 5 == 0 ? 0.0f : 0.1f + 2.0f * u(rng);
    p.top_k = static_cast<int32_t>(u(rng) * 80) - 10;  // some <= 0: off
    p.top_p = u(rng) < 0.3f ? 1.0f : 0.5f + 0.5f * u(rng);
    p.min_p = u(rng) < 0.3f ? 0.0f : 0.2f * u(rng);
    p.repeat_penalty = u(rng) < 0.5f ? 1.0f : 0.8f + u(rng);
    p.repeat_last_n = static_cast<int32_t>(u(rng) * 20) - 1;
    p.presence_penalty = u(rng) < 0.5f ? 0.0f : u(rng) - 0.5f;
    p.frequency_penalty = u(rng) < 0.5f ? 0.0f : u(rng) - 0.5f;
    p.seed = static_cast<uint32_t>(rng());
    const size_t n_vocab = 50 + rng() % 400;
    if (u(rng) < 0.3f) p.banned = {static_cast<int32_t>(rng() % n_vocab), static_cast<int32_t>(rng() % n_vocab)};
    Sampler chain(p, 64);
    FixedChain fixed(p, 64);
    for (int step = 0; step < 24; ++step) {
      std::vector<float> logits = random_logits(n_vocab, static_cast<uint32_t>(rng()));
      if (step % 7 == 3) logits[rng() % n_vocab] = std::numeric_limits<float>::quiet_NaN();
      const int32_t want = fixed.sample(logits);
      ASSERT_EQ(chain.sample(logits), want) << "trial " << trial << " step " << step;
      chain.accept(want);
      fixed.accept(want);
    }
  }
}

TEST(SamplerTest, StagesInLlamaCppsOrderAndGreedyEndsEarly) {
  using Names = std::vector<std::string_view>;
  EXPECT_EQ(Sampler({.temp = 0.0f}).stage_names(), (Names{"penalties", "nan-guard", "greedy"}));
  EXPECT_EQ(Sampler({.temp = 0.7f, .banned = {1}, .logit_bias = {{2, 1.0f}}}).stage_names(),
            (Names{"logit-bias", "ban", "penalties", "nan-guard", "top-k", "top-p", "min-p",
                   "temperature", "draw"}));
}

// A mask stage (what grammars plug in as): only tokens it allows are drawn.
class EvenOnly final : public SamplerStage {
 public:
  std::string_view name() const override { return "even-only"; }
  void apply(Candidates& c) override {
    for (TokenData& t : c.data) {
      if (t.id % 2 != 0) t.logit = -std::numeric_limits<float>::infinity();
    }
  }
};

TEST(SamplerTest, MaskStagesAndLogitBiasShapeTheDraws) {
  const auto logits = random_logits(200, 5);
  std::vector<std::unique_ptr<SamplerStage>> masks;
  masks.push_back(std::make_unique<EvenOnly>());
  Sampler s({.temp = 1.5f, .top_k = 0, .top_p = 1.0f, .min_p = 0.0f, .seed = 3}, 64, std::move(masks));
  for (int i = 0; i < 500; ++i) EXPECT_EQ(s.sample(logits) % 2, 0);
  // A large bias makes a token the greedy pick; a large negative one rules it out.
  const int32_t best = argmax(logits);
  const int32_t other = (best + 17) % 200;
  EXPECT_EQ(Sampler({.temp = 0.0f, .logit_bias = {{other, 100.0f}}}).sample(logits), other);
  EXPECT_NE(Sampler({.temp = 0.0f, .logit_bias = {{best, -100.0f}}}).sample(logits), best);
  // A hand-built chain: top-k 1 then draw is greedy.
  Sampler hand;
  hand.add(sampling::top_k(1)).add(sampling::draw(9));
  EXPECT_EQ(hand.sample(logits), best);
}

TEST(SamplerTest, LogprobsAreTheRawLogSoftmax) {
  const auto logits = random_logits(300, 8);
  Sampler s({.temp = 0.9f, .repeat_penalty = 1.3f, .seed = 4});
  s.accept(argmax(logits));  // penalties change the draw, not the reported log-probabilities
  SampleLogprobs lp;
  const int32_t t = s.sample(logits, &lp, 300);
  EXPECT_EQ(lp.chosen.id, t);
  ASSERT_EQ(lp.top.size(), 300u);
  double total = 0;
  for (const TokenLogprob& x : lp.top) total += std::exp(double(x.logprob));
  EXPECT_NEAR(total, 1.0, 1e-5);  // 300 float terms of at most 1 ulp each
  EXPECT_EQ(lp.top[0].id, argmax(logits));
  for (size_t i = 1; i < lp.top.size(); ++i) EXPECT_GE(lp.top[i - 1].logprob, lp.top[i].logprob);
  const float d = logits[static_cast<size_t>(t)] - logits[static_cast<size_t>(lp.top[0].id)];
  EXPECT_NEAR(lp.chosen.logprob - lp.top[0].logprob, d, 1e-5);
}

TEST(SamplerTest, BadParametersAreRefused) {
  EXPECT_THROW(Sampler({.top_p = 1.5f}), Error);
  EXPECT_THROW(Sampler({.min_p = -0.1f}), Error);
  EXPECT_THROW(Sampler({.repeat_last_n = -2}), Error);
}

}  // namespace
}  // namespace tessera
