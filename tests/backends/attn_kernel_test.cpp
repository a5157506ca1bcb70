// The SIMD tiers' attn_f16 (grouped FLASH_ATTN_EXT over f16 K/V) against a
// double-precision softmax(scale q.k + mask) v: random groups with masked
// keys and tails in d / dv, rows with every key masked (zeros), and the
// polynomial exp through two-key rows whose weights are exp(x) for x in [-87, 0].
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "kernel_test_util.h"
#include "tessera/half.h"

namespace tessera::cpu {
namespace {

using testing::fresh_seed;

class AttnKernelTest : public ::testing::TestWithParam<Isa> {
 protected:
  const Kernels& kernels() { return kernels_for(GetParam()); }
  uint32_t seed_ = fresh_seed();
};

struct Problem {
  int64_t d, dv, n_kv;
  int g;
  float scale;
  std::vector<float> q, mask;  // g x d, g x n_kv (empty: no mask)
  std::vector<uint16_t> k, v;  // n_kv x d, n_kv x dv
};

std::vector<float> run(const Kernels& kern, const Problem& p) {
  std::vector<const float*> q, mask;
  std::vector<float> out(static_cast<size_t>(p.g * p.dv), -1.0f), scores(static_cast<size_t>(kAttnBlock * p.n_kv));
  std::vector<float*> outs;
  for (int i = 0; i < p.g; ++i) {
    q.push_back(p.q.data() + i * p.d);
    if (!p.mask.empty()) mask.push_back(p.mask.data() + i * p.n_kv);
    outs.push_back(out.data() + i * p.dv);
  }
  AttnArgs a;
  a.d = p.d;
  a.dv = p.dv;
  a.n_kv = p.n_kv;
  a.g = p.g;
  a.q = q.data();
  a.mask = p.mask.empty() ? nullptr : mask.data();
  a.k = reinterpret_cast<const uint8_t*>(p.k.data());
  a.k_stride = static_cast<size_t>(p.d) * 2;
  a.v = reinterpret_cast<const uint8_t*>(p.v.data());
  a.v_stride = static_cast<size_t>(p.dv) * 2;
  a.scale = p.scale;
  a.scores = scores.data();
  a.out = outs.data();
  kern.attn_f16(a);
  return out;
}

std::vector<double> reference(const Problem& p) {
  std::vector<double> out(static_cast<size_t>(p.g * p.dv), 0.0);
  for (int i = 0; i < p.g; ++i) {
    std::vector<double> s(p.n_kv);
    double mx = -INFINITY;
    for (int64_t c = 0; c < p.n_kv; ++c) {
      if (!p.mask.empty() && p.mask[i * p.n_kv + c] == -INFINITY) {  // skipped, as the op's
        s[c] = -INFINITY;
        continue;
      }
      double dot = 0;
      for (int64_t j = 0; j < p.d; ++j)
        dot += double(p.q[i * p.d + j]) * fp16_to_fp32(p.k[c * p.d + j]);
      s[c] = dot * p.scale + (p.mask.empty() ? 0.0 : p.mask[i * p.n_kv + c]);
      mx = std::max(mx, s[c]);
    }
    if (mx == -INFINITY) continue;
    double sum = 0;
    for (int64_t c = 0; c < p.n_kv; ++c) {
      if (s[c] == -INFINITY) continue;
      const double w = std::exp(s[c] - mx);
      sum += w;
      for (int64_t j = 0; j < p.dv; ++j) out[i * p.dv + j] += w * fp16_to_fp32(p.v[c * p.dv + j]);
    }
    for (int64_t j = 0; j < p.dv; ++j) out[i * p.dv + j] /= sum;
  }
  return out;
}

std::vector<uint16_t> random_f16(size_t n, std::mt19937& rng) {
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<uint16_t> out(n);
  for (uint16_t& h : out) h = fp32_to_fp16(dist(rng));
  return out;
}

TEST_P(AttnKernelTest, MatchesDoubleReference) {
  std::mt19937 rng(seed_);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  struct Shape {
    int64_t d, dv, n_kv;
    int g;
    bool mask;
  };
  for (const Shape s :
       {Shape{8, 8, 300, 2, true}, Shape{20, 24, 33, 5, false}, Shape{64, 64, 41, 4, true},
        Shape{40, 17, 1, 3, true}, Shape{128, 128, 77, 8, true}}) {
    Problem p{s.d, s.dv, s.n_kv, s.g, 2.0f / std::sqrt(float(s.d)), {}, {}, {}, {}};
    p.q.resize(static_cast<size_t>(s.g * s.d));
    for (float& x : p.q) x = 4.0f * dist(rng);
    p.k = random_f16(static_cast<size_t>(s.n_kv * s.d), rng);
    p.v = random_f16(static_cast<size_t>(s.n_kv * s.dv), rng);
    if (s.mask) {
      p.mask.resize(static_cast<size_t>(s.g * s.n_kv));
      for (size_t i = 0; i < p.mask.size(); ++i) {
        p.mask[i] = i % s.n_kv != 0 && rng() % 4 == 0 ? -INFINITY : dist(rng);
      }
      if (s.g > 2) {  // row 1: every key masked
        for (int64_t c = 0; c < s.n_kv; ++c) p.mask[s.n_kv + c] = -INFINITY;
      }
    }
    const std::vector<float> got = run(kernels(), p);
    const std::vector<double> want = reference(p);
    for (size_t i = 0; i < want.size(); ++i) {
      ASSERT_NEAR(got[i], want[i], 1e-5)
          << "d " << s.d << " n_kv " << s.n_kv << " at " << i << " seed " << seed_;
    }
  }
}

// Keys masked for every row are skipped: NaN in their K and V rows (as in a
// cache's unwritten tail) does not reach the output.
TEST_P(AttnKernelTest, MaskedKeysAreNotRead) {
  std::mt19937 rng(seed_);
  const int64_t d = 16, n_kv = 40;
  const int g = 3;
  Problem p{d,
            d,
            n_kv,
            g,
            0.25f,
            std::vector<float>(g * d, 0.5f),
            std::vector<float>(g * n_kv, 0.0f),
            random_f16(n_kv * d, rng),
            random_f16(n_kv * d, rng)};
  const uint16_t nan = 0x7E00;
  for (int64_t c = 30; c < n_kv; ++c) {
    for (int i = 0; i < g; ++i) p.mask[i * n_kv + c] = -INFINITY;
    for (int64_t j = 0; j < d; ++j) p.k[c * d + j] = p.v[c * d + j] = nan;
  }
  const std::vector<float> got = run(kernels(), p);
  const std::vector<double> want = reference(p);
  for (size_t i = 0; i < want.size(); ++i) ASSERT_NEAR(got[i], want[i], 1e-5) << i;
}

// q = 0, V rows 0 and 1, mask (0, x): out = exp(x) / (1 + exp(x)).
TEST_P(AttnKernelTest, ExpIsAccurate) {
  Problem p{8,
            8,
            2,
            1,
            1.0f,
            std::vector<float>(8, 0.0f),
            {0.0f, 0.0f},
            std::vector<uint16_t>(16, 0),
            std::vector<uint16_t>(16, 0)};
  for (int j = 0; j < 8; ++j) p.v[8 + j] = fp32_to_fp16(1.0f);
  double worst = 0;
  for (float x = -87.0f; x <= 0.0f; x += 0.0137f) {
    p.mask[1] = x;
    const float got = run(kernels(), p)[0];
    const double e = std::exp(double(x)), want = e / (1.0 + e);
    worst = std::max(worst, std::fabs(got - want) / want);
  }
  EXPECT_LT(worst, 1e-6);
}

INSTANTIATE_TEST_SUITE_P(Tiers, AttnKernelTest, ::testing::ValuesIn(testing::simd_tiers()),
                         testing::tier_name);

}  // namespace
}  // namespace tessera::cpu
