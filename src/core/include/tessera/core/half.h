// IEEE binary16 (f16) and bfloat16 (bf16) conversions, portable scalar code.
//
// fp32 -> 16-bit rounds to nearest, ties to even; overflow gives Inf; NaN stays
// NaN (made quiet, sign and top payload bits kept); f16 subnormals are exact.
// 16-bit -> fp32 is exact. SIMD versions belong to the CPU backend's kernels;
// these are the reference they are tested against.
#pragma once

#include <bit>
#include <cstdint>

namespace tessera {

constexpr float fp16_to_fp32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  if (exp == 0x1f) {  // Inf or NaN: keep the payload
    return std::bit_cast<float>(sign | 0x7f800000u | (mant << 13));
  }
  if (exp == 0) {
    if (mant == 0) return std::bit_cast<float>(sign);
    // Subnormal mant * 2^-24: normalize so the leading 1 becomes implicit.
    const int width = std::bit_width(mant);  // 1..10
    mant = (mant << (24 - width)) & 0x7fffffu;
    return std::bit_cast<float>(sign | (static_cast<uint32_t>(width + 102) << 23) | mant);
  }
  return std::bit_cast<float>(sign | ((exp + 112) << 23) | (mant << 13));
}

constexpr uint16_t fp32_to_fp16(float f) {
  const uint32_t bits = std::bit_cast<uint32_t>(f);
  const uint32_t sign = (bits >> 16) & 0x8000u;
  const uint32_t abs = bits & 0x7fffffffu;
  if (abs > 0x7f800000u) {  // NaN: quiet bit set, so the payload never truncates to Inf
    return static_cast<uint16_t>(sign | 0x7e00u | ((abs >> 13) & 0x3ffu));
  }
  if (abs >= 0x47800000u) return static_cast<uint16_t>(sign | 0x7c00u);  // >= 2^16 or Inf
  if (abs < 0x38800000u) {  // below 2^-14: f16 subnormal or zero, in units of 2^-24
    if (abs <= 0x33000000u) return static_cast<uint16_t>(sign);  // <= 2^-25 rounds to 0
    const uint32_t exp = abs >> 23;                              // 102..112
    const uint32_t mant = (abs & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126 - exp;  // 14..24
    uint32_t q = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1);
    const uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (q & 1u))) ++q;  // may carry into the smallest normal
    return static_cast<uint16_t>(sign | q);
  }
  // Normal: rebias the exponent, drop 13 mantissa bits with rounding. A carry out
  // of the mantissa bumps the exponent, and out of 65504 gives Inf (0x7c00).
  uint32_t h = (abs >> 13) - (112u << 10);
  const uint32_t rem = abs & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;
  return static_cast<uint16_t>(sign | h);
}

constexpr float bf16_to_fp32(uint16_t h) {
  return std::bit_cast<float>(static_cast<uint32_t>(h) << 16);
}

constexpr uint16_t fp32_to_bf16(float f) {
  const uint32_t bits = std::bit_cast<uint32_t>(f);
  if ((bits & 0x7fffffffu) > 0x7f800000u) {  // NaN: truncating could leave Inf
    return static_cast<uint16_t>((bits >> 16) | 0x0040u);
  }
  // Adding 0x7fff plus the kept LSB rounds to nearest, ties to even; the carry
  // propagates into the exponent and past the largest finite value to Inf.
  return static_cast<uint16_t>((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
}

// Row versions: convert n elements.
void fp16_to_fp32_row(const uint16_t* src, float* dst, int64_t n);
void fp32_to_fp16_row(const float* src, uint16_t* dst, int64_t n);
void bf16_to_fp32_row(const uint16_t* src, float* dst, int64_t n);
void fp32_to_bf16_row(const float* src, uint16_t* dst, int64_t n);

}  // namespace tessera
