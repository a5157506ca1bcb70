// avx2 tier: Q4_0 / IQ4_NL / MXFP4 / Q8_0 weights in 16-row panels (repack.h) times Q8
// activations. Each 64-byte group of a panel is two ymm of 8 rows x 4 k;
// four activation bytes are broadcast to every lane, so a row's sum stays in
// its own 32-bit lane (outer-product form, as the avx512 tier).
// Q4_0: an s16 lane sums 16 products of nibble x int8 over a whole block,
// starting from the activations' q4_bias (-8 x the sum of the 16 activations
// it meets), so it ends at sum (w - 8) a, at most 16 * 8 * 127 = 16256 in
// magnitude: exact although the running sum may wrap (adds are modulo 2^16),
// and widened once per block with nothing left to subtract.
// Q8_0 (signed): maddubs(|w|, sign(a, w)) and a madd per group.
#include <immintrin.h>

#include <array>
#include <cstring>
#include <type_traits>

#include "cpu/kernels/avx2/avx2.h"
#include "cpu/kernels/repack.h"
#include "cpu/kernels/x86/iq4.h"
#include "cpu/kernels/x86/panels.h"

namespace tessera::cpu::avx2 {
namespace {

constexpr int kGroups = 8;       // 4-k groups per 32-k block
constexpr int kTileColumns = 4;  // register tile: 8 rows x 4 columns a pass (GEMM)

// Four activation bytes in every lane: a broadcast load (vbroadcastss, a
// load-port uop), not a scalar load, vmovd and shuffle.
inline __m256i bcast4(const void* p) {
  return _mm256_castps_si256(_mm256_broadcast_ss(static_cast<const float*>(p)));
}

struct PanelQ4_0 {
  static constexpr size_t kQuantBytes = 256;
  // Load l (of 4) gives groups l (low nibbles, k 4l..4l+3) and l + 4 (high,
  // k 16 + 4l..). Not unrolled: GCC, given all 8 groups x C columns at once,
  // hoisted the products and spilled them.
  template <int C>
  static void block(const uint8_t* q, int h, const BlockQ8* const* xb, __m256i s32[C]) {
    __m256i s16[C];
    for (int c = 0; c < C; ++c) s16[c] = bcast4(xb[c]->q4_bias);
    const __m256i m = _mm256_set1_epi8(0x0F);
#pragma GCC unroll 1
    for (int l = 0; l < 4; ++l) {
      const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + 64 * l + 32 * h));
      const __m256i lo = _mm256_and_si256(v, m);
      const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m);
      for (int c = 0; c < C; ++c) {
        s16[c] = _mm256_add_epi16(s16[c], _mm256_maddubs_epi16(lo, bcast4(xb[c]->qs + 4 * l)));
        s16[c] = _mm256_add_epi16(s16[c], _mm256_maddubs_epi16(hi, bcast4(xb[c]->qs + 16 + 4 * l)));
      }
    }
    for (int c = 0; c < C; ++c) s32[c] = _mm256_madd_epi16(s16[c], _mm256_set1_epi16(1));
  }
};

struct PanelQ8_0 {
  static constexpr size_t kQuantBytes = 512;
  template <int C>
  static void block(const uint8_t* q, int h, const BlockQ8* const* xb, __m256i s32[C]) {
    for (int c = 0; c < C; ++c) s32[c] = _mm256_setzero_si256();
#pragma GCC unroll 2
    for (int g = 0; g < kGroups; ++g) {
      const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + 64 * g + 32 * h));
      const __m256i aw = _mm256_sign_epi8(w, w);
      for (int c = 0; c < C; ++c) {
        const __m256i sa = _mm256_sign_epi8(bcast4(xb[c]->qs + 4 * g), w);
        s32[c] = _mm256_add_epi32(
            s32[c], _mm256_madd_epi16(_mm256_maddubs_epi16(aw, sa), _mm256_set1_epi16(1)));
      }
    }
  }
};

