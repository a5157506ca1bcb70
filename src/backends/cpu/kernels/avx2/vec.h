// 256-bit vector operations for the avx2 tier's shared templates (x86/).
// Only for translation units built with the avx2 flags (sources.cmake);
// internal linkage keeps these copies apart from the avx512 tier's.
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

namespace tessera::cpu {
namespace {

struct Vec {
  using F = __m256;
  using I = __m256i;
  static constexpr int kLanes = 8;

  static __m256i lane_mask(int n) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  }

  static F zero() { return _mm256_setzero_ps(); }
  static F set1(float v) { return _mm256_set1_ps(v); }
  static F load(const float* p) { return _mm256_loadu_ps(p); }
  static void store(float* p, F v) { _mm256_storeu_ps(p, v); }
  static F load_n(const float* p, int n) { return _mm256_maskload_ps(p, lane_mask(n)); }
  static void store_n(float* p, F v, int n) { _mm256_maskstore_ps(p, lane_mask(n), v); }
  static F load_f16(const uint16_t* p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  static F load_f16_n(const uint16_t* p, int n) {
    uint16_t tmp[kLanes] = {};
    std::memcpy(tmp, p, static_cast<size_t>(n) * sizeof(uint16_t));
    return load_f16(tmp);
  }
  // bf16 is the top half of an f32: widen and shift, exact.
  static F load_bf16(const uint16_t* p) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
  static F load_bf16_n(const uint16_t* p, int n) {
    uint16_t tmp[kLanes] = {};
    std::memcpy(tmp, p, static_cast<size_t>(n) * sizeof(uint16_t));
    return load_bf16(tmp);
  }

  static F add(F a, F b) { return _mm256_add_ps(a, b); }
  static F sub(F a, F b) { return _mm256_sub_ps(a, b); }
  static F max(F a, F b) { return _mm256_max_ps(a, b); }
  static F round(F a) { return _mm256_round_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
  // 2^n for integer-valued n in [-126, 127].
  static F pow2(F n) {
    const I e = _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127));
    return _mm256_castsi256_ps(_mm256_slli_epi32(e, 23));
  }
  // a where x >= t, else 0 (NaN x: 0).
  static F zero_below(F a, F x, float t) {
    return _mm256_and_ps(a, _mm256_cmp_ps(x, _mm256_set1_ps(t), _CMP_GE_OQ));
  }
  // y * 2^n where x >= t, else 0 (n integer-valued in [-126, 127] there).
  static F scale_pow2_above(F y, F n, F x, float t) { return zero_below(mul(y, pow2(n)), x, t); }
  // a where t is a number, t (NaN) where it is NaN.
  static F keep_nan(F a, F t) { return _mm256_blendv_ps(a, t, _mm256_cmp_ps(t, t, _CMP_UNORD_Q)); }
  static F mul(F a, F b) { return _mm256_mul_ps(a, b); }
  static F div(F a, F b) { return _mm256_div_ps(a, b); }
  static F fma(F a, F b, F c) { return _mm256_fmadd_ps(a, b, c); }
  static F abs(F a) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), a); }
  // max(a, acc), returning acc where a is NaN (as std::fmax(acc, a) does).
  static F max_skip_nan(F a, F acc) { return _mm256_max_ps(a, acc); }
  static float hsum(F a) {
    const __m128 s = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    const __m128 t = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(t, _mm_movehdup_ps(t)));
  }
  // The sums of a, b, c, d as the 4 lanes of an xmm.
  static __m128 hsum4(F a, F b, F c, F d) {
    const auto fold = [](F x) {
      return _mm_add_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
    };
    return _mm_hadd_ps(_mm_hadd_ps(fold(a), fold(b)), _mm_hadd_ps(fold(c), fold(d)));
  }
  // The sums of x[0..7] as the 8 lanes of a ymm: three rounds of pairwise
  // adds, no reduction of one vector at a time.
  static __m256 hsum8(const F* x) {
    const __m256 t0 = _mm256_hadd_ps(_mm256_hadd_ps(x[0], x[1]), _mm256_hadd_ps(x[2], x[3]));
    const __m256 t1 = _mm256_hadd_ps(_mm256_hadd_ps(x[4], x[5]), _mm256_hadd_ps(x[6], x[7]));
    // t0 = [x0..x3 over lanes 0-3 | x0..x3 over lanes 4-7], t1 likewise for x4..x7.
    return _mm256_add_ps(_mm256_permute2f128_ps(t0, t1, 0x20),
                         _mm256_permute2f128_ps(t0, t1, 0x31));
  }
  static float hmax(F a) {
    const __m128 s = _mm_max_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    const __m128 t = _mm_max_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_max_ss(t, _mm_movehdup_ps(t)));
  }
  static uint32_t eq_mask(F a, float v) {
    return static_cast<uint32_t>(
        _mm256_movemask_ps(_mm256_cmp_ps(a, _mm256_set1_ps(v), _CMP_EQ_OQ)));
  }

  // round-half-away into [-127, 127], NaN to 0: quantize_q8_ref per lane.
  static I round_q8(F s) {
    const F t = _mm256_round_ps(s, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
    const F up = _mm256_cmp_ps(abs(_mm256_sub_ps(s, t)), _mm256_set1_ps(0.5f), _CMP_GE_OQ);
    const F one = _mm256_or_ps(_mm256_and_ps(s, _mm256_set1_ps(-0.0f)), _mm256_set1_ps(1.0f));
    F r = _mm256_add_ps(t, _mm256_and_ps(up, one));
    r = _mm256_min_ps(_mm256_max_ps(r, _mm256_set1_ps(-127.0f)), _mm256_set1_ps(127.0f));
    r = _mm256_and_ps(r, _mm256_cmp_ps(s, s, _CMP_ORD_Q));
    return _mm256_cvttps_epi32(r);
  }
  // nearest-even, -128 unless v > -128 (NaN too), 127 when v >= 127: the
  // nearest_clamp of quantize_row_q8_K_ref.
  static I round_q8k(F v) {
    F r = _mm256_round_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    r = _mm256_blendv_ps(_mm256_set1_ps(-128.0f), r,
                         _mm256_cmp_ps(v, _mm256_set1_ps(-128.0f), _CMP_GT_OQ));
    r = _mm256_blendv_ps(r, _mm256_set1_ps(127.0f),
                         _mm256_cmp_ps(v, _mm256_set1_ps(127.0f), _CMP_GE_OQ));
    return _mm256_cvttps_epi32(r);
  }
  static void store_i8(int8_t* p, I q) {
    const __m128i w = _mm_packs_epi32(_mm256_castsi256_si128(q), _mm256_extracti128_si256(q, 1));
    _mm_storel_epi64(reinterpret_cast<__m128i*>(p), _mm_packs_epi16(w, w));
  }
  static I add_i(I a, I b) { return _mm256_add_epi32(a, b); }
  static I zero_i() { return _mm256_setzero_si256(); }
  // Lanes 0 and 1 of every 4 (k = 0, 1 mod 4), the others 0.
  static I low_pairs_i(I a) { return _mm256_blend_epi32(_mm256_setzero_si256(), a, 0x33); }
  static int32_t hsum_i(I a) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(a), _mm256_extracti128_si256(a, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
    return _mm_cvtsi128_si32(s);
  }
};

}  // namespace
}  // namespace tessera::cpu
