// avx512 tier: Q2_K / Q3_K / Q4_K / Q5_K / Q6_K / IQ4_XS panels (x86/kpanels.h)
// with zmm vpdpbusd: one zmm is a 64-byte group (16 rows x 4 k), a sub-block's
// dots sum exactly in 32-bit lanes and take their scale with one vpmulld (Q2_K,
// Q3_K: two sub-blocks per vpdpwssd, end_pair); mins and offsets are int16 pair
// products (vpdpwssd).
#include "cpu/kernels/avx512/intrin.h"

#include <cstring>

#include "cpu/kernels/avx512/avx512.h"
#include "cpu/kernels/x86/kpanels.h"

namespace tessera::cpu {
namespace {

struct KVec512 {
  using I = __m512i;
  using F = __m512;
  using Acc = __m512i;  // 32-bit dot sums
  using Scale = __m512i;
  static constexpr int kRows = 16, kHalves = 1;
  static constexpr int kQ6Chain = 4;  // a whole 16-element sub-block per chain
  static constexpr int kQ5Chain = 8;  // 32-bit sums: a whole sub-block per chain
  static constexpr bool kNibbleX16 = true;  // vpdpbusd takes u8 up to 240 unsaturated
  static constexpr size_t kGroupBytes = 64, kHalfScaleBytes = 32;
  // Bit moves inside bytes in one vgf2p8affineqb (move_bits in x86/kpanels.h).
  static constexpr bool kOneLoad = true;  // load_group (x86/kpanels.h)
  static constexpr bool kGfni = true;
  static constexpr size_t kAhead = 4096;  // GEMV prefetch distance (load_group), one stream
  static I affine(I v, uint64_t matrix) {
    return _mm512_gf2p8affine_epi64_epi8(v, _mm512_set1_epi64(static_cast<long long>(matrix)), 0);
  }

