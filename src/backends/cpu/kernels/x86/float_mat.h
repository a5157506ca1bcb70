// F32 / F16 / BF16 weights times f32 activations, over a tier's vector type V.
// Register tiles of kR rows x kC columns (tinyBLAS's shape): per step of
// V::kLanes along k, kR weight loads (converted to f32, exact) and kC
// activation loads feed kR * kC FMAs; one horizontal sum per output at the end.
// Include after the tier's vec.h; internal linkage per tier.
#pragma once

#include <immintrin.h>

#include <cstring>
#include <utility>

#include "cpu/kernels/kernels.h"
#include "cpu/kernels/repack.h"
#include "cpu/kernels/x86/fn_table.h"

namespace tessera::cpu {
namespace {

template <class V>
struct LoadF32 {
  using T = float;
  static typename V::F load(const T* p) { return V::load(p); }
  static typename V::F load_n(const T* p, int n) { return V::load_n(p, n); }
};
template <class V>
struct LoadF16 {
  using T = uint16_t;
  static typename V::F load(const T* p) { return V::load_f16(p); }
  static typename V::F load_n(const T* p, int n) { return V::load_f16_n(p, n); }
};
template <class V>
struct LoadBF16 {
  using T = uint16_t;
  static typename V::F load(const T* p) { return V::load_bf16(p); }
  static typename V::F load_n(const T* p, int n) { return V::load_bf16_n(p, n); }
};

inline constexpr size_t kRowPrefetchBytes = 2048;

// Outputs (r0 .. r0 + R) x (c0 .. c0 + C).
template <class V, class L, int R, int C>
void float_tile(const MatArgs& a, int64_t r0, int64_t c0) {
  using F = typename V::F;
  const typename L::T* w[R];
  const float* x[C];
  for (int r = 0; r < R; ++r) {
    w[r] = reinterpret_cast<const typename L::T*>(a.w + static_cast<size_t>(r0 + r) * a.w_stride);
  }
  for (int c = 0; c < C; ++c) {
    x[c] = reinterpret_cast<const float*>(a.x + static_cast<size_t>(c0 + c) * a.x_stride);
  }
  F acc[R][C];
  for (int r = 0; r < R; ++r) {
    for (int c = 0; c < C; ++c) acc[r][c] = V::zero();
  }
  int64_t i = 0;
  for (; i + V::kLanes <= a.k; i += V::kLanes) {
    if constexpr (C <= 2) {  // GEMV: streaming R rows, prefetch each ~2 KiB ahead
      for (int r = 0; r < R; ++r) {
        _mm_prefetch(reinterpret_cast<const char*>(w[r] + i) + kRowPrefetchBytes, _MM_HINT_T0);
      }
    }
    F xv[C];
    for (int c = 0; c < C; ++c) xv[c] = V::load(x[c] + i);
    for (int r = 0; r < R; ++r) {
      const F wv = L::load(w[r] + i);
      for (int c = 0; c < C; ++c) acc[r][c] = V::fma(wv, xv[c], acc[r][c]);
    }
  }
  if (i < a.k) {  // zero-filled tail
    const int n = static_cast<int>(a.k - i);
    F xv[C];
    for (int c = 0; c < C; ++c) xv[c] = V::load_n(x[c] + i, n);
    for (int r = 0; r < R; ++r) {
      const F wv = L::load_n(w[r] + i, n);
      for (int c = 0; c < C; ++c) acc[r][c] = V::fma(wv, xv[c], acc[r][c]);
    }
  }
  for (int c = 0; c < C; ++c) {
    float* out = reinterpret_cast<float*>(reinterpret_cast<uint8_t*>(a.out) +
                                          static_cast<size_t>(c0 + c) * a.out_stride);
    for (int r = 0; r < R; ++r) out[r0 + r] = V::hsum(acc[r][c]);
  }
}

// Tiles of every size up to kR x kC, so edges need no scalar code:
// tiles[r - 1][c - 1] computes r rows by c columns.
template <class V, class L, int kR, int kC>
struct FloatTiles {
  using Fn = void (*)(const MatArgs&, int64_t, int64_t);
  template <size_t... I>
  static constexpr FnTable<Fn, kR * kC> make(std::index_sequence<I...>) {
    return {&float_tile<V, L, static_cast<int>(I / kC) + 1, static_cast<int>(I % kC) + 1>...};
  }
  static constexpr FnTable<Fn, kR* kC> kTiles = make(std::make_index_sequence<kR * kC>{});

