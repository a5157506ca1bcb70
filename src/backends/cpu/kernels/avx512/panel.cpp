// avx512 tier: Q4_0 / IQ4_NL / MXFP4 / Q8_0 weights in 16-row panels (repack.h) times Q8
// activations, in outer-product form (docs/cpu-kernels.md, "Outer-product panel kernels"). One zmm
// holds 16 rows x 4 consecutive k as u8; four activation bytes broadcast to every lane feed one
// vpdpbusd, which yields 16 partial outputs with no horizontal sums. Weights are unsigned (Q4_0
// nibbles; Q8_0 bytes xor 0x80; IQ4_NL table values + 128; MXFP4 table values + 12), so
//   sum (q - o) a = dpbusd(q, a) - o sum(a),  o = 8, 128 or 12,
// with -o sum(a) as the initial accumulator: exact integers per block, then
// one convert and one FMA by d_w d_a.
#include "cpu/kernels/avx512/intrin.h"

#include <array>
#include <cstring>

#include "cpu/kernels/avx512/avx512.h"
#include "cpu/kernels/repack.h"
#include "cpu/kernels/x86/iq4.h"
#include "cpu/kernels/x86/panels.h"

namespace tessera::cpu::avx512 {
namespace {

constexpr int kGroups = 8;       // 4-k groups per 32-k block
constexpr int kTileColumns = 8;  // register tile: 16 rows x 8 columns

struct PanelQ4_0 {
  static constexpr size_t kQuantBytes = 256;
  static constexpr int kOffset = 8;
  // Load l: low nibbles are k = 4l..4l+3, high nibbles k = 16+4l..16+4l+3.
  static void unpack(const uint8_t* q, __m512i w[kGroups]) {
    const __m512i m = _mm512_set1_epi8(0x0F);
    for (int l = 0; l < 4; ++l) {
      const __m512i v = _mm512_loadu_si512(q + 64 * l);
      w[l] = _mm512_and_si512(v, m);
      w[l + 4] = _mm512_and_si512(_mm512_srli_epi16(v, 4), m);
    }
  }
};

// Q4_0's nibbles, each mapped by vpshufb to its level in kLevels (unsigned,
// as vpdpbusd wants; the dot starts at -kOffset x the activation sum).
template <const std::array<uint8_t, 16>& kLevels, int kLevelsOffset>
struct PanelNibbleTable {
  static constexpr size_t kQuantBytes = 256;
  static constexpr int kOffset = kLevelsOffset;
  static void unpack(const uint8_t* q, __m512i w[kGroups]) {
    const __m512i m = _mm512_set1_epi8(0x0F);
    const __m512i table =
        _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(kLevels.data())));
    for (int l = 0; l < 4; ++l) {
      const __m512i v = _mm512_loadu_si512(q + 64 * l);
      w[l] = _mm512_shuffle_epi8(table, _mm512_and_si512(v, m));
      w[l + 4] = _mm512_shuffle_epi8(table, _mm512_and_si512(_mm512_srli_epi16(v, 4), m));
    }
  }
};

// IQ4_NL: kvalues_iq4nl + 128 in [1, 241].
using PanelIQ4_NL = PanelNibbleTable<kIq4LevelsU8, kIq4LevelsOffset>;

// MXFP4: kvalues_mxfp4 + 12 in [0, 24]; its scales are E8M0 bytes, one a row
// and block (load_dw).
struct PanelMXFP4 : PanelNibbleTable<kMxfp4LevelsU8, kMxfp4LevelsOffset> {
  static constexpr size_t kScaleBytes = 1;
};

struct PanelQ8_0 {
  static constexpr size_t kQuantBytes = 512;
  static constexpr int kOffset = 128;
  static void unpack(const uint8_t* q, __m512i w[kGroups]) {
    const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
    for (int g = 0; g < kGroups; ++g) w[g] = _mm512_xor_si512(_mm512_loadu_si512(q + 64 * g), flip);
  }
};

// The 16 weight scales of a panel's block b: f16 (32 bytes a block), or
// MXFP4's E8M0 bytes (16 a block) as e8m0_to_fp32_half, exactly: 2^(e - 128)
// is (e - 1) << 23 as float bits for e >= 2, and the subnormal 0x00200000 << e
// below.
template <class P>
inline __m512 load_dw(const uint8_t* scales, int64_t b) {
  if constexpr (panel_scale_bytes<P>() == 1) {
    const __m512i e =
        _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(scales + 16 * b)));
    const __m512i normal = _mm512_slli_epi32(_mm512_sub_epi32(e, _mm512_set1_epi32(1)), 23);
    const __m512i tiny = _mm512_sllv_epi32(_mm512_set1_epi32(0x00200000), e);
    const __mmask16 big = _mm512_cmpgt_epi32_mask(e, _mm512_set1_epi32(1));
    return _mm512_castsi512_ps(_mm512_mask_blend_epi32(big, tiny, normal));
  } else {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(scales + 32 * b)));
  }
}

inline __m512i bcast4(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, sizeof v);
  return _mm512_set1_epi32(v);
}

