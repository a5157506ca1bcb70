// Sampling: each filter does what llama.cpp's does, and a seed fixes the draws.
#include "tessera/sampler.h"

#include <gtest/gtest.h>

#include <map>
#include <random>

#include "tessera/error.h"

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

TEST(SamplerTest, BadParametersAreRefused) {
  EXPECT_THROW(Sampler({.top_p = 1.5f}), Error);
  EXPECT_THROW(Sampler({.min_p = -0.1f}), Error);
  EXPECT_THROW(Sampler({.repeat_last_n = -2}), Error);
}

}  // namespace
}  // namespace tessera
