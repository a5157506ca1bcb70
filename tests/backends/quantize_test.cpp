// Activation quantizers of every tier are bit-exact with the scalar
// references (quantize_q8_ref, quantize_row_q8_K_ref) on random rows, on
// blocks built to hit rounding ties exactly, and on zeros, NaN and Inf; and
// quantize_q8_ref agrees with GGUF's quantize_row_q8_0_ref.
#include <gtest/gtest.h>

#include <limits>

#include "kernel_test_util.h"
#include "tessera/core/half.h"

namespace tessera::cpu {
namespace {

using testing::fresh_seed;
using testing::random_floats;

class QuantizeTest : public ::testing::TestWithParam<Isa> {
 protected:
  const Kernels& kernels() { return kernels_for(GetParam()); }
  uint32_t seed_ = fresh_seed();
};

// Rows of n floats whose blocks (of `block` elements) exercise the edges:
// random, halfway cases at scale 1 (amax 127: d = 1 exactly, so x * id is
// x), all zero, one NaN, one +-Inf, signed zeros and duplicate maxima.
std::vector<float> edge_row(size_t n, size_t block, std::mt19937& rng) {
  std::vector<float> x = random_floats(n, rng);
  std::uniform_int_distribution<int> half(-126, 125);
  const size_t blocks = n / block;
  for (size_t b = 0; b < blocks; ++b) {
    float* p = x.data() + b * block;
    switch (b % 7) {
      case 1:
        for (size_t j = 0; j < block; ++j) p[j] = static_cast<float>(half(rng)) + 0.5f;
        p[block / 3] = (b % 2) ? 127.0f : -127.0f;
        break;
      case 2:
        std::fill(p, p + block, 0.0f);
        break;
      case 3:
        p[block / 2] = std::numeric_limits<float>::quiet_NaN();
        break;
      case 4:
        p[block - 1] = (b % 2) ? std::numeric_limits<float>::infinity()
                               : -std::numeric_limits<float>::infinity();
        break;
      case 5:
        for (size_t j = 0; j < block; ++j)
          p[j] = j % 2 ? 0.5f * std::sin(static_cast<float>(j)) : -0.0f;
        p[1] = 0.75f;
        p[block - 1] = -0.75f;  // two maxima of opposite sign: the first wins
        break;
      default:
        break;
    }
  }
  return x;
}

TEST_P(QuantizeTest, Q8IsBitExactWithTheReference) {
  SCOPED_TRACE(::testing::Message() << "seed " << seed_);
  std::mt19937 rng(seed_);
  for (int64_t k : {32, 64, 224, 4096}) {
    for (int trial = 0; trial < 8; ++trial) {
      const std::vector<float> x = edge_row(static_cast<size_t>(k), kQK, rng);
      std::vector<BlockQ8> want(static_cast<size_t>(k / kQK)), got(want.size());
      std::memset(got.data(), 0xcd, got.size() * sizeof(BlockQ8));
      quantize_q8_ref(x.data(), want.data(), k);
      kernels().quantize_q8(x.data(), got.data(), k);
      for (size_t b = 0; b < want.size(); ++b) {
        ASSERT_EQ(std::memcmp(&got[b], &want[b], sizeof(BlockQ8)), 0)
            << "k " << k << " block " << b << ": d " << got[b].d << " vs " << want[b].d << ", sum "
            << got[b].sum << " vs " << want[b].sum;
      }
    }
  }
}

TEST_P(QuantizeTest, Q8KIsBitExactWithTheReference) {
  SCOPED_TRACE(::testing::Message() << "seed " << seed_);
  std::mt19937 rng(seed_);
  for (int64_t k : {256, 512, 4096}) {
    for (int trial = 0; trial < 8; ++trial) {
      const std::vector<float> x = edge_row(static_cast<size_t>(k), kQKK, rng);
      std::vector<block_q8_K> want(static_cast<size_t>(k / kQKK)), got(want.size());
      std::memset(got.data(), 0xcd, got.size() * sizeof(block_q8_K));
      quantize_row_q8_K_ref(x.data(), want.data(), k);
      kernels().quantize_q8_k(x.data(), got.data(), k);
      for (size_t b = 0; b < want.size(); ++b) {
        ASSERT_EQ(std::memcmp(&got[b], &want[b], sizeof(block_q8_K)), 0)
            << "k " << k << " block " << b << ": d " << got[b].d << " vs " << want[b].d;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Tiers, QuantizeTest, ::testing::ValuesIn(testing::tiers()),
                         testing::tier_name);

TEST(QuantizeQ8Ref, AgreesWithTheGgufQ8_0Quantizer) {
  const uint32_t seed = fresh_seed();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  std::mt19937 rng(seed);
  const int64_t k = 4096;
  const std::vector<float> x = random_floats(static_cast<size_t>(k), rng);
  std::vector<BlockQ8> ours(k / kQK);
  std::vector<block_q8_0> gguf(k / kQK);
  quantize_q8_ref(x.data(), ours.data(), k);
  quantize_row_q8_0_ref(x.data(), gguf.data(), k);
  for (size_t b = 0; b < ours.size(); ++b) {
    ASSERT_EQ(std::memcmp(ours[b].qs, gguf[b].qs, kQK), 0) << b;
    EXPECT_EQ(fp32_to_fp16(ours[b].d), gguf[b].d) << b;
    int sum = 0;
    for (int8_t q : gguf[b].qs) sum += q;
    EXPECT_EQ(ours[b].sum, sum) << b;
  }
}

}  // namespace
}  // namespace tessera::cpu
