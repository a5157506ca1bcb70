// f16 / bf16 conversions, checked against references built from doubles
// (std::ldexp, nearest-value search) rather than the bit tricks under test.
#include "tessera/core/half.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

namespace tessera {
namespace {

bool f16_is_nan(uint16_t h) {
  return (h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0;
}
bool bf16_is_nan(uint16_t h) {
  return (h & 0x7f80) == 0x7f80 && (h & 0x7f) != 0;
}

// Value of an f16 pattern from its definition. 0x7c00 (Inf) reads as 2^16,
// the value the next binade would start at, which is what rounding compares against.
double f16_value(uint16_t h) {
  const int sign = h >> 15, exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
  const double mag = exp == 0 ? std::ldexp(mant, -24) : std::ldexp(1024 + mant, exp - 25);
  return sign ? -mag : mag;
}

double bf16_value(uint16_t h) {
  const int sign = h >> 15, exp = (h >> 7) & 0xff, mant = h & 0x7f;
  const double mag = exp == 0 ? std::ldexp(mant, -133) : std::ldexp(128 + mant, exp - 134);
  return sign ? -mag : mag;
}

// Nearest of two candidate patterns lo < hi (by magnitude) to |v|, ties to the
// even pattern. Independent of the code under test: compares exact doubles.
uint16_t pick_nearest(double v, uint16_t lo, double lo_val, uint16_t hi, double hi_val) {
  const double dlo = v - lo_val, dhi = hi_val - v;
  if (dlo < dhi) return lo;
  if (dhi < dlo) return hi;
  return (lo & 1) ? hi : lo;
}

// Reference fp32 -> f16 for finite f: binary search over the ordered
// non-negative patterns 0..0x7c00, then round to nearest, ties to even.
uint16_t ref_fp32_to_fp16(float f) {
  const uint16_t sign = std::signbit(f) ? 0x8000 : 0;
  const double v = std::fabs(static_cast<double>(f));
  if (v >= 65536.0) return sign | 0x7c00;
  uint16_t lo = 0, hi = 0x7c00;  // f16_value(lo) <= v < f16_value(hi)
  while (hi - lo > 1) {
    const uint16_t mid = static_cast<uint16_t>((lo + hi) / 2);
    (f16_value(mid) <= v ? lo : hi) = mid;
  }
  return sign | pick_nearest(v, lo, f16_value(lo), hi, f16_value(hi));
}

// Reference fp32 -> bf16 for finite f: the two bf16 neighbours of |f| are the
// truncation and the next pattern (0x7f80 reads as 2^128).
uint16_t ref_fp32_to_bf16(float f) {
  const uint16_t sign = std::signbit(f) ? 0x8000 : 0;
  const double v = std::fabs(static_cast<double>(f));
  const auto lo = static_cast<uint16_t>((std::bit_cast<uint32_t>(f) >> 16) & 0x7fff);
  const auto hi = static_cast<uint16_t>(lo + 1);
  const double hi_val = hi == 0x7f80 ? std::ldexp(1.0, 128) : bf16_value(hi);
  return sign | pick_nearest(v, lo, bf16_value(lo), hi, hi_val);
}

// Random floats: uniform bit patterns (every binade, subnormals included,
// NaNs skipped) and, for f16, values spread over the f16 exponent range.
std::vector<float> random_floats(uint32_t seed, int count, bool f16_range) {
  std::mt19937 rng(seed);
  std::vector<float> out;
  std::uniform_int_distribution<uint32_t> bits;
  std::uniform_real_distribution<double> mant(1.0, 2.0);
  std::uniform_int_distribution<int> exp(-27, 17);
  while (static_cast<int>(out.size()) < count) {
    float f;
    if (f16_range && out.size() % 2 == 0) {
      f = static_cast<float>(std::ldexp(mant(rng), exp(rng)));
      if (bits(rng) & 1) f = -f;
    } else {
      f = std::bit_cast<float>(bits(rng));
    }
    if (std::isfinite(f)) out.push_back(f);
  }
  return out;
}

TEST(Half, Fp16ToFp32MatchesDefinitionForAllPatterns) {
  for (uint32_t i = 0; i < 0x10000; ++i) {
    const auto h = static_cast<uint16_t>(i);
    const float f = fp16_to_fp32(h);
    if (f16_is_nan(h)) {
      EXPECT_TRUE(std::isnan(f)) << std::hex << i;
    } else if ((h & 0x7fff) == 0x7c00) {
      EXPECT_EQ(f, (h & 0x8000) ? -INFINITY : INFINITY) << std::hex << i;
    } else {
      ASSERT_EQ(static_cast<double>(f), f16_value(h)) << std::hex << i;
    }
    EXPECT_EQ(std::signbit(f), (h & 0x8000) != 0) << std::hex << i;
  }
}

TEST(Half, Fp16RoundTripIsIdentityForAllPatterns) {
  for (uint32_t i = 0; i < 0x10000; ++i) {
    const auto h = static_cast<uint16_t>(i);
    const uint16_t back = fp32_to_fp16(fp16_to_fp32(h));
    if (f16_is_nan(h)) {
      // NaN stays NaN, same sign, made quiet; a quiet NaN keeps its payload.
      EXPECT_TRUE(f16_is_nan(back)) << std::hex << i;
      EXPECT_EQ(back & 0x8000, h & 0x8000) << std::hex << i;
      EXPECT_EQ(back, h | 0x0200) << std::hex << i;
    } else {
      ASSERT_EQ(back, h) << std::hex << i;
    }
  }
}

TEST(Half, Bf16RoundTripIsIdentityForAllPatterns) {
  for (uint32_t i = 0; i < 0x10000; ++i) {
    const auto h = static_cast<uint16_t>(i);
    const float f = bf16_to_fp32(h);
    if (bf16_is_nan(h)) {
      EXPECT_TRUE(std::isnan(f)) << std::hex << i;
      EXPECT_EQ(fp32_to_bf16(f), h | 0x0040) << std::hex << i;
    } else {
      if ((h & 0x7fff) == 0x7f80) {
        ASSERT_TRUE(std::isinf(f)) << std::hex << i;
      } else {
        ASSERT_EQ(static_cast<double>(f), bf16_value(h)) << std::hex << i;
      }
      ASSERT_EQ(fp32_to_bf16(f), h) << std::hex << i;
    }
  }
}

TEST(Half, Fp32ToFp16RoundsLikeReferenceOnRandomFloats) {
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  int mismatches = 0;
  for (float f : random_floats(seed, 300000, /*f16_range=*/true)) {
    const uint16_t want = ref_fp32_to_fp16(f);
    const uint16_t got = fp32_to_fp16(f);
    if (got != want && ++mismatches <= 5) {
      ADD_FAILURE() << std::hexfloat << f << ": got " << std::hex << got << " want " << want;
    }
  }
  EXPECT_EQ(mismatches, 0);
}

TEST(Half, Fp32ToFp16TiesGoToEvenAtEveryHalfwayPoint) {
  // Every pair of adjacent finite f16 values, both signs, including the
  // subnormal/normal boundary and 65504 -> Inf (treated as 2^16). The midpoint
  // needs 12 significant bits, so it is exact in float.
  for (uint16_t lo = 0; lo < 0x7c00; ++lo) {
    const auto hi = static_cast<uint16_t>(lo + 1);
    const double mid = (f16_value(lo) + f16_value(hi)) / 2;
    const auto fmid = static_cast<float>(mid);
    ASSERT_EQ(static_cast<double>(fmid), mid);
    const uint16_t even = (lo & 1) ? hi : lo;
    for (uint16_t sign : {uint16_t{0}, uint16_t{0x8000}}) {
      const float s = sign ? -1.0f : 1.0f;
      ASSERT_EQ(fp32_to_fp16(s * fmid), sign | even) << std::hex << lo;
      ASSERT_EQ(fp32_to_fp16(s * std::nextafter(fmid, 0.0f)), sign | lo) << std::hex << lo;
      ASSERT_EQ(fp32_to_fp16(s * std::nextafter(fmid, INFINITY)), sign | hi) << std::hex << lo;
    }
  }
}

TEST(Half, Fp32ToFp16SpecialValues) {
  EXPECT_EQ(fp32_to_fp16(0.0f), 0x0000);
  EXPECT_EQ(fp32_to_fp16(-0.0f), 0x8000);
  EXPECT_EQ(fp32_to_fp16(1.0f), 0x3c00);
  EXPECT_EQ(fp32_to_fp16(-2.5f), 0xc100);
  EXPECT_EQ(fp32_to_fp16(65504.0f), 0x7bff);
  EXPECT_EQ(fp32_to_fp16(65519.996f), 0x7bff);
  EXPECT_EQ(fp32_to_fp16(65520.0f), 0x7c00);  // tie between 65504 (odd) and 2^16
  EXPECT_EQ(fp32_to_fp16(-1e10f), 0xfc00);
  EXPECT_EQ(fp32_to_fp16(std::numeric_limits<float>::max()), 0x7c00);
  EXPECT_EQ(fp32_to_fp16(INFINITY), 0x7c00);
  EXPECT_EQ(fp32_to_fp16(-INFINITY), 0xfc00);
  // Subnormals: 2^-24 is the smallest; 2^-25 ties to 0; 1.5 * 2^-24 ties to 2.
  EXPECT_EQ(fp32_to_fp16(std::ldexp(1.0f, -24)), 0x0001);
  EXPECT_EQ(fp32_to_fp16(std::ldexp(1.0f, -25)), 0x0000);
  EXPECT_EQ(fp32_to_fp16(std::nextafter(std::ldexp(1.0f, -25), 1.0f)), 0x0001);
  EXPECT_EQ(fp32_to_fp16(-std::ldexp(3.0f, -25)), 0x8002);
  EXPECT_EQ(fp32_to_fp16(std::ldexp(1023.0f, -24)), 0x03ff);
  EXPECT_EQ(fp32_to_fp16(std::ldexp(1.0f, -14)), 0x0400);
  EXPECT_EQ(fp32_to_fp16(std::numeric_limits<float>::denorm_min()), 0x0000);
  EXPECT_EQ(fp32_to_fp16(-std::numeric_limits<float>::denorm_min()), 0x8000);
  // NaNs of every payload stay NaN and quiet, including payloads that live only
  // in the low 13 bits (plain truncation would turn those into Inf).
  for (uint32_t bits : {0x7fc00000u, 0x7f800001u, 0xff800001u, 0x7fffffffu, 0x7f802000u}) {
    const uint16_t h = fp32_to_fp16(std::bit_cast<float>(bits));
    EXPECT_TRUE(f16_is_nan(h)) << std::hex << bits;
    EXPECT_TRUE(h & 0x0200) << std::hex << bits;
    EXPECT_EQ((h & 0x8000) != 0, (bits >> 31) != 0) << std::hex << bits;
  }
}

TEST(Half, Fp32ToBf16RoundsLikeReferenceOnRandomFloats) {
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  int mismatches = 0;
  for (float f : random_floats(seed, 300000, /*f16_range=*/false)) {
    const uint16_t want = ref_fp32_to_bf16(f);
    const uint16_t got = fp32_to_bf16(f);
    if (got != want && ++mismatches <= 5) {
      ADD_FAILURE() << std::hexfloat << f << ": got " << std::hex << got << " want " << want;
    }
  }
  EXPECT_EQ(mismatches, 0);
}

TEST(Half, Fp32ToBf16TiesGoToEvenAtEveryHalfwayPoint) {
  for (uint16_t lo = 0; lo < 0x7f80; ++lo) {
    const auto hi = static_cast<uint16_t>(lo + 1);
    const double hi_val = hi == 0x7f80 ? std::ldexp(1.0, 128) : bf16_value(hi);
    const double mid = (bf16_value(lo) + hi_val) / 2;
    const auto fmid = static_cast<float>(mid);
    ASSERT_EQ(static_cast<double>(fmid), mid);
    const uint16_t even = (lo & 1) ? hi : lo;
    for (uint16_t sign : {uint16_t{0}, uint16_t{0x8000}}) {
      const float s = sign ? -1.0f : 1.0f;
      ASSERT_EQ(fp32_to_bf16(s * fmid), sign | even) << std::hex << lo;
      ASSERT_EQ(fp32_to_bf16(s * std::nextafter(fmid, 0.0f)), sign | lo) << std::hex << lo;
      ASSERT_EQ(fp32_to_bf16(s * std::nextafter(fmid, INFINITY)), sign | hi) << std::hex << lo;
    }
  }
}

TEST(Half, Fp32ToBf16SpecialValues) {
  EXPECT_EQ(fp32_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(fp32_to_bf16(-0.0f), 0x8000);
  EXPECT_EQ(fp32_to_bf16(std::numeric_limits<float>::max()), 0x7f80);  // rounds past 0x7f7f
  EXPECT_EQ(fp32_to_bf16(-std::numeric_limits<float>::max()), 0xff80);
  EXPECT_EQ(fp32_to_bf16(INFINITY), 0x7f80);
  EXPECT_EQ(fp32_to_bf16(-INFINITY), 0xff80);
  EXPECT_EQ(fp32_to_bf16(std::bit_cast<float>(0x7f7f7fffu)), 0x7f7f);
  // f32 subnormals are bf16 subnormals; rounding works the same there.
  EXPECT_EQ(fp32_to_bf16(std::bit_cast<float>(0x00018000u)), 0x0002);  // tie: 1 is odd
  EXPECT_EQ(fp32_to_bf16(std::bit_cast<float>(0x00008000u)), 0x0000);  // tie: 0 is even
  EXPECT_EQ(fp32_to_bf16(std::bit_cast<float>(0x00008001u)), 0x0001);
  for (uint32_t bits : {0x7fc00000u, 0x7f800001u, 0xff800001u, 0x7f80ffffu}) {
    const uint16_t h = fp32_to_bf16(std::bit_cast<float>(bits));
    EXPECT_TRUE(bf16_is_nan(h)) << std::hex << bits;
    EXPECT_TRUE(h & 0x0040) << std::hex << bits;
    EXPECT_EQ((h & 0x8000) != 0, (bits >> 31) != 0) << std::hex << bits;
  }
}

TEST(Half, RowFunctionsMatchScalarOnes) {
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  for (int64_t n : {0, 1, 7, 64, 1001}) {
    std::vector<float> src = random_floats(seed + static_cast<uint32_t>(n), static_cast<int>(n),
                                           /*f16_range=*/true);
    std::vector<uint16_t> h16(n), b16(n);
    std::vector<float> back16(n), backb(n);
    fp32_to_fp16_row(src.data(), h16.data(), n);
    fp32_to_bf16_row(src.data(), b16.data(), n);
    fp16_to_fp32_row(h16.data(), back16.data(), n);
    bf16_to_fp32_row(b16.data(), backb.data(), n);
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_EQ(h16[i], fp32_to_fp16(src[i])) << i;
      ASSERT_EQ(b16[i], fp32_to_bf16(src[i])) << i;
      ASSERT_EQ(std::bit_cast<uint32_t>(back16[i]), std::bit_cast<uint32_t>(fp16_to_fp32(h16[i])));
      ASSERT_EQ(std::bit_cast<uint32_t>(backb[i]), std::bit_cast<uint32_t>(bf16_to_fp32(b16[i])));
    }
  }
}

TEST(Half, ConversionsAreConstexpr) {
  static_assert(fp32_to_fp16(1.0f) == 0x3c00);
  static_assert(fp16_to_fp32(0x0001) == 0x1p-24f);
  static_assert(fp32_to_bf16(-2.0f) == 0xc000);
  static_assert(bf16_to_fp32(0x3f80) == 1.0f);
  SUCCEED();
}

}  // namespace
}  // namespace tessera
