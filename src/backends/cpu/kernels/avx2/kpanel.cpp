// avx2 tier: Q2_K / Q3_K / Q4_K / Q5_K / Q6_K / IQ4_XS panels (x86/kpanels.h)
// with maddubs: a ymm is half a 64-byte group (8 rows x 4 k). A sub-block's
// byte products add up in 16-bit lanes while they stay exact (Q4_K: 8 groups,
// |sum| <= 8 * 2 * 15 * 128 = 30720; Q5_K: 4 groups, <= 4 * 2 * 31 * 128 =
// 31744; Q6_K: 2 groups, <= 2 * 2 * 63 * 128 = 32256; Q3_K, Q2_K: 4 groups,
// <= 4 * 2 * 7 * 128 = 7168, <= 3072), then one vpmaddwd by the scale (in
// both halves of each 32-bit lane) widens and scales them at once.
#include <immintrin.h>

#include <cstring>

#include "cpu/kernels/avx2/avx2.h"
#include "cpu/kernels/x86/kpanels.h"

namespace tessera::cpu {
namespace {

struct KVec256 {
  using I = __m256i;
  using F = __m256;
  using Acc = __m256i;    // 16-bit pair sums
  using Scale = __m256i;  // the scale in both 16-bit halves of a lane
  static constexpr int kRows = 8, kHalves = 2;
  static constexpr int kQ6Chain = 2;  // half a 16-element sub-block per chain
  static constexpr int kQ5Chain = 4;  // half a Q5_K sub-block per chain
  static constexpr bool kNibbleX16 = false;  // maddubs pairs of 240 x 128 would saturate
  static constexpr size_t kGroupBytes = 32, kHalfScaleBytes = 16;
  static constexpr bool kOneLoad = false;  // load_group (x86/kpanels.h)
  static constexpr bool kGfni = false;  // (GFNI is no part of the tier)
  static constexpr size_t kAhead = 2048;  // GEMV prefetch distance (load_group), two streams

