// Q4_0 and Q8_0 blocks (32 elements: an f16 scale, then 16 nibble bytes or
// 32 int8; src/core/quants.h) written and read by the CUDA kernels: the
// quantized KV cache (SET_ROWS writes rows, attention reads elements) and
// GGUF-block weights. quantize_* follow the CPU's reference quantizers step
// for step, so a cache row written on the GPU holds the bytes the CPU would
// write.
//
// Host and device code alike: tests/backends/cuda_kquants_test.cpp compiles
// this header for the host and compares the bytes and values with the CPU's
// reference on random rows, on every build.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#include <cuda_fp16.h>
#define TESSERA_QB_HD __host__ __device__ __forceinline__
#else
#define TESSERA_QB_HD inline
#endif

namespace tessera::cuda::qb {

inline constexpr uint32_t kQ4_0 = 2, kQ8_0 = 8;  // GGUF type ids
inline constexpr int kQK = 32;

TESSERA_QB_HD bool is_q4_0_or_q8_0(uint32_t type) { return type == kQ4_0 || type == kQ8_0; }
TESSERA_QB_HD int block_bytes(uint32_t type) { return type == kQ4_0 ? 18 : type == kQ8_0 ? 34 : 0; }

// f32 -> IEEE binary16 bits, rounded to nearest even.
TESSERA_QB_HD uint16_t half_from_float(float f) {
#if defined(__CUDA_ARCH__)
  return __half_as_ushort(__float2half_rn(f));
#else
  uint32_t x;
  std::memcpy(&x, &f, sizeof x);
  const auto sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t a = x & 0x7fffffffu;
  if (a > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);  // NaN
  if (a >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds past 65504
  if (a < 0x38800000u) {  // below 2^-14: a subnormal half, in units of 2^-24 (exact scaling)
    float v;
    std::memcpy(&v, &a, sizeof v);
    return static_cast<uint16_t>(sign | static_cast<uint16_t>(std::nearbyint(v * 16777216.0f)));
  }
  const uint32_t m = a - 0x38000000u;  // exponent rebiased from 127 to 15
  return static_cast<uint16_t>(sign | ((m + 0x0fffu + ((m >> 13) & 1u)) >> 13));
#endif
}

TESSERA_QB_HD float half_to_float(const uint8_t* p) {
  const auto h = static_cast<uint16_t>(p[0] | (p[1] << 8));
#if defined(__CUDA_ARCH__)
  return __half2float(__ushort_as_half(h));
#else
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu, man = h & 0x3ffu, bits;
  if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (man << 13);
  } else if (exp != 0) {
    bits = sign | ((exp + 112) << 23) | (man << 13);
  } else if (man == 0) {
    bits = sign;
  } else {
    exp = 113;
    while ((man & 0x400u) == 0) {
      man <<= 1;
      --exp;
    }
    bits = sign | (exp << 23) | ((man & 0x3ffu) << 13);
  }
  float v;
  std::memcpy(&v, &bits, sizeof v);
  return v;
#endif
}

// p: a block's first byte, 2-byte aligned (ops.cpp's plain_blocks asks even
// strides and addresses of every cache and weight in blocks).
TESSERA_QB_HD void put_half(uint8_t* p, float v) {
  const uint16_t h = half_from_float(v);
#if defined(__CUDA_ARCH__)
  // One 16-bit store. Two byte stores, as the host does below, came out of
  // nvcc 13.0 for sm_90 as `st.u8 [p], h` with h the cvt.rn.f16.f32 result,
  // and on an H200 the low byte landed as 0 (every Q8_0 / Q4_0 scale lost
  // its 8 low mantissa bits; cuda_test QuantizedCopiesHoldTheCpusBytes).
  *reinterpret_cast<uint16_t*>(p) = h;
#else
  p[0] = static_cast<uint8_t>(h & 0xffu);
  p[1] = static_cast<uint8_t>(h >> 8);
#endif
}

// 32 floats -> one Q8_0 block: d = amax / 127, q = round-half-away(x / d).
TESSERA_QB_HD void quantize_q8_0(const float* x, uint8_t* block) {
  float amax = 0.0f;
  for (int j = 0; j < kQK; ++j) amax = fmaxf(amax, fabsf(x[j]));
  const float d = amax / 127.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  put_half(block, d);
  for (int j = 0; j < kQK; ++j) {
    const float r = roundf(x[j] * id);
    int q = 0;
    if (!(r >= -127.0f)) {
      q = r < 0.0f ? -127 : 0;  // NaN to 0
    } else {
      q = static_cast<int>(r > 127.0f ? 127.0f : r);
    }
    block[2 + j] = static_cast<uint8_t>(static_cast<int8_t>(q));
  }
}

// 32 floats -> one Q4_0 block: the largest-magnitude element maps to -8,
// q = trunc(x / d + 8.5) clamped to 0..15; element j in the low nibble of
// byte j, element j + 16 in its high nibble.
TESSERA_QB_HD void quantize_q4_0(const float* x, uint8_t* block) {
  float amax = 0.0f, max = 0.0f;
  for (int j = 0; j < kQK; ++j) {
    if (fabsf(x[j]) > amax) {
      amax = fabsf(x[j]);
      max = x[j];
    }
  }
  const float d = max / -8.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  put_half(block, d);
  const auto code = [](float v) {
    if (!(v >= 1.0f)) return 0;
    if (v >= 15.0f) return 15;
    return static_cast<int>(v);
  };
  for (int j = 0; j < kQK / 2; ++j) {
    const int lo = code(x[j] * id + 8.5f), hi = code(x[j + kQK / 2] * id + 8.5f);
    block[2 + j] = static_cast<uint8_t>(lo | (hi << 4));
  }
}

// Element j (0..31) of a Q4_0 or Q8_0 block, as a float.
TESSERA_QB_HD float value(const uint8_t* block, uint32_t type, int j) {
  const float d = half_to_float(block);
  const uint8_t* q = block + 2;
  if (type == kQ4_0) {
    const uint8_t byte = q[j % 16];
    return static_cast<float>((j < 16 ? (byte & 0x0f) : (byte >> 4)) - 8) * d;
  }
  return static_cast<float>(static_cast<int8_t>(q[j])) * d;
}

}  // namespace tessera::cuda::qb

#undef TESSERA_QB_HD
