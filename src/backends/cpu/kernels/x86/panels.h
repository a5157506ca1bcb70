// The loop over 16-row panels shared by the avx2 and avx512 panel kernels:
// panels in order; within a panel, columns in groups of T::kMaxCols, so the
// panel stays in L1 while activation columns stream past it. T supplies
//   template <int C> static void tile(panel, blocks, x[C], out[C], valid_rows).
// Include in a tier's translation unit; internal linkage per tier.
#pragma once

#include <immintrin.h>

#include <utility>

#include "cpu/kernels/kernels.h"
#include "cpu/kernels/repack.h"
#include "cpu/kernels/x86/fn_table.h"

namespace tessera::cpu {
namespace {

// Software prefetch: every line of the quants kPrefetchAhead bytes ahead of
// the one being read, and the scales as many blocks ahead, on every tier.
// Measured on a 2-vCPU Sapphire Rapids guest, 2 threads, against the read
// probe: 2 KiB ahead beat 1, 4 and 8 KiB, every other line (this L2 does not
// fetch a line's 128-byte pair) and prefetcht1. With the avx2 tier forced,
// GEMV Q4_0 2048x5632 / Q8_0 5632x2048 read 0.75-0.84 / 0.82-0.89 of it with
// no software prefetch, 0.61-0.62 / 0.68-0.69 with every other line 8 KiB
// ahead, and 0.88-0.90 / 0.91-0.98 with this policy.
// always_inline is what keeps it in the GEMV group kernels: as a plain inline
// function GCC 12 did not inline it early, took a function whose only effect
// is __builtin_prefetch for `const`, and deleted the calls (docs/cpu-kernels.md, "GEMV and
// prefetch"; tests/backends/prefetch_check.sh guards it).
inline constexpr size_t kPrefetchAhead = 2048;

// What a kernel reading block b of a panel (its quants at `quants`)
// prefetches: the block kPrefetchAhead bytes further on in the same panel,
// and its scales (kScaleBytes per row: 2, f16; MXFP4: 1, E8M0).
template <size_t kQuantBytes, size_t kScaleBytes = 2>
[[gnu::always_inline]] inline void prefetch_block(const uint8_t* scales, const uint8_t* quants,
                                                  int64_t b) {
  static_assert(kPrefetchAhead % kQuantBytes == 0);
  constexpr int64_t kAhead = kPrefetchAhead / kQuantBytes;  // blocks
  constexpr int64_t kPerLine = 64 / (16 * kScaleBytes);     // blocks per line of scales
  for (size_t l = 0; l < kQuantBytes; l += 64) {
    _mm_prefetch(reinterpret_cast<const char*>(quants + kPrefetchAhead + l), _MM_HINT_T0);
  }
  if (b % kPerLine == 0) {
    _mm_prefetch(reinterpret_cast<const char*>(scales + 16 * kScaleBytes * (b + kAhead)),
                 _MM_HINT_T0);
  }
}

// Scale bytes per row and block of a panel kernel's weights: P::kScaleBytes
// where P says (MXFP4: 1), else 2 (one f16).
template <class P>
constexpr size_t panel_scale_bytes() {
  if constexpr (requires { P::kScaleBytes; }) {
    return P::kScaleBytes;
  } else {
    return 2;
  }
}

// One tile call: a panel's blocks [b0, b1) against up to T::kMaxCols columns.
struct PanelSpan {
  const uint8_t* scales;  // the panel's scales, [blocks][16] (f16, or MXFP4's E8M0 bytes)
  const uint8_t* quants;  // the panel's quants, [blocks][quant bytes]
  int64_t b0, b1;
  int valid;        // rows of the panel to write (the last panel may be partial)
  bool accumulate;  // add to what out holds (a later K slice) instead of storing
};

// Panel p's scales ([blocks][16], scale_bytes a row) and the quants after
// them (repack.h).
inline const uint8_t* panel_scales(const MatArgs& a, int64_t p) {
  return a.w + static_cast<size_t>(p) * a.w_stride;
}
inline const uint8_t* panel_quants(const MatArgs& a, int64_t p, size_t scale_bytes = 2) {
  return panel_scales(a, p) + static_cast<size_t>(a.k / kQK) * kPanelRows * scale_bytes;
}

// Panels p0 + i * stride (i < N) read together by a GEMV group
// (run_gemv_groups): panel i's scales and quants.
template <int N>
struct PanelGroup {
  const uint8_t* scales[N];
  const uint8_t* quants[N];
  PanelGroup(const MatArgs& a, int64_t p0, int64_t stride, size_t scale_bytes = 2) {
    for (int i = 0; i < N; ++i) {
      scales[i] = panel_scales(a, p0 + i * stride);
      quants[i] = panel_quants(a, p0 + i * stride, scale_bytes);
    }
  }
};

// GEMM walks K in slices of this many blocks (Q8_0: 34 KiB of one panel, Q4_0:
// 18 KiB), so the slice stays in L1 while every column group passes over it.
inline constexpr int64_t kSliceBlocks = 64;

template <class T>
struct PanelLoop {
  using TileFn = void (*)(const PanelSpan&, const BlockQ8* const*, float* const*);
  template <size_t... I>
  static constexpr FnTable<TileFn, sizeof...(I)> make(std::index_sequence<I...>) {
    return {&T::template tile<static_cast<int>(I) + 1>...};
  }

