// The SIMD tiers' row kernels against double-precision references: rms_norm
// on lengths with and without vector tails, in place and out of place;
// exp_sum (SOFT_MAX's exponentials) to 1e-6 relative, with -inf giving 0 and
// NaN staying NaN; silu_mul (SWIGLU) and gelu to 1e-6 relative over the sigmoid's range.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "kernel_test_util.h"

namespace tessera::cpu {
namespace {

using testing::fresh_seed;
using testing::random_floats;

class RowKernelTest : public ::testing::TestWithParam<Isa> {
 protected:
  const Kernels& kernels() { return kernels_for(GetParam()); }
  uint32_t seed_ = fresh_seed();
};

TEST_P(RowKernelTest, RmsNormMatchesDoubleReference) {
  std::mt19937 rng(seed_);
  for (const int64_t n : {1, 7, 8, 16, 63, 64, 65, 288, 4096, 5000}) {
    const std::vector<float> x = random_floats(static_cast<size_t>(n), rng);
    const float eps = 1e-5f;
    double sum = 0;
    for (const float v : x) sum += double(v) * v;
    const double inv = 1.0 / std::sqrt(sum / static_cast<double>(n) + eps);
    std::vector<float> y(static_cast<size_t>(n) + 1, 123.0f), inplace = x;
    kernels().rms_norm(x.data(), y.data(), n, eps);
    kernels().rms_norm(inplace.data(), inplace.data(), n, eps);
    EXPECT_EQ(y[static_cast<size_t>(n)], 123.0f) << "wrote past the row";
    for (int64_t i = 0; i < n; ++i) {
      const double want = x[static_cast<size_t>(i)] * inv;
      ASSERT_NEAR(y[static_cast<size_t>(i)], want, 1e-5 * std::fabs(want) + 1e-30)
          << "n " << n << " at " << i << " seed " << seed_;
      ASSERT_EQ(inplace[static_cast<size_t>(i)], y[static_cast<size_t>(i)]);
    }
  }
}

TEST_P(RowKernelTest, ExpSumMatchesDoubleReference) {
  std::mt19937 rng(seed_);
  std::uniform_real_distribution<float> dist(-90.0f, 0.0f);
  for (const int64_t n : {1, 5, 16, 17, 100, 1000}) {
    std::vector<float> x(static_cast<size_t>(n));
    for (float& v : x) v = dist(rng) + 3.0f;
    if (n > 3) x[2] = -std::numeric_limits<float>::infinity();
    const float max = 3.0f;
    std::vector<float> y(static_cast<size_t>(n));
    const float sum = kernels().exp_sum(x.data(), y.data(), n, max);
    double want_sum = 0;
    for (int64_t i = 0; i < n; ++i) {
      const double want = std::exp(double(x[static_cast<size_t>(i)]) - max);
      want_sum += want;
      const float got = y[static_cast<size_t>(i)];
      if (x[static_cast<size_t>(i)] - max < -87.0f) {  // vector lanes flush to 0 below exp(-87)
        ASSERT_LE(got, 1.7e-38f) << i;
      } else {
        ASSERT_NEAR(got, want, 1e-6 * want) << "n " << n << " at " << i << " seed " << seed_;
      }
    }
    EXPECT_NEAR(sum, want_sum, 1e-6 * want_sum + 1e-30);
  }
  std::vector<float> x = {0.0f, std::numeric_limits<float>::quiet_NaN(), -1.0f};
  x.resize(40, -2.0f);
  std::vector<float> y(x.size());
  x[30] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(std::isnan(kernels().exp_sum(x.data(), y.data(), 40, 0.0f)));
  EXPECT_TRUE(std::isnan(y[1]));
  EXPECT_TRUE(std::isnan(y[30]));
  EXPECT_FLOAT_EQ(y[0], 1.0f);
}

// SWIGLU's silu(g) * u: gates across the sigmoid's whole range (|g| up to
// 100, where exp(-g) overflows or vanishes), written in place over g too.
TEST_P(RowKernelTest, SiluMulMatchesDoubleReference) {
  std::mt19937 rng(seed_);
  std::uniform_real_distribution<float> wide(-100.0f, 100.0f), narrow(-6.0f, 6.0f), up(-1.0f, 1.0f);
  for (const int64_t n : {1, 7, 16, 17, 100, 5632}) {
    std::vector<float> g(static_cast<size_t>(n)), u(static_cast<size_t>(n));
    for (size_t i = 0; i < g.size(); ++i) {
      g[i] = i % 3 == 0 ? wide(rng) : narrow(rng);
      u[i] = up(rng);
    }
    std::vector<float> y(static_cast<size_t>(n) + 1, 123.0f), inplace = g;
    kernels().silu_mul(g.data(), u.data(), y.data(), n);
    kernels().silu_mul(inplace.data(), u.data(), inplace.data(), n);
    EXPECT_EQ(y[static_cast<size_t>(n)], 123.0f) << "wrote past the row";
    for (size_t i = 0; i < g.size(); ++i) {
      const double want = double(g[i]) / (1.0 + std::exp(-double(g[i]))) * u[i];
      ASSERT_NEAR(y[i], want, 1e-6 * std::fabs(want) + 1e-30)
          << "g " << g[i] << " n " << n << " at " << i << " seed " << seed_;
      ASSERT_EQ(inplace[i], y[i]);
    }
  }
  std::vector<float> g(20, 1.0f), u(20, 1.0f), y(20);
  g[3] = g[17] = std::numeric_limits<float>::quiet_NaN();
  kernels().silu_mul(g.data(), u.data(), y.data(), 20);
  EXPECT_TRUE(std::isnan(y[3]));
  EXPECT_TRUE(std::isnan(y[17]));
}

// GELU (the tanh form) over its whole range: |x| up to 100, where exp(-2z)
// overflows or vanishes, in place too; NaN stays NaN.
TEST_P(RowKernelTest, GeluMatchesDoubleReference) {
  std::mt19937 rng(seed_);
  std::uniform_real_distribution<float> wide(-100.0f, 100.0f), narrow(-6.0f, 6.0f);
  for (const int64_t n : {1, 7, 16, 17, 100, 3072}) {
    std::vector<float> x(static_cast<size_t>(n));
    for (size_t i = 0; i < x.size(); ++i) x[i] = i % 3 == 0 ? wide(rng) : narrow(rng);
    std::vector<float> y(static_cast<size_t>(n) + 1, 123.0f), inplace = x;
    kernels().gelu(x.data(), y.data(), n);
    kernels().gelu(inplace.data(), inplace.data(), n);
    EXPECT_EQ(y[static_cast<size_t>(n)], 123.0f) << "wrote past the row";
    for (size_t i = 0; i < x.size(); ++i) {
      const double v = x[i];
      const double z2 = 2.0 * 0.7978845608028654 * v * (1.0 + 0.044715 * v * v);
      const double want = v / (1.0 + std::exp(-z2));
      // 2z rounded in f32 (a few ulp, 2^-23 each) is an error exp multiplies
      // by |2z|: the scalar formula carries it too.
      const double tol = (1e-6 + 4 * 0x1p-23 * std::fabs(z2)) * std::fabs(want) + 1e-30;
      ASSERT_NEAR(y[i], want, tol) << "x " << x[i] << " n " << n << " at " << i << " seed " << seed_;
      ASSERT_EQ(inplace[i], y[i]);
    }
  }
  std::vector<float> x(20, 1.0f), y(20);
  x[3] = x[17] = std::numeric_limits<float>::quiet_NaN();
  kernels().gelu(x.data(), y.data(), 20);
  EXPECT_TRUE(std::isnan(y[3]));
  EXPECT_TRUE(std::isnan(y[17]));
}

INSTANTIATE_TEST_SUITE_P(Tiers, RowKernelTest, ::testing::ValuesIn(testing::simd_tiers()),
                         testing::tier_name);

}  // namespace
}  // namespace tessera::cpu