// IQ4_NL: Q4_0's nibbles mapped by vpshufb to the signed table values, then
// Q8_0's dot: maddubs(|w|, sign(a, w)) (|w| <= 127: a pair <= 2 * 127 * 127,
// no saturation) and a madd per group.
struct PanelIQ4_NL {
  static constexpr size_t kQuantBytes = 256;
  template <int C>
  static void block(const uint8_t* q, int h, const BlockQ8* const* xb, __m256i s32[C]) {
    for (int c = 0; c < C; ++c) s32[c] = _mm256_setzero_si256();
    const __m256i m = _mm256_set1_epi8(0x0F), ones = _mm256_set1_epi16(1);
    const __m256i table = _mm256_broadcastsi128_si256(
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(kvalues_iq4nl)));
    const auto dot = [&](__m256i w, int at) {
      const __m256i aw = _mm256_sign_epi8(w, w);
      for (int c = 0; c < C; ++c) {
        const __m256i sa = _mm256_sign_epi8(bcast4(xb[c]->qs + at), w);
        s32[c] = _mm256_add_epi32(s32[c], _mm256_madd_epi16(_mm256_maddubs_epi16(aw, sa), ones));
      }
    };
#pragma GCC unroll 1
    for (int l = 0; l < 4; ++l) {
      const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + 64 * l + 32 * h));
      dot(_mm256_shuffle_epi8(table, _mm256_and_si256(v, m)), 4 * l);
      dot(_mm256_shuffle_epi8(table, _mm256_and_si256(_mm256_srli_epi16(v, 4), m)), 16 + 4 * l);
    }
  }
};

// MXFP4: its table values (the doubled e2m1 codes, |w| <= 12) plus 12 are
// unsigned and small, so a block sums as Q4_0's does: maddubs(w + 12, a)
// (a pair <= 2 * 24 * 127, no saturation) into 16-bit lanes that start at
// -12 x the sums of the activations they meet (1.5 x q4_bias, exact: q4_bias
// is -8 x a sum). A lane ends at sum w a, at most 16 * 12 * 127 = 24384 in
// magnitude: exact although the running sum may wrap. Scales: E8M0 (load_dw).
struct PanelMXFP4 {
  static constexpr size_t kQuantBytes = 256;
  static constexpr size_t kScaleBytes = 1;
  static constexpr const std::array<uint8_t, 16>& kLevels = kMxfp4LevelsU8;
  template <int C>
  static void block(const uint8_t* q, int h, const BlockQ8* const* xb, __m256i s32[C]) {
    __m256i s16[C];
    for (int c = 0; c < C; ++c) {
      const __m256i b = bcast4(xb[c]->q4_bias);
      s16[c] = _mm256_add_epi16(b, _mm256_srai_epi16(b, 1));
    }
    const __m256i m = _mm256_set1_epi8(0x0F);
    const __m256i table =
        _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(kLevels.data())));
#pragma GCC unroll 1
    for (int l = 0; l < 4; ++l) {
      const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + 64 * l + 32 * h));
      const __m256i lo = _mm256_shuffle_epi8(table, _mm256_and_si256(v, m));
      const __m256i hi = _mm256_shuffle_epi8(table, _mm256_and_si256(_mm256_srli_epi16(v, 4), m));
      for (int c = 0; c < C; ++c) {
        s16[c] = _mm256_add_epi16(s16[c], _mm256_maddubs_epi16(lo, bcast4(xb[c]->qs + 4 * l)));
        s16[c] = _mm256_add_epi16(s16[c], _mm256_maddubs_epi16(hi, bcast4(xb[c]->qs + 16 + 4 * l)));
      }
    }
    for (int c = 0; c < C; ++c) s32[c] = _mm256_madd_epi16(s16[c], _mm256_set1_epi16(1));
  }
};

// The weight scales of half h (8 rows) of a panel's block b: f16 (32 bytes a
// block), or MXFP4's E8M0 bytes (16 a block) as e8m0_to_fp32_half, exactly:
// 2^(e - 128) is (e - 1) << 23 as float bits for e >= 2, and the subnormal
// 0x00200000 << e below.
template <class P>
inline __m256 load_dw(const uint8_t* scales, int64_t b, int h) {
  if constexpr (panel_scale_bytes<P>() == 1) {
    const __m256i e = _mm256_cvtepu8_epi32(
        _mm_loadl_epi64(reinterpret_cast<const __m128i*>(scales + 16 * b + 8 * h)));
    const __m256i normal = _mm256_slli_epi32(_mm256_sub_epi32(e, _mm256_set1_epi32(1)), 23);
    const __m256i tiny = _mm256_sllv_epi32(_mm256_set1_epi32(0x00200000), e);
    const __m256i big = _mm256_cmpgt_epi32(e, _mm256_set1_epi32(1));
    return _mm256_castsi256_ps(_mm256_blendv_epi8(tiny, normal, big));
  } else {
    return _mm256_cvtph_ps(
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(scales + 32 * b + 16 * h)));
  }
}

