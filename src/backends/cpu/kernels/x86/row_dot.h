// Quantized weights in GGUF row layout times quantized activations, with
// 256-bit integer dot products. The tier supplies D::dot(acc, u8, s8): acc
// plus, per 32-bit lane, the exact sum of 4 byte products (AVX2 maddubs +
// madd, or VNNI vpdpbusd), and D::dot_scaled(acc, u8, s8, lo, hi): the same
// sums times lo (lanes 0-3) or hi (lanes 4-7).
//
// Legacy 32-blocks (Q8 activations): per block, sum_k (d q_k + m) d_a a_k =
// d d_a dot(q, a) + m d_a sum(a). Q4_0 / Q5_0 have m = -8d / -16d: folded
// into the integer dot as -8 sum(a) so those stay exact. Q8_0 is signed:
// dot(|w|, sign(a, w)), no offset.
// K-quants (Q8_K activations): scales applied in the integer domain per
// sub-block, one float multiply per 256 elements; minimums via bsums.
// Each weight block is unpacked once and dotted with up to kCols columns.
// Include after the tier's D policy; internal linkage per tier.
#pragma once

#include <immintrin.h>

#include <cstring>
#include <utility>

#include "cpu/kernels/kernels.h"
#include "cpu/kernels/x86/fn_table.h"

namespace tessera::cpu {
namespace {

inline float f16_scalar(uint16_t h) {
  return _cvtsh_ss(h);
}

inline float hsum8(__m256 v) {
  const __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 t = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(t, _mm_movehdup_ps(t)));
}

inline __m256i nibbles_32(const uint8_t* qs) {  // 16 bytes -> elements 0..15 low, 16..31 high
  const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  const __m128i m = _mm_set1_epi8(0x0F);
  return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(v, 4), m), _mm_and_si128(v, m));
}

// Bit j of the little-endian 32 bits at qh, as 0x10 in byte j.
inline __m256i high_bits_32(const uint8_t* qh) {
  uint32_t bits;
  std::memcpy(&bits, qh, sizeof bits);
  const __m256i spread =
      _mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int>(bits)),
                          _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2,
                                           2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3));
  const __m256i select = _mm256_set1_epi64x(0x8040201008040201);
  const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(spread, select), select);
  return _mm256_and_si256(set, _mm256_set1_epi8(0x10));
}

// The 8 six-bit scales and mins of a Q4_K block (layout: scale_min_k4 in
// core/quants.h, which is not called here: an inline function built with
// this tier's flags could be picked by the linker for other callers).
inline void unpack_scales_k4(const uint8_t* s, uint8_t* sc, uint8_t* mn) {
  for (int j = 0; j < 4; ++j) {
    sc[j] = s[j] & 63;
    mn[j] = s[j + 4] & 63;
    sc[j + 4] = static_cast<uint8_t>((s[j + 8] & 0xF) | ((s[j] >> 6) << 4));
    mn[j + 4] = static_cast<uint8_t>((s[j + 8] >> 4) | ((s[j + 4] >> 6) << 4));
  }
}

// One decoded legacy block: 32 weights in element order, d, and m (min formats).
struct Decoded {
  __m256i q;
  float d;
  float m;
};

struct FmtQ4_0 {
  static constexpr bool kSigned = false, kHasMin = false;
  static constexpr int kOffset = 8;
  static constexpr size_t kBytes = sizeof(block_q4_0);
  static Decoded decode(const uint8_t* p) {
    const auto* b = reinterpret_cast<const block_q4_0*>(p);
    return {nibbles_32(b->qs), f16_scalar(b->d), 0.0f};
  }
};
struct FmtQ4_1 {
  static constexpr bool kSigned = false, kHasMin = true;
  static constexpr int kOffset = 0;
  static constexpr size_t kBytes = sizeof(block_q4_1);
  static Decoded decode(const uint8_t* p) {
    const auto* b = reinterpret_cast<const block_q4_1*>(p);
    return {nibbles_32(b->qs), f16_scalar(b->d), f16_scalar(b->m)};
  }
};
struct FmtQ5_0 {
  static constexpr bool kSigned = false, kHasMin = false;
  static constexpr int kOffset = 16;
  static constexpr size_t kBytes = sizeof(block_q5_0);
  static Decoded decode(const uint8_t* p) {
    const auto* b = reinterpret_cast<const block_q5_0*>(p);
    return {_mm256_or_si256(nibbles_32(b->qs), high_bits_32(b->qh)), f16_scalar(b->d), 0.0f};
  }
};
struct FmtQ5_1 {
  static constexpr bool kSigned = false, kHasMin = true;
  static constexpr int kOffset = 0;
  static constexpr size_t kBytes = sizeof(block_q5_1);
  static Decoded decode(const uint8_t* p) {
    const auto* b = reinterpret_cast<const block_q5_1*>(p);
    return {_mm256_or_si256(nibbles_32(b->qs), high_bits_32(b->qh)), f16_scalar(b->d),
            f16_scalar(b->m)};
  }
};
struct FmtQ8_0 {
  static constexpr bool kSigned = true, kHasMin = false;
  static constexpr int kOffset = 0;
  static constexpr size_t kBytes = sizeof(block_q8_0);
  static Decoded decode(const uint8_t* p) {
    const auto* b = reinterpret_cast<const block_q8_0*>(p);
    return {_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b->qs)), f16_scalar(b->d), 0.0f};
  }
};

