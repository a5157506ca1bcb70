// F32 / F16 / BF16 weights times f32 activations, over a tier's vector type V.
// Register tiles of kR rows x kC columns (tinyBLAS's shape): per step of
// V::kLanes along k, kR weight loads (converted to f32, exact) and kC
// activation loads feed kR * kC FMAs; one horizontal sum per output at the end.
// Include after the tier's vec.h; internal linkage per tier.
#pragma once

#include <immintrin.h>

#include <utility>

#include "backends/cpu/kernels/kernels.h"
#include "backends/cpu/kernels/x86/fn_table.h"

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

}  // namespace
}  // namespace tessera::cpu