// One panel (16 rows), blocks [b0, b1), times columns x[0 .. C). With up to
// two columns both halves (8 rows each) go in one pass over the blocks, so a
// GEMV reads its panel once; with more, one half a pass, so the C
// accumulators, the C block sums and the weights fit the 16 ymm registers
// (with both halves' 2C accumulators live GCC spilled the sums, and every add
// waited on a store-to-load forward: GEMM ran at ~0.6x).
template <class P, int C>
void panel_tile(const PanelSpan& p, const BlockQ8* const* x, float* const* out) {
  constexpr int kHalves = C <= 2 ? 2 : 1;  // halves a pass
  for (int h0 = 0; h0 < 2; h0 += kHalves) {
    if (8 * h0 >= p.valid) break;
    __m256 acc[kHalves][C];
    for (auto& a : acc) {
      for (__m256& v : a) v = _mm256_setzero_ps();
    }
    for (int64_t b = p.b0; b < p.b1; ++b) {
      const uint8_t* q = p.quants + static_cast<size_t>(b) * P::kQuantBytes;
      if (h0 == 0) prefetch_block<P::kQuantBytes, panel_scale_bytes<P>()>(p.scales, q, b);
      const BlockQ8* xb[C];
      for (int c = 0; c < C; ++c) xb[c] = x[c] + b;
      for (int hh = 0; hh < kHalves; ++hh) {
        const int h = h0 + hh;
        const __m256 dw = load_dw<P>(p.scales, b, h);
        __m256i s[C];
        P::template block<C>(q, h, xb, s);
        for (int c = 0; c < C; ++c) {
          acc[hh][c] =
              _mm256_fmadd_ps(_mm256_cvtepi32_ps(s[c]),
                              _mm256_mul_ps(dw, _mm256_broadcast_ss(&xb[c]->d)), acc[hh][c]);
        }
      }
    }
    for (int hh = 0; hh < kHalves; ++hh) {
      const int h = h0 + hh;
      const int rows = p.valid - 8 * h < 8 ? p.valid - 8 * h : 8;
      for (int c = 0; c < C && rows > 0; ++c) {
        float* o = out[c] + 8 * h;
        if (rows == 8) {
          _mm256_storeu_ps(
              o, p.accumulate ? _mm256_add_ps(_mm256_loadu_ps(o), acc[hh][c]) : acc[hh][c]);
          continue;
        }
        alignas(32) float tmp[8];
        _mm256_store_ps(tmp, acc[hh][c]);
        for (int r = 0; r < rows; ++r) o[r] = p.accumulate ? o[r] + tmp[r] : tmp[r];
      }
    }
  }
}

// GEMV on Q4_0 (one column): both halves per block, each broadcast loaded
// once for the 16 rows, two s16 chains a half. The generic tile reloaded the
// broadcasts per half and ran one chain: ~20 GB/s a core from L3.
void gemv_q4_0(const PanelSpan& p, const BlockQ8* const* x, float* const* out) {
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  const __m256i m = _mm256_set1_epi8(0x0F);
  const __m256i ones = _mm256_set1_epi16(1);
  for (int64_t b = p.b0; b < p.b1; ++b) {
    const uint8_t* q = p.quants + static_cast<size_t>(b) * PanelQ4_0::kQuantBytes;
    prefetch_block<PanelQ4_0::kQuantBytes>(p.scales, q, b);
    const BlockQ8* xb = x[0] + b;
    const __m256i bias = bcast4(xb->q4_bias);
    __m256i s0a = bias, s0b = _mm256_setzero_si256();
    __m256i s1a = bias, s1b = _mm256_setzero_si256();
    for (int l = 0; l < 4; ++l) {
      const __m256i v0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + 64 * l));
      const __m256i v1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + 64 * l + 32));
      const __m256i blo = bcast4(xb->qs + 4 * l);
      const __m256i bhi = bcast4(xb->qs + 16 + 4 * l);
      s0a = _mm256_add_epi16(s0a, _mm256_maddubs_epi16(_mm256_and_si256(v0, m), blo));
      s1a = _mm256_add_epi16(s1a, _mm256_maddubs_epi16(_mm256_and_si256(v1, m), blo));
      s0b = _mm256_add_epi16(
          s0b, _mm256_maddubs_epi16(_mm256_and_si256(_mm256_srli_epi16(v0, 4), m), bhi));
      s1b = _mm256_add_epi16(
          s1b, _mm256_maddubs_epi16(_mm256_and_si256(_mm256_srli_epi16(v1, 4), m), bhi));
    }
    const __m256i i0 = _mm256_madd_epi16(_mm256_add_epi16(s0a, s0b), ones);
    const __m256i i1 = _mm256_madd_epi16(_mm256_add_epi16(s1a, s1b), ones);
    const __m256 dx = _mm256_broadcast_ss(&xb->d);
    const __m256 dw0 =
        _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p.scales + 32 * b)));
    const __m256 dw1 =
        _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p.scales + 32 * b + 16)));
    acc0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(i0), _mm256_mul_ps(dw0, dx), acc0);
    acc1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(i1), _mm256_mul_ps(dw1, dx), acc1);
  }
  alignas(32) float tmp[kPanelRows];
  _mm256_store_ps(tmp, acc0);
  _mm256_store_ps(tmp + 8, acc1);
  for (int r = 0; r < p.valid; ++r) out[0][r] = p.accumulate ? out[0][r] + tmp[r] : tmp[r];
}

