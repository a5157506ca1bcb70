// K-quant super-blocks (Q4_K, Q5_K, Q6_K: 256 elements, GGUF layout, see
// src/core/quants.h) read in place by the CUDA kernels: one element as a
// float (GET_ROWS, dequantization for cuBLAS) and one 32-element sub-block
// against a block of int8 activations (decode's matrix-vector product).
//
// Host and device code alike: compiled by nvcc into the kernels and by the
// host compiler into tests/backends/cuda_kquants_test.cpp, which checks every
// function here against the CPU's reference dequantization on random blocks,
// so the block arithmetic is tested on machines without a GPU. Loads are
// bytewise: Q6_K's 210-byte blocks are only 2-byte aligned.
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#include <cuda_fp16.h>
#define TESSERA_HD __host__ __device__ __forceinline__
#else
#define TESSERA_HD inline
#endif

namespace tessera::cuda::kq {

// GGUF type ids (as DType and the kernels' Type).
inline constexpr uint32_t kQ4K = 12, kQ5K = 13, kQ6K = 14;
inline constexpr int kSuper = 256;  // elements per super-block
inline constexpr int kSub = 32;     // elements per activation block (and Q4_K / Q5_K sub-block)

TESSERA_HD bool is_kquant(uint32_t type) { return type == kQ4K || type == kQ5K || type == kQ6K; }

TESSERA_HD int block_bytes(uint32_t type) {
  return type == kQ4K ? 144 : type == kQ5K ? 176 : type == kQ6K ? 210 : 0;
}

TESSERA_HD float half_bits(const uint8_t* p) {
  const auto h = static_cast<uint16_t>(p[0] | (p[1] << 8));
#if defined(__CUDA_ARCH__)
  return __half2float(__ushort_as_half(h));
#else
  // IEEE binary16 -> binary32: sign, exponent rebias, subnormals normalized.
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
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
#endif
}

// Sum of four int8 products packed in two words (dp4a on the GPU).
TESSERA_HD int dot4(int a, int b, int acc) {
#if defined(__CUDA_ARCH__)
  return __dp4a(a, b, acc);
#else
  for (int i = 0; i < 4; ++i) {
    acc += static_cast<int8_t>(static_cast<uint32_t>(a) >> (8 * i)) *
           static_cast<int8_t>(static_cast<uint32_t>(b) >> (8 * i));
  }
  return acc;
#endif
}

TESSERA_HD int pack4(int b0, int b1, int b2, int b3) {
  return static_cast<int>((static_cast<uint32_t>(b0) & 0xffu) | ((static_cast<uint32_t>(b1) & 0xffu) << 8) |
                          ((static_cast<uint32_t>(b2) & 0xffu) << 16) |
                          ((static_cast<uint32_t>(b3) & 0xffu) << 24));
}

// Q4_K / Q5_K: the 6-bit scale and min of sub-block j (0..7), from the 12
// packed bytes at `s`.
TESSERA_HD void scale_min(const uint8_t* s, int j, int& sc, int& m) {
  if (j < 4) {
    sc = s[j] & 63;
    m = s[j + 4] & 63;
  } else {
    sc = (s[j + 4] & 0x0f) | ((s[j - 4] >> 6) << 4);
    m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
  }
}

// The unsigned quant of element l (0..31) of sub-block j: Q4_K / Q5_K 0..31,
// Q6_K 0..63 (before the -32 offset).
TESSERA_HD int quant(const uint8_t* b, uint32_t type, int j, int l) {
  if (type == kQ6K) {
    // Element e = 128 h + 32 g + l: low nibble g / 2 of ql[64 h + 32 (g % 2) + l],
    // high bits 2g..2g+1 of qh[32 h + l].
    const int h = j / 4, g = j % 4;
    const int low = (b[64 * h + 32 * (g % 2) + l] >> (4 * (g / 2))) & 0x0f;
    const int high = (b[128 + 32 * h + l] >> (2 * g)) & 3;
    return low | (high << 4);
  }
  // Element e = 64 c + 32 k + l (j = 2c + k): nibble k of qs[32 c + l].
  const int qs = type == kQ4K ? 16 : 48;
  const int c = j / 2, k = j % 2;
  int q = (b[qs + 32 * c + l] >> (4 * k)) & 0x0f;
  if (type == kQ5K) q |= ((b[16 + l] >> j) & 1) << 4;  // bit j of qh[l]
  return q;
}

// Element e (0..255) of the super-block at `b`.
TESSERA_HD float value(const uint8_t* b, uint32_t type, int e) {
  const int j = e / kSub, l = e % kSub;
  if (type == kQ6K) {
    const float d = half_bits(b + 208);
    const auto sc = static_cast<int8_t>(b[192 + e / 16]);
    return d * static_cast<float>(sc) * static_cast<float>(quant(b, type, j, l) - 32);
  }
  int sc, m;
  scale_min(b + 4, j, sc, m);
  const float d = half_bits(b) * static_cast<float>(sc), dm = half_bits(b + 2) * static_cast<float>(m);
  return d * static_cast<float>(quant(b, type, j, l)) - dm;
}

// Sub-block j (0..7) of a super-block, unpacked once for several activation
// columns: its 32 unsigned quants packed four to a word, the scale of each
// half of 16 (Q4_K / Q5_K: one scale for both), the offset the quants carry
// (Q6_K: 32) and the min (Q4_K / Q5_K: dmin * m).
struct SubBlock {
  int q[8];
  float a0, a1;
  int offset;
  float bias;
};

TESSERA_HD SubBlock load_sub(const uint8_t* b, uint32_t type, int j) {
  SubBlock s{};
  for (int w = 0; w < 8; ++w) {
    const int l = 4 * w;
    s.q[w] = pack4(quant(b, type, j, l), quant(b, type, j, l + 1), quant(b, type, j, l + 2),
                   quant(b, type, j, l + 3));
  }
  if (type == kQ6K) {
    const float d = half_bits(b + 208);
    s.a0 = d * static_cast<float>(static_cast<int8_t>(b[192 + 2 * j]));
    s.a1 = d * static_cast<float>(static_cast<int8_t>(b[192 + 2 * j + 1]));
    s.offset = 32;
    s.bias = 0.0f;
  } else {
    int sc, m;
    scale_min(b + 4, j, sc, m);
    s.a0 = s.a1 = half_bits(b) * static_cast<float>(sc);
    s.offset = 0;
    s.bias = half_bits(b + 2) * static_cast<float>(m);
  }
  return s;
}

// A sub-block against 32 int8 activations xq (4-byte aligned) whose block
// scale is dx and whose int sum times dx is dx_sum (the quantize kernel's
// (scale, scaled sum) pair): per half, a (sum q x - offset sum x), times dx,
// less the min's share bias * dx_sum.
TESSERA_HD float dot(const SubBlock& s, const int8_t* xq, float dx, float dx_sum) {
  const int* x = reinterpret_cast<const int*>(xq);
  int qx0 = 0, qx1 = 0, sx0 = 0, sx1 = 0;
  for (int w = 0; w < 4; ++w) {
    qx0 = dot4(s.q[w], x[w], qx0);
    qx1 = dot4(s.q[4 + w], x[4 + w], qx1);
  }
  if (s.offset != 0) {
    for (int w = 0; w < 4; ++w) {
      sx0 = dot4(0x01010101, x[w], sx0);
      sx1 = dot4(0x01010101, x[4 + w], sx1);
    }
  }
  return dx * (s.a0 * static_cast<float>(qx0 - s.offset * sx0) +
               s.a1 * static_cast<float>(qx1 - s.offset * sx1)) -
         s.bias * dx_sum;
}

TESSERA_HD float sub_dot(const uint8_t* b, uint32_t type, int j, const int8_t* xq, float dx,
                         float dx_sum) {
  return dot(load_sub(b, type, j), xq, dx, dx_sum);
}

}  // namespace tessera::cuda::kq

#undef TESSERA_HD