inline const uint8_t* column(const MatArgs& a, int64_t c) {
  return a.x + static_cast<size_t>(c) * a.x_stride;
}
inline float& output(const MatArgs& a, int64_t r, int64_t c) {
  return reinterpret_cast<float*>(reinterpret_cast<uint8_t*>(a.out) +
                                  static_cast<size_t>(c) * a.out_stride)[r];
}

// Row r times columns c0 .. c0 + C.
template <class D, class Fmt, int C>
void legacy_row(const MatArgs& a, int64_t r, int64_t c0) {
  const uint8_t* w = a.w + static_cast<size_t>(r) * a.w_stride;
  const BlockQ8* x[C];
  for (int c = 0; c < C; ++c) x[c] = reinterpret_cast<const BlockQ8*>(column(a, c0 + c));
  __m256 acc[C];
  float acc_min[C];
  for (int c = 0; c < C; ++c) {
    acc[c] = _mm256_setzero_ps();
    acc_min[c] = 0.0f;
  }
  const int64_t nb = a.k / kQK;
  for (int64_t b = 0; b < nb; ++b) {
    const Decoded blk = Fmt::decode(w + static_cast<size_t>(b) * Fmt::kBytes);
    const __m256i q = Fmt::kSigned ? _mm256_sign_epi8(blk.q, blk.q) : blk.q;  // |w|
    for (int c = 0; c < C; ++c) {
      const BlockQ8& xb = x[c][b];
      __m256i av = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb.qs));
      if constexpr (Fmt::kSigned) av = _mm256_sign_epi8(av, blk.q);
      __m256i s = _mm256_setzero_si256();
      if constexpr (Fmt::kOffset != 0) {
        s = _mm256_zextsi128_si256(_mm_cvtsi32_si128(-Fmt::kOffset * xb.sum));
      }
      s = D::dot(s, q, av);
      acc[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_set1_ps(blk.d * xb.d), acc[c]);
      if constexpr (Fmt::kHasMin) acc_min[c] += blk.m * xb.d * static_cast<float>(xb.sum);
    }
  }
  for (int c = 0; c < C; ++c) output(a, r, c0 + c) = hsum8(acc[c]) + acc_min[c];
}

// Q4_K: 8 sub-blocks of 32, x = d sc q - dmin m.
template <class D, int C>
void q4_k_row(const MatArgs& a, int64_t r, int64_t c0) {
  const auto* w = reinterpret_cast<const block_q4_K*>(a.w + static_cast<size_t>(r) * a.w_stride);
  const block_q8_K* x[C];
  for (int c = 0; c < C; ++c) x[c] = reinterpret_cast<const block_q8_K*>(column(a, c0 + c));
  __m256 acc[C];
  float acc_min[C];
  for (int c = 0; c < C; ++c) {
    acc[c] = _mm256_setzero_ps();
    acc_min[c] = 0.0f;
  }
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  for (int64_t b = 0; b < a.k / kQKK; ++b) {
    const block_q4_K& wb = w[b];
    uint8_t sc[8], mn[8];
    unpack_scales_k4(wb.scales, sc, mn);
    __m256i isum[C];
    for (int c = 0; c < C; ++c) isum[c] = _mm256_setzero_si256();
    for (int h = 0; h < 4; ++h) {  // 64 elements: sub-blocks 2h (low nibbles), 2h + 1 (high)
      const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wb.qs + 32 * h));
      const __m256i lo = _mm256_and_si256(v, low4);
      const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), low4);
      for (int c = 0; c < C; ++c) {
        const int8_t* qa = x[c][b].qs + 64 * h;
        const __m256i a0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qa));
        const __m256i a1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qa + 32));
        isum[c] = D::dot_scaled(isum[c], lo, a0, sc[2 * h], sc[2 * h]);
        isum[c] = D::dot_scaled(isum[c], hi, a1, sc[2 * h + 1], sc[2 * h + 1]);
      }
    }
    const float d = f16_scalar(wb.d), dmin = f16_scalar(wb.dmin);
    for (int c = 0; c < C; ++c) {
      const block_q8_K& xb = x[c][b];
      int32_t msum = 0;
      for (int j = 0; j < 8; ++j) msum += mn[j] * (xb.bsums[2 * j] + xb.bsums[2 * j + 1]);
      acc[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[c]), _mm256_set1_ps(d * xb.d), acc[c]);
      acc_min[c] -= dmin * xb.d * static_cast<float>(msum);
    }
  }
  for (int c = 0; c < C; ++c) output(a, r, c0 + c) = hsum8(acc[c]) + acc_min[c];
}

