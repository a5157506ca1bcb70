// 512-bit vector operations for the avx512 tier's shared templates (x86/).
// Only for translation units built with the avx512 flags (sources.cmake);
// internal linkage keeps these copies apart from the avx2 tier's.
#pragma once

#include "cpu/kernels/avx512/intrin.h"

#include <cstdint>

namespace tessera::cpu {
namespace {

struct Vec {
  using F = __m512;
  using I = __m512i;
  static constexpr int kLanes = 16;

  static __mmask16 mask(int n) { return static_cast<__mmask16>((1u << n) - 1); }

  static F zero() { return _mm512_setzero_ps(); }
  static F set1(float v) { return _mm512_set1_ps(v); }
  static F load(const float* p) { return _mm512_loadu_ps(p); }
  static void store(float* p, F v) { _mm512_storeu_ps(p, v); }
  static F load_n(const float* p, int n) { return _mm512_maskz_loadu_ps(mask(n), p); }
  static F load_f16(const uint16_t* p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  static F load_f16_n(const uint16_t* p, int n) {
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(mask(n), p));
  }
  // bf16 is the top half of an f32: widen and shift, exact.
  static F load_bf16(const uint16_t* p) {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
  static F load_bf16_n(const uint16_t* p, int n) {
    const __m256i h = _mm256_maskz_loadu_epi16(mask(n), p);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
  static void store_n(float* p, F v, int n) { _mm512_mask_storeu_ps(p, mask(n), v); }

  static F add(F a, F b) { return _mm512_add_ps(a, b); }
  static F sub(F a, F b) { return _mm512_sub_ps(a, b); }
  static F max(F a, F b) { return _mm512_max_ps(a, b); }
  static F round(F a) {
    return _mm512_roundscale_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  }
  // 2^n for integer-valued n in [-126, 127].
  static F pow2(F n) {
    const I e = _mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127));
    return _mm512_castsi512_ps(_mm512_slli_epi32(e, 23));
  }
  // a where x >= t, else 0 (NaN x: 0).
  static F zero_below(F a, F x, float t) {
    return _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(x, _mm512_set1_ps(t), _CMP_GE_OQ), a);
  }
  // y * 2^n where x >= t, else 0 (n integer-valued in [-126, 127] there):
  // one vscalefps, the same bits as y * pow2(n).
  static F scale_pow2_above(F y, F n, F x, float t) {
    return _mm512_maskz_scalef_ps(_mm512_cmp_ps_mask(x, _mm512_set1_ps(t), _CMP_GE_OQ), y, n);
  }
  // a where t is a number, t (NaN) where it is NaN.
  static F keep_nan(F a, F t) {
    return _mm512_mask_mov_ps(a, _mm512_cmp_ps_mask(t, t, _CMP_UNORD_Q), t);
  }
  static F mul(F a, F b) { return _mm512_mul_ps(a, b); }
  static F div(F a, F b) { return _mm512_div_ps(a, b); }
  static F fma(F a, F b, F c) { return _mm512_fmadd_ps(a, b, c); }
  static F abs(F a) { return _mm512_abs_ps(a); }
  // max(a, acc), returning acc where a is NaN (as std::fmax(acc, a) does).
  static F max_skip_nan(F a, F acc) { return _mm512_max_ps(a, acc); }
  // Horizontal reductions by folding 128-bit quarters (GCC 12's _mm512_reduce_*
  // trip -Wuninitialized in its own headers).
  static __m128 fold_add(F a) {
    a = _mm512_add_ps(a, _mm512_shuffle_f32x4(a, a, 0x4E));
    a = _mm512_add_ps(a, _mm512_shuffle_f32x4(a, a, 0xB1));
    return _mm512_castps512_ps128(a);
  }
  static float hsum(F a) {
    const __m128 s = fold_add(a);
    const __m128 t = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(t, _mm_movehdup_ps(t)));
  }
  // The sums of a, b, c, d as the 4 lanes of an xmm.
  static __m128 hsum4(F a, F b, F c, F d) {
    const auto fold = [](F x) {
      const __m256 y =
          _mm256_add_ps(_mm512_castps512_ps256(x),
                        _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(x), 1)));
      return _mm_add_ps(_mm256_castps256_ps128(y), _mm256_extractf128_ps(y, 1));
    };
    return _mm_hadd_ps(_mm_hadd_ps(fold(a), fold(b)), _mm_hadd_ps(fold(c), fold(d)));
  }
  // The sums of x[0..7] as the 8 lanes of a ymm: each folded to 256 bits,
  // then three rounds of pairwise adds.
  static __m256 hsum8(const F* x) {
    __m256 y[8];
    for (int i = 0; i < 8; ++i) {
      y[i] = _mm256_add_ps(_mm512_castps512_ps256(x[i]),
                           _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(x[i]), 1)));
    }
    const __m256 t0 = _mm256_hadd_ps(_mm256_hadd_ps(y[0], y[1]), _mm256_hadd_ps(y[2], y[3]));
    const __m256 t1 = _mm256_hadd_ps(_mm256_hadd_ps(y[4], y[5]), _mm256_hadd_ps(y[6], y[7]));
    return _mm256_add_ps(_mm256_permute2f128_ps(t0, t1, 0x20),
                         _mm256_permute2f128_ps(t0, t1, 0x31));
  }
  static float hmax(F a) {
    a = _mm512_max_ps(a, _mm512_shuffle_f32x4(a, a, 0x4E));
    a = _mm512_max_ps(a, _mm512_shuffle_f32x4(a, a, 0xB1));
    const __m128 s = _mm512_castps512_ps128(a);
    const __m128 t = _mm_max_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_max_ss(t, _mm_movehdup_ps(t)));
  }
  // Lanes equal to v, as a bit mask.
  static uint32_t eq_mask(F a, float v) {
    return _mm512_cmp_ps_mask(a, _mm512_set1_ps(v), _CMP_EQ_OQ);
  }

  // round-half-away into [-127, 127], NaN to 0: quantize_q8_ref per lane.
  static I round_q8(F s) {
    const F t = _mm512_roundscale_ps(s, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
    const __mmask16 up =
        _mm512_cmp_ps_mask(_mm512_abs_ps(_mm512_sub_ps(s, t)), _mm512_set1_ps(0.5f), _CMP_GE_OQ);
    const F one = _mm512_castsi512_ps(
        _mm512_or_si512(_mm512_and_si512(_mm512_castps_si512(s), _mm512_set1_epi32(INT32_MIN)),
                        _mm512_castps_si512(_mm512_set1_ps(1.0f))));
    F r = _mm512_mask_add_ps(t, up, t, one);
    r = _mm512_min_ps(_mm512_max_ps(r, _mm512_set1_ps(-127.0f)), _mm512_set1_ps(127.0f));
    const __mmask16 ordered = _mm512_cmp_ps_mask(s, s, _CMP_ORD_Q);
    return _mm512_maskz_cvttps_epi32(ordered, r);
  }
  // nearest-even, -128 unless v > -128 (NaN too), 127 when v >= 127: the
  // nearest_clamp of quantize_row_q8_K_ref.
  static I round_q8k(F v) {
    F r = _mm512_roundscale_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __mmask16 above = _mm512_cmp_ps_mask(v, _mm512_set1_ps(-128.0f), _CMP_GT_OQ);
    const __mmask16 top = _mm512_cmp_ps_mask(v, _mm512_set1_ps(127.0f), _CMP_GE_OQ);
    r = _mm512_mask_mov_ps(_mm512_set1_ps(-128.0f), above, r);
    r = _mm512_mask_mov_ps(r, top, _mm512_set1_ps(127.0f));
    return _mm512_cvttps_epi32(r);
  }
  static void store_i8(int8_t* p, I q) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm512_cvtepi32_epi8(q));
  }
  static I add_i(I a, I b) { return _mm512_add_epi32(a, b); }
  static I zero_i() { return _mm512_setzero_si512(); }
  // Lanes 0 and 1 of every 4 (k = 0, 1 mod 4), the others 0.
  static I low_pairs_i(I a) { return _mm512_maskz_mov_epi32(0x3333, a); }
  static int32_t hsum_i(I a) {
    a = _mm512_add_epi32(a, _mm512_shuffle_i32x4(a, a, 0x4E));
    a = _mm512_add_epi32(a, _mm512_shuffle_i32x4(a, a, 0xB1));
    __m128i s = _mm512_castsi512_si128(a);
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
    return _mm_cvtsi128_si32(s);
  }
};

}  // namespace
}  // namespace tessera::cpu
