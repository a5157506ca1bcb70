// The blocks llama-quantize's K and IQ4 mixes write (Q2_K, Q3_K, Q4_K, Q5_K,
// Q6_K, IQ4_XS: super-blocks of 256; IQ4_NL, and Q4_1 / Q5_0 / Q5_1, which
// it writes for rows that 256 does not divide: blocks of 32), and MXFP4
// (gpt-oss's experts: blocks of 32 under an E8M0 scale); GGUF layouts,
// see src/core/quants.h), read in place by the CUDA kernels: one element as a
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

#include "cuda/ops/quant_blocks.cuh"

#if defined(__CUDACC__)
#define TESSERA_HD __host__ __device__ __forceinline__
#else
#define TESSERA_HD inline
#endif

namespace tessera::cuda::kq {

// GGUF type ids (as DType and the kernels' Type).
inline constexpr uint32_t kQ4_1 = 3, kQ5_0 = 6, kQ5_1 = 7, kQ2K = 10, kQ3K = 11, kQ4K = 12,
                          kQ5K = 13, kQ6K = 14, kIQ4NL = 20, kIQ4XS = 23, kMXFP4 = 39;
inline constexpr int kSuper = 256;  // elements per super-block
inline constexpr int kSub = 32;     // elements per sub-block and per activation block

TESSERA_HD bool is_kquant(uint32_t type) {
  return type == kQ2K || type == kQ3K || type == kQ4K || type == kQ5K || type == kQ6K ||
         type == kIQ4NL || type == kIQ4XS || type == kQ4_1 || type == kQ5_0 || type == kQ5_1 ||
         type == kMXFP4;
}

TESSERA_HD int block_bytes(uint32_t type) {
  switch (type) {
    case kQ2K: return 84;
    case kQ3K: return 110;
    case kQ4K: return 144;
    case kQ5K: return 176;
    case kQ6K: return 210;
    case kIQ4NL: return 18;
    case kIQ4XS: return 136;
    case kQ4_1: return 20;
    case kQ5_0: return 22;
    case kQ5_1: return 24;
    case kMXFP4: return 17;
    default: return 0;
  }
}

// Elements per block: 256, or 32 for IQ4_NL, Q4_1, Q5_0, Q5_1 and MXFP4.
TESSERA_HD int block_elems(uint32_t type) {
  return type == kIQ4NL || type == kQ4_1 || type == kQ5_0 || type == kQ5_1 || type == kMXFP4 ? kSub
                                                                                               : kSuper;
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

// IQ4_NL / IQ4_XS: the value code q (a nibble) stands for, as int8.
TESSERA_HD int iq4_value(int q) {
  // -127 -104 -83 -65 -49 -35 -22 -10 | 1 13 25 38 53 69 89 113, a byte each.
  const uint64_t half = q < 8 ? 0xF6EADDCFBFAD9881ull : 0x7159453526190D01ull;
  return static_cast<int8_t>(static_cast<uint8_t>(half >> (8 * (q & 7))));
}

// MXFP4: the doubled e2m1 value code q (a nibble) stands for, as int8
// (0 1 2 3 4 6 8 12, then the same negated), packed as iq4_value's.
TESSERA_HD int mxfp4_value(int q) {
  const uint64_t half = q < 8 ? 0x0C08060403020100ull : 0xF4F8FAFCFDFEFF00ull;
  return static_cast<int8_t>(static_cast<uint8_t>(half >> (8 * (q & 7))));
}

// MXFP4: half the value of E8M0 exponent e, 2^(e - 128), exactly (the scale
// of the doubled codes; subnormal for e < 2), as the CPU's e8m0_to_fp32_half.
TESSERA_HD float e8m0_half(int e) {
  const uint32_t bits = e < 2 ? 0x00200000u << e : static_cast<uint32_t>(e - 1) << 23;
#if defined(__CUDA_ARCH__)
  return __uint_as_float(bits);
#else
  float v;
  std::memcpy(&v, &bits, sizeof v);
  return v;
#endif
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

// Q3_K: the signed 6-bit scale of 16-element group g (0..15).
TESSERA_HD int q3_scale(const uint8_t* b, int g) {
  const uint8_t* s = b + 96;
  const int low = (s[g % 8] >> (4 * (g / 8))) & 0x0f;
  const int high = (s[8 + g % 4] >> (2 * (g / 4))) & 3;
  return (low | (high << 4)) - 32;
}

// Element l (0..31) of sub-block j as the integer the dot products use:
// x = a * (q - offset) - bias (SubParams below). Q2_K 0..3, Q3_K 0..7,
// Q4_K 0..15, Q5_K 0..31, Q6_K 0..63, IQ4 the signed value of its code.
TESSERA_HD int quant(const uint8_t* b, uint32_t type, int j, int l) {
  switch (type) {
    case kQ2K:
    case kQ3K: {
      // Element e = 128 h + 32 g + l (j = 4 h + g): bits 2g of qs[32 h + l];
      // Q3_K's third bit is bit j of hmask[l].
      const int h = j / 4, g = j % 4;
      const int q = (b[(type == kQ2K ? 16 : 32) + 32 * h + l] >> (2 * g)) & 3;
      return type == kQ2K ? q : q | (((b[l] >> j) & 1) << 2);
    }
    case kQ6K: {
      // Element e = 128 h + 32 g + l: low nibble g / 2 of ql[64 h + 32 (g % 2) + l],
      // high bits 2g..2g+1 of qh[32 h + l].
      const int h = j / 4, g = j % 4;
      const int low = (b[64 * h + 32 * (g % 2) + l] >> (4 * (g / 2))) & 0x0f;
      const int high = (b[128 + 32 * h + l] >> (2 * g)) & 3;
      return low | (high << 4);
    }
    case kIQ4NL:
    case kIQ4XS: {
      // 16 bytes of codes per 32 elements: l < 16 low nibbles, l >= 16 high.
      const uint8_t* qs = type == kIQ4NL ? b + 2 : b + 8 + 16 * j;
      return iq4_value(l < 16 ? qs[l] & 0x0f : qs[l - 16] >> 4);
    }
    case kMXFP4: {
      // An E8M0 byte, then 16 bytes of codes laid out as IQ4_NL's.
      const uint8_t* qs = b + 1;
      return mxfp4_value(l < 16 ? qs[l] & 0x0f : qs[l - 16] >> 4);
    }
    case kQ4_1:
    case kQ5_0:
    case kQ5_1: {
      // Nibbles as Q4_0's; Q5's fifth bit of element l is bit l of qh (LE).
      const uint8_t* qs = b + (type == kQ4_1 ? 4 : type == kQ5_0 ? 6 : 8);
      int q = l < 16 ? qs[l] & 0x0f : qs[l - 16] >> 4;
      if (type != kQ4_1) {
        const uint8_t* qh = b + (type == kQ5_0 ? 2 : 4);
        q |= ((qh[l / 8] >> (l % 8)) & 1) << 4;
      }
      return q;
    }
    default: {
      // Q4_K / Q5_K: element e = 64 c + 32 k + l (j = 2c + k) is nibble k of
      // qs[32 c + l]; Q5_K's fifth bit is bit j of qh[l].
      const int c = j / 2, k = j % 2;
      int q = (b[(type == kQ4K ? 16 : 48) + 32 * c + l] >> (4 * k)) & 0x0f;
      if (type == kQ5K) q |= ((b[16 + l] >> j) & 1) << 4;
      return q;
    }
  }
}

// Sub-block j's arithmetic, per half of 16 elements: x = a * (q - offset) - bias.
struct SubParams {
  float a0, a1;
  int offset;
  float b0, b1;
};

TESSERA_HD SubParams params(const uint8_t* b, uint32_t type, int j) {
  SubParams p{};
  switch (type) {
    case kQ2K: {
      const float d = qb::half_to_float(b + 80), dmin = qb::half_to_float(b + 82);
      const int s0 = b[2 * j], s1 = b[2 * j + 1];
      p.a0 = d * static_cast<float>(s0 & 15);
      p.a1 = d * static_cast<float>(s1 & 15);
      p.b0 = dmin * static_cast<float>(s0 >> 4);
      p.b1 = dmin * static_cast<float>(s1 >> 4);
      break;
    }
    case kQ3K: {
      const float d = qb::half_to_float(b + 108);
      p.a0 = d * static_cast<float>(q3_scale(b, 2 * j));
      p.a1 = d * static_cast<float>(q3_scale(b, 2 * j + 1));
      p.offset = 4;
      break;
    }
    case kQ6K: {
      const float d = qb::half_to_float(b + 208);
      p.a0 = d * static_cast<float>(static_cast<int8_t>(b[192 + 2 * j]));
      p.a1 = d * static_cast<float>(static_cast<int8_t>(b[192 + 2 * j + 1]));
      p.offset = 32;
      break;
    }
    case kIQ4NL:
      p.a0 = p.a1 = qb::half_to_float(b);
      break;
    case kMXFP4:
      p.a0 = p.a1 = e8m0_half(b[0]);
      break;
    case kQ4_1:
    case kQ5_1:  // x = d q + m
      p.a0 = p.a1 = qb::half_to_float(b);
      p.b0 = p.b1 = -qb::half_to_float(b + 2);
      break;
    case kQ5_0:  // x = d (q - 16)
      p.a0 = p.a1 = qb::half_to_float(b);
      p.offset = 16;
      break;
    case kIQ4XS: {
      const int scales_h = b[2] | (b[3] << 8);
      const int ls = ((b[4 + j / 2] >> (4 * (j % 2))) & 0x0f) | (((scales_h >> (2 * j)) & 3) << 4);
      p.a0 = p.a1 = qb::half_to_float(b) * static_cast<float>(ls - 32);
      break;
    }
    default: {  // Q4_K, Q5_K
      int sc, m;
      scale_min(b + 4, j, sc, m);
      p.a0 = p.a1 = qb::half_to_float(b) * static_cast<float>(sc);
      p.b0 = p.b1 = qb::half_to_float(b + 2) * static_cast<float>(m);
      break;
    }
  }
  return p;
}

// Element e of the block at `b` (e < block_elems(type)).
TESSERA_HD float value(const uint8_t* b, uint32_t type, int e) {
  const int j = e / kSub, l = e % kSub;
  const SubParams p = params(b, type, j);
  const bool first = l < 16;
  return (first ? p.a0 : p.a1) * static_cast<float>(quant(b, type, j, l) - p.offset) -
         (first ? p.b0 : p.b1);
}

// Sub-block j unpacked once for several activation columns: its 32 quants
// packed four to a word (as int8), and its arithmetic.
struct SubBlock {
  int q[8];
  SubParams p;
};

TESSERA_HD SubBlock load_sub(const uint8_t* b, uint32_t type, int j) {
  SubBlock s{};
  for (int w = 0; w < 8; ++w) {
    const int l = 4 * w;
    s.q[w] = pack4(quant(b, type, j, l), quant(b, type, j, l + 1), quant(b, type, j, l + 2),
                   quant(b, type, j, l + 3));
  }
  s.p = params(b, type, j);
  return s;
}

// A sub-block against 32 int8 activations xq (4-byte aligned) of block scale
// dx: per half, a (sum q x - offset sum x) - bias sum x, all times dx.
TESSERA_HD float dot(const SubBlock& s, const int8_t* xq, float dx) {
  const int* x = reinterpret_cast<const int*>(xq);
  int qx0 = 0, qx1 = 0, sx0 = 0, sx1 = 0;
  for (int w = 0; w < 4; ++w) {
    qx0 = dot4(s.q[w], x[w], qx0);
    qx1 = dot4(s.q[4 + w], x[4 + w], qx1);
    sx0 = dot4(0x01010101, x[w], sx0);
    sx1 = dot4(0x01010101, x[4 + w], sx1);
  }
  const SubParams& p = s.p;
  return dx * (p.a0 * static_cast<float>(qx0 - p.offset * sx0) - p.b0 * static_cast<float>(sx0) +
               p.a1 * static_cast<float>(qx1 - p.offset * sx1) - p.b1 * static_cast<float>(sx1));
}

TESSERA_HD float sub_dot(const uint8_t* b, uint32_t type, int j, const int8_t* xq, float dx) {
  return dot(load_sub(b, type, j), xq, dx);
}

}  // namespace tessera::cuda::kq

#undef TESSERA_HD