template <class P>
struct Tiles {
  static constexpr int kMaxCols = kTileColumns;
  static constexpr size_t kScaleBytes = panel_scale_bytes<P>();
  template <int C>
  static void tile(const PanelSpan& p, const BlockQ8* const* x, float* const* out) {
    if constexpr (C == 1 && std::is_same_v<P, PanelQ4_0>) {
      gemv_q4_0(p, x, out);
    } else {
      panel_tile<P, C>(p, x, out);
    }
  }
};

// Q4_0 and Q8_0 GEMVs over two panels at once (run_gemv_groups, panels.h).
// On a 2-vCPU Sapphire Rapids guest (this tier forced) Q8_0 GEMV went from
// 0.66-0.77 to 0.84-0.95 of the ymm read probe (four streams: 0.83-0.85),
// and Q4_0 decode (TinyLlama shape, 2 threads) from 38.5 to 44-45 tok/s
// (four streams: 45-46, but 16 ymm registers do not hold four panels' sums:
// GCC spills them every block, which an arithmetic-bound Zen 3 would feel).
constexpr int kStreams = 2;

// acc + float(s) * d_w * d_x, d_w: half h (8 rows) of a panel's block b scales.
template <class P = PanelQ4_0>
inline __m256 scale_add(__m256 acc, __m256i s, const uint8_t* scales, int64_t b, int h,
                        __m256 dx) {
  return _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_mul_ps(load_dw<P>(scales, b, h), dx), acc);
}

// A GEMV group's outputs: panels p0 + i * stride, 16 rows each (the
// matrix's last panel may have fewer).
template <int N>
void store_group(const MatArgs& a, int64_t p0, int64_t stride, const __m256 (&acc)[N][2]) {
  for (int i = 0; i < N; ++i) {
    alignas(32) float tmp[kPanelRows];
    _mm256_store_ps(tmp, acc[i][0]);
    _mm256_store_ps(tmp + 8, acc[i][1]);
    const int64_t r0 = (p0 + i * stride) * kPanelRows;
    const int64_t valid = min_i64(a.rows - r0, kPanelRows);
    std::memcpy(a.out + r0, tmp, static_cast<size_t>(valid) * sizeof(float));
  }
}

template <class P>
struct GemvGroup {
  template <int N>
  static void run(const MatArgs& a, int64_t p0, int64_t stride) {
    const int64_t nb = a.k / kQK;
    const auto* x = reinterpret_cast<const BlockQ8*>(a.x);
    constexpr size_t kScaleBytes = panel_scale_bytes<P>();
    const PanelGroup<N> group(a, p0, stride, kScaleBytes);
    __m256 acc[N][2];
    for (auto& v : acc) v[0] = v[1] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
      const BlockQ8* xb[1] = {x + b};
      const __m256 dx = _mm256_broadcast_ss(&x[b].d);
      for (int i = 0; i < N; ++i) {
        const uint8_t* q = group.quants[i] + static_cast<size_t>(b) * P::kQuantBytes;
        prefetch_block<P::kQuantBytes, kScaleBytes>(group.scales[i], q, b);
        for (int h = 0; h < 2; ++h) {
          __m256i s[1];
          P::template block<1>(q, h, xb, s);
          acc[i][h] = scale_add<P>(acc[i][h], s[0], group.scales[i], b, h, dx);
        }
      }
    }
    store_group<N>(a, p0, stride, acc);
  }
};