// Q6_K: 16 sub-blocks of 16 with int8 scales, x = d sc (q - 32), q 6 bits.
template <class D, int C>
void q6_k_row(const MatArgs& a, int64_t r, int64_t c0) {
  const auto* w = reinterpret_cast<const block_q6_K*>(a.w + static_cast<size_t>(r) * a.w_stride);
  const block_q8_K* x[C];
  for (int c = 0; c < C; ++c) x[c] = reinterpret_cast<const block_q8_K*>(column(a, c0 + c));
  __m256 acc[C];
  for (int c = 0; c < C; ++c) acc[c] = _mm256_setzero_ps();
  const __m256i low4 = _mm256_set1_epi8(0x0F), low2 = _mm256_set1_epi8(0x03);
  for (int64_t b = 0; b < a.k / kQKK; ++b) {
    const block_q6_K& wb = w[b];
    __m256i isum[C];
    for (int c = 0; c < C; ++c) {  // the -32 offset: -32 sum_s sc_s bsum_s, exact
      int32_t off = 0;
      for (int s = 0; s < 16; ++s) off += wb.scales[s] * x[c][b].bsums[s];
      isum[c] = _mm256_zextsi128_si256(_mm_cvtsi32_si128(-32 * off));
    }
    for (int h = 0; h < 2; ++h) {
      const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wb.qh + 32 * h));
      for (int g = 0; g < 4; ++g) {  // elements 128 h + 32 g + l, sub-blocks 8 h + 2 g (+1)
        const __m256i ql =
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wb.ql + 64 * h + 32 * (g % 2)));
        const __m256i lo =
            g < 2 ? _mm256_and_si256(ql, low4) : _mm256_and_si256(_mm256_srli_epi16(ql, 4), low4);
        const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(qh, 2 * g), low2);
        const __m256i q = _mm256_or_si256(lo, _mm256_slli_epi16(hi, 4));
        const int s = 8 * h + 2 * g;
        for (int c = 0; c < C; ++c) {
          const __m256i av =
              _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[c][b].qs + 128 * h + 32 * g));
          isum[c] = D::dot_scaled(isum[c], q, av, wb.scales[s], wb.scales[s + 1]);
        }
      }
    }
    const float d = f16_scalar(wb.d);
    for (int c = 0; c < C; ++c) {
      acc[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[c]), _mm256_set1_ps(d * x[c][b].d), acc[c]);
    }
  }
  for (int c = 0; c < C; ++c) output(a, r, c0 + c) = hsum8(acc[c]);
}

// Every row against columns in groups of up to kCols (a row's blocks are
// decoded once per group).
template <template <int> class RowFn, int kCols>
struct RowDot {
  template <size_t... I>
  static constexpr FnTable<void (*)(const MatArgs&, int64_t, int64_t), kCols> make(
      std::index_sequence<I...>) {
    return {&RowFn<static_cast<int>(I) + 1>::run...};
  }
  static void run(const MatArgs& a) {
    static constexpr auto kFns = make(std::make_index_sequence<kCols>{});
    for (int64_t c0 = 0; c0 < a.cols; c0 += kCols) {
      const int64_t nc = a.cols - c0 < kCols ? a.cols - c0 : kCols;
      for (int64_t r = 0; r < a.rows; ++r) kFns.at[static_cast<size_t>(nc - 1)](a, r, c0);
    }
  }
};

template <class D, class Fmt>
struct LegacyRow {
  template <int C>
  struct Fn {
    static void run(const MatArgs& a, int64_t r, int64_t c0) { legacy_row<D, Fmt, C>(a, r, c0); }
  };
};
template <class D>
struct Q4KRow {
  template <int C>
  struct Fn {
    static void run(const MatArgs& a, int64_t r, int64_t c0) { q4_k_row<D, C>(a, r, c0); }
  };
};
template <class D>
struct Q6KRow {
  template <int C>
  struct Fn {
    static void run(const MatArgs& a, int64_t r, int64_t c0) { q6_k_row<D, C>(a, r, c0); }
  };
};

}  // namespace
}  // namespace tessera::cpu