  static void run(const MatArgs& a) {
    for (int64_t c0 = 0; c0 < a.cols; c0 += kC) {
      const int64_t nc = a.cols - c0 < kC ? a.cols - c0 : kC;
      for (int64_t r0 = 0; r0 < a.rows; r0 += kR) {
        const int64_t nr = a.rows - r0 < kR ? a.rows - r0 : kR;
        kTiles.at[static_cast<size_t>((nr - 1) * kC + (nc - 1))](a, r0, c0);
      }
    }
  }
};

// F16 weights repacked into 16-row panels (repack.h: per k, element k of the
// panel's 16 rows, 32 bytes), in outer-product form: per k, the 16 weights
// (kH vectors, converted once) times each column's x[k] broadcast, into
// accumulators of 16 rows each; no horizontal sums. Each output is one
// sequential f32 sum over k. P panels x C columns per tile: GEMM tiles take
// one panel and many columns, GEMV several panels at once (forward streams).
// x(k, c) is xp[k * ks + c]: GEMM columns come k-major (kF32Groups), so
// every broadcast is one pointer plus a constant, not C pointers.
// k runs over [k0, k1) (xp at k0); `accumulate`: add to what out holds.
template <class V, int P, int C>
void f16_panel_tile(const MatArgs& a, int64_t p0, int64_t c0, const float* xp, int64_t ks,
                    int64_t k0, int64_t k1, bool accumulate) {
  using F = typename V::F;
  constexpr int kH = kPanelRows / V::kLanes;
  const uint16_t* w[P];
  for (int p = 0; p < P; ++p) {
    w[p] = reinterpret_cast<const uint16_t*>(a.w + static_cast<size_t>(p0 + p) * a.w_stride);
  }
  F acc[P][kH][C];
  for (int p = 0; p < P; ++p) {
    for (int h = 0; h < kH; ++h) {
      for (int c = 0; c < C; ++c) acc[p][h][c] = V::zero();
    }
  }
  for (int64_t k = k0; k < k1; ++k, xp += ks) {
    F wv[P][kH];
    for (int p = 0; p < P; ++p) {
      const uint16_t* wk = w[p] + k * kPanelRows;
      if constexpr (C == 1) {  // GEMV: one line per two k; prefetch ~2 KiB ahead
        if (k % 2 == 0) {
          _mm_prefetch(reinterpret_cast<const char*>(wk) + kRowPrefetchBytes, _MM_HINT_T0);
        }
      }
      for (int h = 0; h < kH; ++h) wv[p][h] = V::load_f16(wk + h * V::kLanes);
    }
    for (int c = 0; c < C; ++c) {
      const F xb = V::set1(xp[c]);
      for (int p = 0; p < P; ++p) {
        for (int h = 0; h < kH; ++h) acc[p][h][c] = V::fma(wv[p][h], xb, acc[p][h][c]);
      }
    }
  }
  for (int p = 0; p < P; ++p) {
    const int64_t r0 = (p0 + p) * kPanelRows;
    const int64_t valid = a.rows - r0 < kPanelRows ? a.rows - r0 : kPanelRows;
    for (int c = 0; c < C; ++c) {
      float* out = reinterpret_cast<float*>(reinterpret_cast<uint8_t*>(a.out) +
                                            static_cast<size_t>(c0 + c) * a.out_stride) +
                   r0;
      // The padding rows of the last panel are not outputs.
      alignas(64) float rows[kPanelRows] = {};
      float* dst = valid == kPanelRows ? out : rows;
      if (accumulate && valid < kPanelRows) std::memcpy(rows, out, static_cast<size_t>(valid) * 4);
      for (int h = 0; h < kH; ++h) {
        F v = acc[p][h][c];
        if (accumulate) v = V::add(v, V::load(dst + h * V::kLanes));
        V::store(dst + h * V::kLanes, v);
      }
      if (dst == rows) std::memcpy(out, rows, static_cast<size_t>(valid) * sizeof(float));
    }
  }
}

// Activations come as ActFormat::kF32Groups: groups of up to kActGroup
// columns, k-major. GEMV (one column: plain f32): kGemvPanels panels at a
// time. Otherwise, per group, columns in tiles of up to kCols, k in slices
// of kSliceK (16 columns: 16 KiB, in L1), each slice against every panel in
// turn, the outputs summed over the slices.
template <class V, int kGemvPanels, int kCols>
struct F16Panels {
  static constexpr int64_t kSliceK = 256;
  using Fn = void (*)(const MatArgs&, int64_t, int64_t, const float*, int64_t, int64_t, int64_t,
                      bool);
  template <size_t... I>
  static constexpr FnTable<Fn, sizeof...(I)> make(std::index_sequence<I...>) {
    return {&f16_panel_tile<V, 1, static_cast<int>(I) + 1>...};
  }

  static void run(const MatArgs& a) {
    static constexpr auto kTiles = make(std::make_index_sequence<kCols>{});
    const int64_t panels = (a.rows + kPanelRows - 1) / kPanelRows;
    if (a.cols == 1) {
      const auto* x = reinterpret_cast<const float*>(a.x);
      int64_t p = 0;
      for (; p + kGemvPanels <= panels; p += kGemvPanels) {
        f16_panel_tile<V, kGemvPanels, 1>(a, p, 0, x, 1, 0, a.k, false);
      }
      for (; p < panels; ++p) f16_panel_tile<V, 1, 1>(a, p, 0, x, 1, 0, a.k, false);
      return;
    }
    for (int64_t g0 = 0; g0 < a.cols; g0 += kActGroup) {
      const int64_t width = a.cols - g0 < kActGroup ? a.cols - g0 : kActGroup;
      const auto* group =
          reinterpret_cast<const float*>(a.x + static_cast<size_t>(g0) * a.x_stride);
      for (int64_t c0 = 0; c0 < width; c0 += kCols) {
        const int64_t nc = width - c0 < kCols ? width - c0 : kCols;
        for (int64_t k0 = 0; k0 < a.k; k0 += kSliceK) {
          const int64_t k1 = a.k - k0 < kSliceK ? a.k : k0 + kSliceK;
          for (int64_t p = 0; p < panels; ++p) {
            kTiles.at[static_cast<size_t>(nc - 1)](a, p, g0 + c0, group + k0 * width + c0, width,
                                                   k0, k1, k0 > 0);
          }
        }
      }
    }
  }
};

}  // namespace
}  // namespace tessera::cpu