// Q4_0 and MXFP4 GEMV over N panels at once (run_gemv_groups): gemv_q4_0's
// sums, with each 4-k group's two activation broadcasts loaded once for all
// N panels. MXFP4 maps its nibbles to w + 12 (PanelMXFP4) and starts at 1.5x
// Q4_0's bias; through the generic tile (broadcasts per half, one chain) its
// GEMVs read 0.49 of the probe in gpt-oss's decode on a Zen 3.
template <class P>
struct GemvGroupNibbles {
  static constexpr bool kMx = std::is_same_v<P, PanelMXFP4>;
  static constexpr size_t kScaleBytes = panel_scale_bytes<P>();
  template <int N>
  static void run(const MatArgs& a, int64_t p0, int64_t stride) {
    const int64_t nb = a.k / kQK;
    const auto* x = reinterpret_cast<const BlockQ8*>(a.x);
    const PanelGroup<N> group(a, p0, stride, kScaleBytes);
    const __m256i m = _mm256_set1_epi8(0x0F);
    const __m256i ones = _mm256_set1_epi16(1);
    __m256i table = _mm256_setzero_si256();
    if constexpr (kMx) {
      table = _mm256_broadcastsi128_si256(
          _mm_loadu_si128(reinterpret_cast<const __m128i*>(PanelMXFP4::kLevels.data())));
    }
    const auto levels = [&](__m256i nibbles) {
      if constexpr (kMx) {
        return _mm256_shuffle_epi8(table, nibbles);
      } else {
        return nibbles;
      }
    };
    __m256 acc[N][2];
    for (auto& v : acc) v[0] = v[1] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
      const BlockQ8& xb = x[b];
      __m256i bias = bcast4(xb.q4_bias);
      if constexpr (kMx) bias = _mm256_add_epi16(bias, _mm256_srai_epi16(bias, 1));
      __m256i sa[N][2], sb[N][2];  // [panel][half]: low / high nibble chains
      const uint8_t* q[N];
      for (int i = 0; i < N; ++i) {
        q[i] = group.quants[i] + static_cast<size_t>(b) * P::kQuantBytes;
        prefetch_block<P::kQuantBytes, kScaleBytes>(group.scales[i], q[i], b);
        sa[i][0] = sa[i][1] = bias;
        sb[i][0] = sb[i][1] = _mm256_setzero_si256();
      }
      for (int l = 0; l < 4; ++l) {
        const __m256i blo = bcast4(xb.qs + 4 * l);
        const __m256i bhi = bcast4(xb.qs + 16 + 4 * l);
        for (int i = 0; i < N; ++i) {
          for (int h = 0; h < 2; ++h) {
            const __m256i v =
                _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q[i] + 64 * l + 32 * h));
            sa[i][h] = _mm256_add_epi16(sa[i][h],
                                        _mm256_maddubs_epi16(levels(_mm256_and_si256(v, m)), blo));
            sb[i][h] = _mm256_add_epi16(
                sb[i][h],
                _mm256_maddubs_epi16(levels(_mm256_and_si256(_mm256_srli_epi16(v, 4), m)), bhi));
            // Keep each chain a chain: left free, GCC regroups the unrolled adds into trees
            // whose products outnumber the 16 ymm registers (spills on every block).
            __asm__("" : "+x"(sa[i][h]), "+x"(sb[i][h]));
          }
        }
      }
      const __m256 dx = _mm256_broadcast_ss(&xb.d);
      for (int i = 0; i < N; ++i) {
        for (int h = 0; h < 2; ++h) {
          const __m256i s = _mm256_madd_epi16(_mm256_add_epi16(sa[i][h], sb[i][h]), ones);
          acc[i][h] = scale_add<P>(acc[i][h], s, group.scales[i], b, h, dx);
        }
      }
    }
    store_group<N>(a, p0, stride, acc);
  }
};

}  // namespace

void mat_q4_0_panel(const MatArgs& a) {
  run_gemv_groups<Tiles<PanelQ4_0>, GemvGroupNibbles<PanelQ4_0>, kStreams>(a);
}
void mat_iq4_nl_panel(const MatArgs& a) {
  run_gemv_groups<Tiles<PanelIQ4_NL>, GemvGroup<PanelIQ4_NL>, kStreams>(a);
}
void mat_q8_0_panel(const MatArgs& a) {
  run_gemv_groups<Tiles<PanelQ8_0>, GemvGroup<PanelQ8_0>, kStreams>(a);
}
void mat_mxfp4_panel(const MatArgs& a) {
  run_gemv_groups<Tiles<PanelMXFP4>, GemvGroupNibbles<PanelMXFP4>, kStreams>(a);
}

}  // namespace tessera::cpu::avx2