  // GEMV (one column group): each panel whole, in memory order. GEMM: K
  // slices outermost, then panels, then column groups.
  static void run(const MatArgs& a) {
    static constexpr auto kTiles = make(std::make_index_sequence<T::kMaxCols>{});
    const int64_t nb = a.k / kQK;
    const int64_t slice = a.cols > T::kMaxCols ? kSliceBlocks : (nb > 0 ? nb : 1);
    const BlockQ8* x[T::kMaxCols];
    float* out[T::kMaxCols];
    for (int64_t b0 = 0; b0 < (nb > 0 ? nb : 1); b0 += slice) {
      for (int64_t r0 = 0; r0 < a.rows; r0 += kPanelRows) {
        PanelSpan span{panel_scales(a, r0 / kPanelRows),
                       panel_quants(a, r0 / kPanelRows, panel_scale_bytes<T>()),
                       b0,
                       min_i64(nb, b0 + slice),
                       static_cast<int>(min_i64(a.rows - r0, kPanelRows)),
                       b0 > 0};
        for (int64_t c0 = 0; c0 < a.cols; c0 += T::kMaxCols) {
          const int nc = static_cast<int>(min_i64(a.cols - c0, T::kMaxCols));
          for (int c = 0; c < nc; ++c) {
            x[c] = reinterpret_cast<const BlockQ8*>(a.x + static_cast<size_t>(c0 + c) * a.x_stride);
            out[c] = reinterpret_cast<float*>(reinterpret_cast<uint8_t*>(a.out) +
                                              static_cast<size_t>(c0 + c) * a.out_stride) +
                     r0;
          }
          kTiles.at[static_cast<size_t>(nc - 1)](span, x, out);
        }
      }
    }
  }
};

// A one-column GEMV in groups of kN panels read at once, block by block: kN
// forward streams in flight instead of one, which a core's hardware
// prefetchers turn into more outstanding lines. The panels are cut into kN
// runs, and group j reads panel j of each (Group::template run<kN>(a, j,
// stride): panels j + i * stride), so each stream walks one run front to
// back and its prefetches past a panel's end land on the panel it reads
// next. The panels left over, and every other shape, go through PanelLoop<T>.
template <class T, class Group, int kN>
void run_gemv_groups(const MatArgs& a) {
  if (a.cols != 1 || a.k < kQK) {
    PanelLoop<T>::run(a);
    return;
  }
  const int64_t panels = (a.rows + kPanelRows - 1) / kPanelRows;
  const int64_t stride = panels / kN;
  for (int64_t j = 0; j < stride; ++j) Group::template run<kN>(a, j, stride);
  const int64_t p = stride * kN;
  if (p == panels) return;
  MatArgs rest = a;
  rest.w = panel_scales(a, p);
  rest.rows -= p * kPanelRows;
  rest.out += p * kPanelRows;
  PanelLoop<T>::run(rest);
}

}  // namespace
}  // namespace tessera::cpu
