// Row kernels over a tier's vector type V. RMS_NORM of one contiguous f32
// row: the sum of squares in 4 f32 vector accumulators (FMA), then
// y = x / sqrt(mean + eps). SOFT_MAX's exponentials: y = exp(x - max) with
// attn.h's polynomial (NaN kept), returning the sum. SWIGLU's silu(g) * u.
// GELU (the tanh form).
// Include after the tier's vec.h; internal linkage per tier.
#pragma once

#include <cmath>
#include <cstring>

#include "cpu/kernels/x86/attn.h"

namespace tessera::cpu {
namespace {

template <class V>
void rms_norm_row(const float* x, float* y, int64_t n, float eps) {
  using F = typename V::F;
  constexpr int64_t L = V::kLanes;
  F acc[4] = {V::zero(), V::zero(), V::zero(), V::zero()};
  int64_t i = 0;
  for (; i + 4 * L <= n; i += 4 * L) {
    for (int u = 0; u < 4; ++u) {
      const F v = V::load(x + i + u * L);
      acc[u] = V::fma(v, v, acc[u]);
    }
  }
  for (; i < n; i += L) {
    const F v = n - i >= L ? V::load(x + i) : V::load_n(x + i, static_cast<int>(n - i));
    acc[0] = V::fma(v, v, acc[0]);
  }
  const double sum = V::hsum(V::add(V::add(acc[0], acc[1]), V::add(acc[2], acc[3])));
  const F inv = V::set1(static_cast<float>(1.0 / std::sqrt(sum / static_cast<double>(n) + eps)));
  for (i = 0; i + L <= n; i += L) {
    const F v = V::mul(V::load(x + i), inv);
    std::memcpy(y + i, &v, sizeof(v));
  }
  if (i < n) {
    const F v = V::mul(V::load_n(x + i, static_cast<int>(n - i)), inv);
    float tmp[L];
    std::memcpy(tmp, &v, sizeof(v));
    std::memcpy(y + i, tmp, static_cast<size_t>(n - i) * sizeof(float));
  }
}

template <class V>
float exp_sum_row(const float* x, float* y, int64_t n, float max) {
  using F = typename V::F;
  constexpr int64_t L = V::kLanes;
  const F vmax = V::set1(max);
  F sum = V::zero();
  int64_t i = 0;
  for (; i + L <= n; i += L) {
    const F t = V::sub(V::load(x + i), vmax);
    const F p = V::keep_nan(Attn<V>::exp_neg(t), t);
    std::memcpy(y + i, &p, sizeof(p));
    sum = V::add(sum, p);
  }
  float total = V::hsum(sum);
  for (; i < n; ++i) {
    const float t = x[i] - max;
    y[i] = t != t ? t : std::exp(t);
    total += y[i];
  }
  return total;
}

// SWIGLU of one row: y = silu(g) * u = g / (1 + exp(-g)) * u, exp(-g) by
// attn.h's polynomial with -g held to at most 88 (exp(88) is finite; below
// -87 it is 0, so a large g gives g * u). NaN g stays NaN.
template <class V>
void silu_mul_row(const float* g, const float* u, float* y, int64_t n) {
  using F = typename V::F;
  constexpr int64_t L = V::kLanes;
  const F one = V::set1(1.0f), lim = V::set1(-88.0f);
  int64_t i = 0;
  for (; i + L <= n; i += L) {
    const F x = V::load(g + i);
    const F e = Attn<V>::exp_neg(V::sub(V::zero(), V::max(x, lim)));
    const F v = V::mul(V::div(x, V::add(one, e)), V::load(u + i));
    std::memcpy(y + i, &v, sizeof(v));
  }
  for (; i < n; ++i) y[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
}

// GELU's tanh form of one row: y = x / (1 + exp(-2z)), z = sqrt(2/pi) (x +
// 0.044715 x^3), as ops/map.cpp's scalar gelu; exp(-2z) by attn.h's
// polynomial with 2z held to at least -88 (so a very negative x gives -0,
// as the scalar does, not NaN). NaN x stays NaN.
template <class V>
void gelu_row(const float* x, float* y, int64_t n) {
  using F = typename V::F;
  constexpr int64_t L = V::kLanes;
  const F one = V::set1(1.0f), lim = V::set1(-88.0f), k2 = V::set1(2.0f * 0.7978845608028654f),
          c = V::set1(0.044715f);
  int64_t i = 0;
  for (; i + L <= n; i += L) {
    const F v = V::load(x + i);
    const F z2 = V::mul(V::mul(k2, v), V::fma(V::mul(c, v), v, one));
    const F e = Attn<V>::exp_neg(V::sub(V::zero(), V::max(z2, lim)));
    const F r = V::keep_nan(V::div(v, V::add(one, e)), v);
    std::memcpy(y + i, &r, sizeof(r));
  }
  for (; i < n; ++i) {
    const float v = x[i];
    y[i] = v / (1.0f + std::exp(-2.0f * 0.7978845608028654f * v * (1.0f + 0.044715f * v * v)));
  }
}

}  // namespace
}  // namespace tessera::cpu