// One panel (16 rows), blocks [b0, b1), times columns x[0 .. C).
template <class P, int C>
void panel_tile(const PanelSpan& p, const BlockQ8* const* x, float* const* out) {
  __m512 acc[C];
  for (int c = 0; c < C; ++c) acc[c] = _mm512_setzero_ps();
  for (int64_t b = p.b0; b < p.b1; ++b) {
    const uint8_t* q = p.quants + static_cast<size_t>(b) * P::kQuantBytes;
    prefetch_block<P::kQuantBytes, panel_scale_bytes<P>()>(p.scales, q, b);
    __m512i w[kGroups];
    P::unpack(q, w);
    const __m512 dw = load_dw<P>(p.scales, b);
    for (int c = 0; c < C; ++c) {
      const BlockQ8& xb = x[c][b];
      // Two chains of 4 dependent vpdpbusd per column rather than one of 8:
      // shorter chains keep more of them in flight.
      __m512i s = _mm512_set1_epi32(-P::kOffset * xb.sum);
      __m512i t = _mm512_setzero_si512();
      for (int g = 0; g < kGroups; g += 2) {
        s = _mm512_dpbusd_epi32(s, w[g], bcast4(xb.qs + 4 * g));
        t = _mm512_dpbusd_epi32(t, w[g + 1], bcast4(xb.qs + 4 * g + 4));
      }
      s = _mm512_add_epi32(s, t);
      acc[c] =
          _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(dw, _mm512_set1_ps(xb.d)), acc[c]);
    }
  }
  const auto keep = static_cast<__mmask16>((1u << p.valid) - 1);
  for (int c = 0; c < C; ++c) {
    if (p.accumulate) acc[c] = _mm512_add_ps(acc[c], _mm512_maskz_loadu_ps(keep, out[c]));
    _mm512_mask_storeu_ps(out[c], keep, acc[c]);
  }
}

template <class P>
struct Tiles {
  static constexpr int kMaxCols = kTileColumns;
  static constexpr size_t kScaleBytes = panel_scale_bytes<P>();
  template <int C>
  static void tile(const PanelSpan& p, const BlockQ8* const* x, float* const* out) {
    panel_tile<P, C>(p, x, out);
  }
};

// GEMV over kStreams panels at once (run_gemv_groups, panels.h); the
// activation block's broadcasts are loaded once for all of them. One panel
// at a time read ~0.87 of the zmm read probe on one Sapphire Rapids core.
constexpr int kStreams = 4;

template <class P>
struct GemvGroup {
  template <int N>
  static void run(const MatArgs& a, int64_t p0, int64_t stride) {
    const int64_t nb = a.k / kQK;
    const auto* x = reinterpret_cast<const BlockQ8*>(a.x);
    const PanelGroup<N> group(a, p0, stride, panel_scale_bytes<P>());
    __m512 acc[N];
    for (int i = 0; i < N; ++i) acc[i] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
      const BlockQ8& xb = x[b];
      __m512i xv[kGroups];
      for (int g = 0; g < kGroups; ++g) xv[g] = bcast4(xb.qs + 4 * g);
      const __m512i init = _mm512_set1_epi32(-P::kOffset * xb.sum);
      const __m512 dx = _mm512_set1_ps(xb.d);
      for (int i = 0; i < N; ++i) {
        const uint8_t* q = group.quants[i] + static_cast<size_t>(b) * P::kQuantBytes;
        prefetch_block<P::kQuantBytes, panel_scale_bytes<P>()>(group.scales[i], q, b);
        __m512i w[kGroups];
        P::unpack(q, w);
        const __m512 dw = load_dw<P>(group.scales[i], b);
        __m512i s = init, t = _mm512_setzero_si512();
        for (int g = 0; g < kGroups; g += 2) {
          s = _mm512_dpbusd_epi32(s, w[g], xv[g]);
          t = _mm512_dpbusd_epi32(t, w[g + 1], xv[g + 1]);
        }
        acc[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(s, t)), _mm512_mul_ps(dw, dx),
                                 acc[i]);
      }
    }
    for (int i = 0; i < N; ++i) {
      const int64_t r0 = (p0 + i * stride) * kPanelRows;
      const auto valid = static_cast<int>(min_i64(a.rows - r0, kPanelRows));
      _mm512_mask_storeu_ps(a.out + r0, static_cast<__mmask16>((1u << valid) - 1), acc[i]);
    }
  }
};

}  // namespace

void mat_q4_0_panel(const MatArgs& a) {
  run_gemv_groups<Tiles<PanelQ4_0>, GemvGroup<PanelQ4_0>, kStreams>(a);
}
void mat_iq4_nl_panel(const MatArgs& a) {
  run_gemv_groups<Tiles<PanelIQ4_NL>, GemvGroup<PanelIQ4_NL>, kStreams>(a);
}
void mat_q8_0_panel(const MatArgs& a) {
  run_gemv_groups<Tiles<PanelQ8_0>, GemvGroup<PanelQ8_0>, kStreams>(a);
}
void mat_mxfp4_panel(const MatArgs& a) {
  run_gemv_groups<Tiles<PanelMXFP4>, GemvGroup<PanelMXFP4>, kStreams>(a);
}

}  // namespace tessera::cpu::avx512