  static I load(const uint8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const I*>(p)); }
  static I set1(int32_t v) { return _mm256_set1_epi32(v); }
  static I zero() { return _mm256_setzero_si256(); }
  static Acc acc_zero() { return _mm256_setzero_si256(); }
  static I and_(I a, I b) { return _mm256_and_si256(a, b); }
  static I or_(I a, I b) { return _mm256_or_si256(a, b); }
  template <int N>
  static I srli32(I v) {
    return _mm256_srli_epi32(v, N);
  }
  template <int N>
  static I slli32(I v) {
    return _mm256_slli_epi32(v, N);
  }
  template <int N>
  static I srli16(I v) {
    return _mm256_srli_epi16(v, N);
  }
  template <int N>
  static I slli16(I v) {
    return _mm256_slli_epi16(v, N);
  }
  template <int N>
  static I srai16(I v) {
    return _mm256_srai_epi16(v, N);
  }
  static I byte_u(I v, int j) {
    return _mm256_and_si256(_mm256_srl_epi32(v, _mm_cvtsi32_si128(8 * j)), set1(0xFF));
  }
  static I byte_s(I v, int j) {
    return _mm256_srai_epi32(_mm256_sll_epi32(v, _mm_cvtsi32_si128(24 - 8 * j)), 24);
  }
  // Four activation bytes in every lane, and dot() with them given.
  static I bcast(const int8_t* x4) {
    return _mm256_castps_si256(_mm256_broadcast_ss(reinterpret_cast<const float*>(x4)));
  }
  static Acc dot_b(Acc acc, I u8, I x) { return chain(_mm256_add_epi16(acc, _mm256_maddubs_epi16(u8, x))); }
  static Acc dot(Acc acc, I u8, const int8_t* x4) {
    const I x = _mm256_castps_si256(_mm256_broadcast_ss(reinterpret_cast<const float*>(x4)));
    return chain(_mm256_add_epi16(acc, _mm256_maddubs_epi16(u8, x)));
  }
  // The signed IQ4 levels; dots by the sign trick, as the Q8_0 panels:
  // maddubs(|w|, sign(a, w)) pairs <= 2 * 127 * 128, widened per group.
  static I iq4_table() {
    return _mm256_broadcastsi128_si256(
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(kvalues_iq4nl)));
  }
  static I lut(I table, I idx) { return _mm256_shuffle_epi8(table, idx); }
  static I sdot_init(int32_t) { return _mm256_setzero_si256(); }
  static I sdot(I acc, I w, const int8_t* x4) {
    const I x = _mm256_castps_si256(_mm256_broadcast_ss(reinterpret_cast<const float*>(x4)));
    const I p = _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(x, w));
    return chain(_mm256_add_epi32(acc, _mm256_madd_epi16(p, _mm256_set1_epi16(1))));
  }
  static I mul32(I a, I b) { return _mm256_mullo_epi32(a, b); }
  static I load_u16(const uint8_t* p) {
    return _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  static constexpr bool kPairEnd = false;  // sums in int16 pairs: no room to pack two
  static Scale scale(I v) {  // v in int16 range
    return _mm256_or_si256(_mm256_and_si256(v, set1(0xFFFF)), _mm256_slli_epi32(v, 16));
  }
  // scale(byte_s(v, j)) (kSigned) or scale(byte_u(v, j)) in one vpshufb (and
  // one vpsraw): byte j of each lane into both of its 16-bit halves, as the
  // high byte (then shifted down with its sign) or the low one (zero above).
  template <bool kSigned>
  static Scale scale_byte(I v, int j) {
    const I ctrl = _mm256_load_si256(reinterpret_cast<const I*>(kScaleCtrl[kSigned ? 1 : 0][j]));
    const I b = _mm256_shuffle_epi8(v, ctrl);
    return kSigned ? _mm256_srai_epi16(b, 8) : b;
  }
  // [signed][j]: per 32-bit lane k of a 128-bit half, bytes (4k + j, zero) twice
  // (unsigned) or (zero, 4k + j) twice (signed); 0x80 reads as zero.
  alignas(32) static constexpr uint8_t kScaleCtrl[2][4][32] = {
#define TESSERA_LANE_U(k, j) 4 * (k) + (j), 0x80, 4 * (k) + (j), 0x80
#define TESSERA_LANE_S(k, j) 0x80, 4 * (k) + (j), 0x80, 4 * (k) + (j)
#define TESSERA_HALF(L, j) L(0, j), L(1, j), L(2, j), L(3, j)
#define TESSERA_CTRL(L, j) {TESSERA_HALF(L, j), TESSERA_HALF(L, j)}
      {TESSERA_CTRL(TESSERA_LANE_U, 0), TESSERA_CTRL(TESSERA_LANE_U, 1), TESSERA_CTRL(TESSERA_LANE_U, 2),
       TESSERA_CTRL(TESSERA_LANE_U, 3)},
      {TESSERA_CTRL(TESSERA_LANE_S, 0), TESSERA_CTRL(TESSERA_LANE_S, 1), TESSERA_CTRL(TESSERA_LANE_S, 2),
       TESSERA_CTRL(TESSERA_LANE_S, 3)},
#undef TESSERA_CTRL
#undef TESSERA_HALF
#undef TESSERA_LANE_S
#undef TESSERA_LANE_U
  };
  static I end(Acc acc, Scale s) { return _mm256_madd_epi16(acc, s); }
  static I add32(I a, I b) { return _mm256_add_epi32(a, b); }
  static I sub8(I a, I b) { return _mm256_sub_epi8(a, b); }
  static I sub32(I a, I b) { return _mm256_sub_epi32(a, b); }
  static I dot16(I acc, I s16, int32_t pair) {
    return _mm256_add_epi32(acc, _mm256_madd_epi16(s16, _mm256_set1_epi32(pair)));
  }
  static F zero_f() { return _mm256_setzero_ps(); }
  static F set1f(float v) { return _mm256_set1_ps(v); }
  static F cvt(I v) { return _mm256_cvtepi32_ps(v); }
  static F mul(F a, F b) { return _mm256_mul_ps(a, b); }
  static F fmadd(F a, F b, F c) { return _mm256_fmadd_ps(a, b, c); }
  static F fnmadd(F a, F b, F c) { return _mm256_fnmadd_ps(a, b, c); }
  static F load_f16(const uint8_t* p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  static void store(float* p, F v) { _mm256_store_ps(p, v); }
};

// GEMV: two panels at once, as the Q4_0 / Q8_0 panels. GEMM tiles: 8 rows x
// 2 columns (16 ymm registers).
constexpr int kStreams = 2;
constexpr int kCols = 2;

}  // namespace

void avx2::mat_q2_k_panel(const MatArgs& a) {
  KPanelKernel<KVec256, Q2KPanel, kStreams, kCols>::run(a);
}
void avx2::mat_q3_k_panel(const MatArgs& a) {
  KPanelKernel<KVec256, Q3KPanel, kStreams, kCols>::run(a);
}
void avx2::mat_q4_k_panel(const MatArgs& a) {
  KPanelKernel<KVec256, Q4KPanel, kStreams, kCols>::run(a);
}
void avx2::mat_q5_k_panel(const MatArgs& a) {
  KPanelKernel<KVec256, Q5KPanel, kStreams, kCols>::run(a);
}
void avx2::mat_iq4_xs_panel(const MatArgs& a) {
  KPanelKernel<KVec256, IQ4XSPanel, kStreams, kCols>::run(a);
}
void avx2::mat_q6_k_panel(const MatArgs& a) {
  KPanelKernel<KVec256, Q6KPanel, kStreams, kCols>::run(a);
}

}  // namespace tessera::cpu
