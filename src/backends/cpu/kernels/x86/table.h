// The kernel table of an x86 tier, written once: the avx2 and avx512 tables
// differ only in the vector type V (vec.h), the int8 dot-product policy Dot
// (maddubs or vpdpbusd), the tile sizes and the panel kernels (which differ
// inside: zmm vs two ymm halves, see each tier's panel.cpp; the loop over
// panels is shared in panels.h).
// Include after the tier's vec.h; internal linkage per tier.
#pragma once

#include "cpu/kernels/kernels.h"
#include "cpu/kernels/x86/attn.h"
#include "cpu/kernels/x86/attn_tiles.h"
#include "cpu/kernels/x86/float_mat.h"
#include "cpu/kernels/x86/norm.h"
#include "cpu/kernels/x86/quantize.h"
#include "cpu/kernels/x86/row_dot.h"

namespace tessera::cpu {
namespace {

struct TileSizes {
  int float_rows, float_cols;            // FloatTiles register tile
  int row_cols;                          // columns per RowDot call
  int f16_gemv_panels;                   // F16Panels: panels per GEMV tile ...
  int f16_cols;                          // ... and columns per GEMM tile
  int attn_score_vecs, attn_score_keys;  // AttnTiles: score tile, row vectors x keys ...
  int attn_pv_rows, attn_pv_vecs;        // ... and output tile, rows x dv vectors
};

// Rows per GEMM chunk for F16 panels: TinyLlama-shape F16 pp512 on a
// Sapphire Rapids guest (2 threads) ran 101-103 tok/s at 64 rows, 106 at 256
// and 113-115 at 1024 (a column group's k slice is reused by more panels).
inline constexpr int64_t kF16GemmRows = 1024;

// A tier's own panel kernels (each tier's panel.cpp / kpanel.cpp).
struct PanelFns {
  void (*q4_0)(const MatArgs&), (*q8_0)(const MatArgs&), (*iq4_nl)(const MatArgs&);
  void (*mxfp4)(const MatArgs&);
  void (*q2_k)(const MatArgs&), (*q3_k)(const MatArgs&);
  void (*q4_k)(const MatArgs&), (*q5_k)(const MatArgs&), (*q6_k)(const MatArgs&);
  void (*iq4_xs)(const MatArgs&);
};

template <class V, class Dot, TileSizes kT>
struct X86Table {
  template <class Fmt>
  static void legacy(const MatArgs& a) {
    RowDot<LegacyRow<Dot, Fmt>::template Fn, kT.row_cols>::run(a);
  }

  static constexpr Kernels make(Isa isa, PanelFns p) {
    return Kernels{
        .isa = isa,
        .quantize_q8 = quantize_q8<V>,
        .quantize_q8_k = quantize_q8_k<V>,
        .to_f16 = to_f16_row,
        .f32 = {FloatTiles<V, LoadF32<V>, kT.float_rows, kT.float_cols>::run, ActFormat::kF32},
        .f16 = {FloatTiles<V, LoadF16<V>, kT.float_rows, kT.float_cols>::run, ActFormat::kF32},
        .bf16 = {FloatTiles<V, LoadBF16<V>, kT.float_rows, kT.float_cols>::run, ActFormat::kF32},
        .q4_0 = {legacy<FmtQ4_0>, ActFormat::kQ8},
        .q4_1 = {legacy<FmtQ4_1>, ActFormat::kQ8},
        .q5_0 = {legacy<FmtQ5_0>, ActFormat::kQ8},
        .q5_1 = {legacy<FmtQ5_1>, ActFormat::kQ8},
        .q8_0 = {legacy<FmtQ8_0>, ActFormat::kQ8},
        .q4_k = {RowDot<Q4KRow<Dot>::template Fn, kT.row_cols>::run, ActFormat::kQ8K},
        .q6_k = {RowDot<Q6KRow<Dot>::template Fn, kT.row_cols>::run, ActFormat::kQ8K},
        .q4_0_panel = {p.q4_0, ActFormat::kQ8},
        .q8_0_panel = {p.q8_0, ActFormat::kQ8},
        .iq4_nl_panel = {p.iq4_nl, ActFormat::kQ8},
        .mxfp4_panel = {p.mxfp4, ActFormat::kQ8},
        .f16_panel = {F16Panels<V, kT.f16_gemv_panels, kT.f16_cols>::run, ActFormat::kF32Groups,
                      kF16GemmRows},
        .q2_k_panel = {p.q2_k, ActFormat::kQ8K},
        .q3_k_panel = {p.q3_k, ActFormat::kQ8K},
        .q4_k_panel = {p.q4_k, ActFormat::kQ8K},
        .q5_k_panel = {p.q5_k, ActFormat::kQ8K},
        .q6_k_panel = {p.q6_k, ActFormat::kQ8K},
        .iq4_xs_panel = {p.iq4_xs, ActFormat::kQ8K},
        .attn_f16 = Attn<V>::run,
        .attn_f16_tiles = AttnTiles<V, kT.attn_score_vecs, kT.attn_score_keys, kT.attn_pv_rows,
                                    kT.attn_pv_vecs>::run,
        .rms_norm = rms_norm_row<V>,
        .exp_sum = exp_sum_row<V>,
        .silu_mul = silu_mul_row<V>,
        .gelu = gelu_row<V>,
    };
  }
};

}  // namespace
}  // namespace tessera::cpu