  static I load(const uint8_t* p) { return _mm512_loadu_si512(p); }
  static I set1(int32_t v) { return _mm512_set1_epi32(v); }
  static I zero() { return _mm512_setzero_si512(); }
  static Acc acc_zero() { return _mm512_setzero_si512(); }
  static I and_(I a, I b) { return _mm512_and_si512(a, b); }
  static I or_(I a, I b) { return _mm512_or_si512(a, b); }
  template <int N>
  static I srli32(I v) {
    return _mm512_srli_epi32(v, N);
  }
  template <int N>
  static I slli32(I v) {
    return _mm512_slli_epi32(v, N);
  }
  template <int N>
  static I srli16(I v) {
    return _mm512_srli_epi16(v, N);
  }
  template <int N>
  static I slli16(I v) {
    return _mm512_slli_epi16(v, N);
  }
  template <int N>
  static I srai16(I v) {
    return _mm512_srai_epi16(v, N);
  }
  // Byte j of each lane, zero- or sign-extended.
  static I byte_u(I v, int j) {
    return _mm512_and_si512(_mm512_srl_epi32(v, _mm_cvtsi32_si128(8 * j)), set1(0xFF));
  }
  static I byte_s(I v, int j) {
    return _mm512_srai_epi32(_mm512_sll_epi32(v, _mm_cvtsi32_si128(24 - 8 * j)), 24);
  }
  // The four activation bytes as vpdpbusd's embedded broadcast operand: one
  // fused uop. Written with set1, GCC loaded each into a GPR and broadcast
  // it (two more uops, 128 a Q4_K block) and spilled the vectors it made.
  static Acc dot(Acc acc, I u8, const int8_t* x4) {
    __asm__("vpdpbusd %2%{1to16%}, %1, %0"
            : "+v"(acc)
            : "v"(u8), "m"(*reinterpret_cast<const int32_t*>(x4)));
    return acc;
  }
  // IQ4 levels + 128 (unsigned for vpdpbusd); a dot starts at -128 x its activation sum.
  static I iq4_table() {
    return _mm512_broadcast_i32x4(
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(kIq4LevelsU8.data())));
  }
  static I lut(I table, I idx) { return _mm512_shuffle_epi8(table, idx); }
  static Acc sdot_init(int32_t act_sum) { return _mm512_set1_epi32(-kIq4LevelsOffset * act_sum); }
  static Acc sdot(Acc acc, I w, const int8_t* x4) { return dot(acc, w, x4); }
  static I mul32(I a, I b) { return _mm512_mullo_epi32(a, b); }
  static I load_u16(const uint8_t* p) {
    return _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  static constexpr bool kPairEnd = true;
  // isum + a sc_a + b sc_b, a and b 32-bit sums within int16 packed as one
  // pair (b into the high halves), sp the int16 pairs (sc_a, sc_b).
  static I end_pair(I isum, Acc a, Acc b, I sp) {
    const I ab = _mm512_mask_blend_epi16(0xAAAAAAAA, a, _mm512_slli_epi32(b, 16));
    return _mm512_dpwssd_epi32(isum, ab, sp);
  }
  static Scale scale(I v) { return v; }
  template <bool kSigned>
  static Scale scale_byte(I v, int j) {
    return scale(kSigned ? byte_s(v, j) : byte_u(v, j));
  }
  static I end(Acc acc, Scale s) { return _mm512_mullo_epi32(acc, s); }
  static I add32(I a, I b) { return _mm512_add_epi32(a, b); }
  static I sub8(I a, I b) { return _mm512_sub_epi8(a, b); }
  static I sub32(I a, I b) { return _mm512_sub_epi32(a, b); }
  static I dot16(I acc, I s16, int32_t pair) {
    return _mm512_dpwssd_epi32(acc, s16, _mm512_set1_epi32(pair));
  }
  static F zero_f() { return _mm512_setzero_ps(); }
  static F set1f(float v) { return _mm512_set1_ps(v); }
  static F cvt(I v) { return _mm512_cvtepi32_ps(v); }
  static F mul(F a, F b) { return _mm512_mul_ps(a, b); }
  static F fmadd(F a, F b, F c) { return _mm512_fmadd_ps(a, b, c); }
  static F fnmadd(F a, F b, F c) { return _mm512_fnmadd_ps(a, b, c); }
  static F load_f16(const uint8_t* p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  static void store(float* p, F v) { _mm512_store_ps(p, v); }
};

// The amx tier's GEMV (amx/kpanel.cpp): four runs of panels at once, each
// prefetched 2 KiB ahead, as measured on Sapphire Rapids when the panels came.
struct KVec512x4 : KVec512 {
  static constexpr size_t kAhead = 2048;
};

// GEMV: one run of panels, front to back, prefetched 4 KiB ahead (V::kAhead).
// On a Zen 5 (cpu_kernels_bench, 2 threads, means of 4 runs alternating with
// four streams 2 KiB ahead, fraction of the read probe): Q4_K 0.74-0.79 ->
// 0.81-0.86, Q6_K 0.79-0.82 -> 0.93-0.96, Q5_K 0.67-0.68 -> 0.97-1.05, Q2_K
// 0.61-0.67 -> 0.73-0.80, Q3_K 0.67-0.68 -> 0.77-0.82, IQ4_XS 0.67-0.69 ->
// 0.80-0.91. (The Q4_0 / Q8_0 panels read 0.55-0.64 as one stream against
// 0.84-0.96 as four: panel.cpp keeps four.)
// GEMM tiles: 16 rows x 8 columns for Q4_K (TinyLlama-shape pp512 with this
// tier forced, 2 threads, alternating: 267-271 tok/s, 257-258 at 4 columns),
// 4 for Q6_K (whose 4 sums per column and sub-block pair would not fit 8
// columns).
constexpr int kStreams = 1, kAmxStreams = 4;
constexpr int kQ4KCols = 8, kQ5KCols = 8, kQ6KCols = 4, kIQ4XSCols = 8;
// Q2_K and Q3_K have Q6_K's 16-element sub-blocks: 4 columns as it.
constexpr int kQ2KCols = 4, kQ3KCols = 4;

}  // namespace

void avx512::mat_q2_k_panel(const MatArgs& a) {
  KPanelKernel<KVec512, Q2KPanel, kStreams, kQ2KCols>::run(a);
}
void avx512::mat_q3_k_panel(const MatArgs& a) {
  KPanelKernel<KVec512, Q3KPanel, kStreams, kQ3KCols>::run(a);
}
void avx512::mat_q4_k_panel(const MatArgs& a) {
  KPanelKernel<KVec512, Q4KPanel, kStreams, kQ4KCols>::run(a);
}
void avx512::mat_q5_k_panel(const MatArgs& a) {
  KPanelKernel<KVec512, Q5KPanel, kStreams, kQ5KCols>::run(a);
}
void avx512::mat_iq4_xs_panel(const MatArgs& a) {
  KPanelKernel<KVec512, IQ4XSPanel, kStreams, kIQ4XSCols>::run(a);
}
void avx512::mat_q6_k_panel(const MatArgs& a) {
  KPanelKernel<KVec512, Q6KPanel, kStreams, kQ6KCols>::run(a);
}

void avx512::mat_q2_k_panel_x4(const MatArgs& a) {
  KPanelKernel<KVec512x4, Q2KPanel, kAmxStreams, kQ2KCols>::run(a);
}
void avx512::mat_q3_k_panel_x4(const MatArgs& a) {
  KPanelKernel<KVec512x4, Q3KPanel, kAmxStreams, kQ3KCols>::run(a);
}
void avx512::mat_q4_k_panel_x4(const MatArgs& a) {
  KPanelKernel<KVec512x4, Q4KPanel, kAmxStreams, kQ4KCols>::run(a);
}
void avx512::mat_q5_k_panel_x4(const MatArgs& a) {
  KPanelKernel<KVec512x4, Q5KPanel, kAmxStreams, kQ5KCols>::run(a);
}
void avx512::mat_iq4_xs_panel_x4(const MatArgs& a) {
  KPanelKernel<KVec512x4, IQ4XSPanel, kAmxStreams, kIQ4XSCols>::run(a);
}
void avx512::mat_q6_k_panel_x4(const MatArgs& a) {
  KPanelKernel<KVec512x4, Q6KPanel, kAmxStreams, kQ6KCols>::run(a);
}

}  // namespace tessera::cpu
