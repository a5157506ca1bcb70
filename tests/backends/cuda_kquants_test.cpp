// The CUDA kernels' block arithmetic compiled for the host and checked
// against the CPU's reference quantizers, on every build:
// - K-quants, IQ4 and MXFP4 (kquants.cuh): element values (GET_ROWS, the f16 weights cuBLAS
//   reads) and sub-block dot products against int8 activations (the decode
//   matrix-vector kernel), on blocks from the quantizer and on random bytes
//   (every scale bit pattern);
// - Q4_0 / Q8_0 (quant_blocks.cuh): the blocks SET_ROWS writes into a
//   quantized KV cache, byte for byte the CPU's, and the values attention
//   reads back.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "backends/cuda/ops/kquants.cuh"
#include "backends/cuda/ops/quant_blocks.cuh"
#include "tessera/core/dtype.h"
#include "tessera/core/half.h"

namespace tessera {
namespace {

namespace kq = cuda::kq;

constexpr DType kTypes[] = {DType::kQ2_K,  DType::kQ3_K,  DType::kQ4_K, DType::kQ5_K,
                            DType::kQ6_K,  DType::kIQ4_NL, DType::kIQ4_XS, DType::kQ4_1,
                            DType::kQ5_0, DType::kQ5_1,  DType::kMXFP4};

// `blocks` super-blocks of `type`: from the quantizer (random normal values
// at a random scale), or random bytes with sane f16 scales.
std::vector<uint8_t> make_blocks(DType type, int blocks, bool from_quantizer, std::mt19937& rng) {
  const auto bb = static_cast<size_t>(kq::block_bytes(static_cast<uint32_t>(type)));
  std::vector<uint8_t> out(bb * static_cast<size_t>(blocks));
  if (from_quantizer) {
    std::normal_distribution<float> normal(0.0f, std::exp2(std::uniform_real_distribution<float>(-6, 3)(rng)));
    std::vector<float> x(static_cast<size_t>(blocks) * static_cast<size_t>(kq::block_elems(static_cast<uint32_t>(type))));
    for (float& v : x) v = normal(rng);
    quantize_row(type, x.data(), out.data(), static_cast<int64_t>(x.size()));
    return out;
  }
  for (uint8_t& b : out) b = static_cast<uint8_t>(rng());
  std::uniform_real_distribution<float> scale(0.001f, 0.1f);
  for (int i = 0; i < blocks; ++i) {
    uint8_t* b = out.data() + bb * static_cast<size_t>(i);
    auto put = [&](size_t at, float v) {
      const uint16_t h = fp32_to_fp16(v);
      b[at] = static_cast<uint8_t>(h & 0xff);
      b[at + 1] = static_cast<uint8_t>(h >> 8);
    };
    switch (type) {
      case DType::kQ2_K: put(80, scale(rng)); put(82, scale(rng)); break;
      case DType::kQ3_K: put(108, scale(rng)); break;
      case DType::kQ6_K: put(208, scale(rng)); break;
      case DType::kIQ4_NL:
      case DType::kIQ4_XS:
      case DType::kQ5_0: put(0, scale(rng)); break;
      case DType::kQ4_1:
      case DType::kQ5_1: put(0, scale(rng)); put(2, -scale(rng)); break;  // d, m
      case DType::kMXFP4:  // E8M0 exponents around 2^0, both subnormal ones among them
        b[0] = static_cast<uint8_t>(i % 2 == 0 ? std::uniform_int_distribution<int>(100, 140)(rng)
                                               : std::uniform_int_distribution<int>(0, 3)(rng));
        break;
      default: put(0, scale(rng)); put(2, scale(rng)); break;  // Q4_K, Q5_K: d, dmin
    }
  }
  return out;
}

TEST(CudaKQuants, ElementsEqualTheReferenceDequantization) {
  std::mt19937 rng(1234);
  for (DType type : kTypes) {
    SCOPED_TRACE(dtype_name(type));
    const auto t = static_cast<uint32_t>(type);
    EXPECT_TRUE(kq::is_kquant(t));
    EXPECT_EQ(static_cast<size_t>(kq::block_bytes(t)), dtype_info(type).block_bytes);
    for (int trial = 0; trial < 16; ++trial) {
      const int blocks = 4;
      const std::vector<uint8_t> q = make_blocks(type, blocks, trial % 2 == 0, rng);
      const int elems = kq::block_elems(t);
      std::vector<float> ref(static_cast<size_t>(blocks) * static_cast<size_t>(elems));
      dequantize_row(type, q.data(), ref.data(), static_cast<int64_t>(ref.size()));
      float worst = 0.0f, largest = 0.0f;
      for (int b = 0; b < blocks; ++b) {
        const uint8_t* block = q.data() + static_cast<size_t>(b) * static_cast<size_t>(kq::block_bytes(t));
        for (int e = 0; e < elems; ++e) {
          const float want = ref[static_cast<size_t>(b * elems + e)];
          worst = std::max(worst, std::fabs(kq::value(block, t, e) - want));
          largest = std::max(largest, std::fabs(want));
        }
      }
      // The same products in another order: a few f32 roundings of the
      // block's largest magnitude (d * sc * q and dmin * m each <= it).
      EXPECT_LE(worst, 4 * 1.2e-7f * largest) << "trial " << trial;
      EXPECT_GT(largest, 0.0f);
    }
  }
}

TEST(CudaKQuants, SubBlockDotsEqualTheDequantizedDot) {
  std::mt19937 rng(99);
  std::uniform_int_distribution<int> int8(-127, 127);
  for (DType type : kTypes) {
    SCOPED_TRACE(dtype_name(type));
    const auto t = static_cast<uint32_t>(type);
    for (int trial = 0; trial < 16; ++trial) {
      const std::vector<uint8_t> q = make_blocks(type, 1, trial % 2 == 0, rng);
      const int elems = kq::block_elems(t);
      std::vector<float> ref(static_cast<size_t>(elems));
      dequantize_row(type, q.data(), ref.data(), elems);
      alignas(16) int8_t x[kq::kSuper];
      for (int8_t& v : x) v = static_cast<int8_t>(int8(rng));
      const float dx = std::uniform_real_distribution<float>(0.001f, 0.05f)(rng);
      for (int j = 0; j < elems / kq::kSub; ++j) {
        double want = 0.0, magnitude = 0.0;
        for (int l = 0; l < kq::kSub; ++l) {
          const double term = double(ref[static_cast<size_t>(j * kq::kSub + l)]) * dx * x[j * kq::kSub + l];
          want += term;
          magnitude += std::fabs(term);
        }
        const float got = kq::sub_dot(q.data(), t, j, x + j * kq::kSub, dx);
        // Integer sums are exact; a handful of f32 products and one
        // difference of two terms each bounded by the magnitude.
        EXPECT_NEAR(got, want, 1e-5 * magnitude + 1e-30) << "trial " << trial << ", sub-block " << j;
      }
    }
  }
}

TEST(CudaQuantBlocks, CacheRowsAreTheCpusBytes) {
  std::mt19937 rng(7);
  for (DType type : {DType::kQ8_0, DType::kQ4_0}) {
    SCOPED_TRACE(dtype_name(type));
    const auto t = static_cast<uint32_t>(type);
    const auto bb = static_cast<size_t>(cuda::qb::block_bytes(t));
    EXPECT_EQ(bb, dtype_info(type).block_bytes);
    for (int trial = 0; trial < 64; ++trial) {
      // K / V rows of a head of 128 at scales from 1e-6 (subnormal f16
      // scales) to 1e3; one row in eight with a repeated extreme value.
      const int n = 128;
      std::normal_distribution<float> normal(0.0f, std::exp2(std::uniform_real_distribution<float>(-24, 10)(rng)));
      std::vector<float> x(n);
      for (float& v : x) v = normal(rng);
      if (trial % 8 == 0) x[5] = x[9] = -x[3] * 4.0f;
      std::vector<uint8_t> want(bb * n / 32), got(want.size());
      quantize_row(type, x.data(), want.data(), n);
      for (int b = 0; b < n / 32; ++b) {
        if (type == DType::kQ8_0) {
          cuda::qb::quantize_q8_0(x.data() + 32 * b, got.data() + bb * static_cast<size_t>(b));
        } else {
          cuda::qb::quantize_q4_0(x.data() + 32 * b, got.data() + bb * static_cast<size_t>(b));
        }
      }
      EXPECT_EQ(got, want) << "trial " << trial;
      std::vector<float> ref(n);
      dequantize_row(type, want.data(), ref.data(), n);
      for (int e = 0; e < n; ++e) {
        EXPECT_EQ(cuda::qb::value(want.data() + bb * static_cast<size_t>(e / 32), t, e % 32),
                  ref[static_cast<size_t>(e)])
            << "trial " << trial << ", element " << e;
      }
    }
  }
}

TEST(CudaQuantBlocks, HalfConversionRoundsAsTheCpus) {
  std::mt19937 rng(3);
  for (int i = 0; i < 100000; ++i) {
    uint32_t bits = static_cast<uint32_t>(rng());
    float f;
    std::memcpy(&f, &bits, sizeof f);
    if (std::isnan(f)) continue;
    ASSERT_EQ(cuda::qb::half_from_float(f), fp32_to_fp16(f)) << f;
  }
}

}  // namespace
}  // namespace tessera
