// FLASH_ATTN_EXT over f16 K/V for the query rows of one KV head (AttnArgs in
// kernels.h), over a tier's vector type V. Each K and V row is converted (F16C,
// exact) once for all g query rows. Pass 1: scores s = scale * q.k + mask into
// scratch; pass 2: per row max, p = exp(s - max) (polynomial below), sum;
// pass 3: out = (sum of p * v) / sum, g rows at a time in registers.
// Include after the tier's vec.h; internal linkage per tier.
#pragma once

#include <cstring>
#include <limits>

#include "backends/cpu/kernels/kernels.h"

namespace tessera::cpu {
namespace {

template <class V>
struct Attn {
  using F = typename V::F;
  static constexpr int kG = 4;  // query rows per register block
  static constexpr float kNegInf = -std::numeric_limits<float>::infinity();

  // exp(x) for x <= 0 (Cephes expf: x = n ln2 + r, |r| <= ln2 / 2, degree-6
  // polynomial, ~2 ulp); 0 below -87 (and for -inf / NaN).
  static F exp_neg(F x) {
    const F xc = V::max(x, V::set1(-87.0f));
    const F n = V::round(V::mul(xc, V::set1(1.44269504088896341f)));
    F r = V::fma(n, V::set1(-0.693359375f), xc);
    r = V::fma(n, V::set1(2.12194440e-4f), r);
    F p = V::set1(1.9875691500e-4f);
    p = V::fma(p, r, V::set1(1.3981999507e-3f));
    p = V::fma(p, r, V::set1(8.3334519073e-3f));
    p = V::fma(p, r, V::set1(4.1665795894e-2f));
    p = V::fma(p, r, V::set1(1.6666665459e-1f));
    p = V::fma(p, r, V::set1(5.0000001201e-1f));
    const F y = V::add(V::fma(V::mul(p, r), r, r), V::set1(1.0f));
    return V::zero_below(V::mul(y, V::pow2(n)), x, -87.0f);
  }

  static F load_f16(const uint8_t* p, int64_t j, int64_t n) {
    const auto* h = reinterpret_cast<const uint16_t*>(p) + j;
    return n - j >= V::kLanes ? V::load_f16(h) : V::load_f16_n(h, static_cast<int>(n - j));
  }
  static F load_f32(const float* p, int64_t j, int64_t n) {
    return n - j >= V::kLanes ? V::load(p + j) : V::load_n(p + j, static_cast<int>(n - j));
  }
  static void store(float* p, F v, int64_t j, int64_t n) {
    if (n - j >= V::kLanes) {  // whole vector: a plain store, not a memcpy call
      std::memcpy(p + j, &v, sizeof v);
      return;
    }
    const int m = static_cast<int>(n - j);
    float tmp[V::kLanes];
    std::memcpy(tmp, &v, sizeof(tmp));
    std::memcpy(p + j, tmp, static_cast<size_t>(m) * sizeof(float));
  }

  // Scores of rows [g0, g0 + G) against every key, and each row's max.
  template <int G>
  static void scores(const AttnArgs& a, int g0, float* mx) {
    const float* mask[G];
    float* out[G];
    for (int i = 0; i < G; ++i) {
      mask[i] = a.mask ? a.mask[g0 + i] : nullptr;
      out[i] = a.scores + (g0 + i) * a.n_kv;
      mx[i] = kNegInf;
    }
    int64_t ic = 0;
    __m128 vmx[G];
    for (int i = 0; i < G; ++i) vmx[i] = _mm_set1_ps(kNegInf);
    const __m128 scale = _mm_set1_ps(a.scale);
    const __m128 neg_inf = _mm_set1_ps(kNegInf);
    for (; ic + 4 <= a.n_kv; ic += 4) {  // 4 keys: one reduction of 4 sums per row
      if (a.mask != nullptr) {
        // Keys masked for every row (other sequences' cells, the cache's
        // unused tail) cost a compare, not a dot product.
        int visible = 0;
        for (int i = 0; i < G; ++i) {
          visible |= _mm_movemask_ps(_mm_cmpneq_ps(_mm_loadu_ps(mask[i] + ic), neg_inf));
        }
        if (visible == 0) {
          for (int i = 0; i < G; ++i) _mm_storeu_ps(out[i] + ic, neg_inf);
          continue;
        }
      }
      const uint8_t* kr = a.k + static_cast<size_t>(ic) * a.k_stride;
      F acc[G][4];
      for (int i = 0; i < G; ++i) {
        for (int c = 0; c < 4; ++c) acc[i][c] = V::zero();
      }
      for (int64_t j = 0; j < a.d; j += V::kLanes) {
        F kv[4];
        for (int c = 0; c < 4; ++c) kv[c] = load_f16(kr + c * a.k_stride, j, a.d);
        for (int i = 0; i < G; ++i) {
          const F qv = load_f32(a.q[g0 + i], j, a.d);
          for (int c = 0; c < 4; ++c) acc[i][c] = V::fma(qv, kv[c], acc[i][c]);
        }
      }
      for (int i = 0; i < G; ++i) {
        __m128 s = _mm_mul_ps(V::hsum4(acc[i][0], acc[i][1], acc[i][2], acc[i][3]), scale);
        if (mask[i]) s = _mm_add_ps(s, _mm_loadu_ps(mask[i] + ic));
        _mm_storeu_ps(out[i] + ic, s);
        vmx[i] = _mm_max_ps(s, vmx[i]);  // NaN scores skipped
      }
    }
    for (int i = 0; i < G; ++i) {
      float lanes[4];
      _mm_storeu_ps(lanes, vmx[i]);
      for (float l : lanes) mx[i] = l > mx[i] ? l : mx[i];
    }
    for (; ic < a.n_kv; ++ic) {
      const uint8_t* kr = a.k + static_cast<size_t>(ic) * a.k_stride;
      F acc[G];
      for (int i = 0; i < G; ++i) acc[i] = V::zero();
      for (int64_t j = 0; j < a.d; j += V::kLanes) {
        const F kv = load_f16(kr, j, a.d);
        for (int i = 0; i < G; ++i) acc[i] = V::fma(load_f32(a.q[g0 + i], j, a.d), kv, acc[i]);
      }
      for (int i = 0; i < G; ++i) {
        const float s = V::hsum(acc[i]) * a.scale + (mask[i] ? mask[i][ic] : 0.0f);
        out[i][ic] = s;
        mx[i] = s > mx[i] ? s : mx[i];
      }
    }
  }

  // Scores of row i to weights; returns their sum (0 when every key is masked).
  static float weights(const AttnArgs& a, int i, float mx) {
    float* s = a.scores + i * a.n_kv;
    if (mx == kNegInf) {
      std::memset(s, 0, static_cast<size_t>(a.n_kv) * sizeof(float));
      return 0.0f;
    }
    F sum = V::zero();
    const F vmx = V::set1(mx);
    for (int64_t ic = 0; ic < a.n_kv; ic += V::kLanes) {
      const F p = exp_neg(V::sub(load_f32(s, ic, a.n_kv), vmx));
      const int m = a.n_kv - ic >= V::kLanes ? V::kLanes : static_cast<int>(a.n_kv - ic);
      sum = V::add(sum, m == V::kLanes ? p : V::load_n(reinterpret_cast<const float*>(&p), m));
      store(s, p, ic, a.n_kv);
    }
    return V::hsum(sum);
  }

  // out rows [g0, g0 + G), dv columns [j, j + kLanes).
  template <int G>
  static void values(const AttnArgs& a, int g0, const float* inv) {
    for (int64_t j = 0; j < a.dv; j += V::kLanes) {
      F acc[G];
      for (int i = 0; i < G; ++i) acc[i] = V::zero();
      for (int64_t ic = 0; ic < a.n_kv; ++ic) {
        float w[G];
        float any = 0.0f;  // weights are 0 or >= exp(-87) > FLT_MIN
        for (int i = 0; i < G; ++i) {
          w[i] = a.scores[(g0 + i) * a.n_kv + ic];
          any += w[i];
        }
        if (any == 0.0f) continue;  // masked for every row: adds nothing
        // A key masked for every row adds 0 even when its V row holds NaN (as
        // the reference, which does not read it).
        const F vv = V::zero_below(load_f16(a.v + static_cast<size_t>(ic) * a.v_stride, j, a.dv),
                                   V::set1(any), std::numeric_limits<float>::min());
        for (int i = 0; i < G; ++i) acc[i] = V::fma(V::set1(w[i]), vv, acc[i]);
      }
      for (int i = 0; i < G; ++i)
        store(a.out[g0 + i], V::mul(acc[i], V::set1(inv[g0 + i])), j, a.dv);
    }
  }

  template <int G>
  static void block(const AttnArgs& a, int g0, float* inv) {
    float mx[G];
    scores<G>(a, g0, mx);
    for (int i = 0; i < G; ++i) {
      const float sum = weights(a, g0 + i, mx[i]);
      if (a.lse) {  // a partial result: (max, sum), out not divided by the sum
        a.lse[2 * (g0 + i)] = mx[i];
        a.lse[2 * (g0 + i) + 1] = sum;
        inv[g0 + i] = 1.0f;
      } else {
        inv[g0 + i] = sum == 0.0f ? 0.0f : 1.0f / sum;
      }
    }
    values<G>(a, g0, inv);
  }

  static void run(const AttnArgs& a) {
    float inv[kG];
    for (int g0 = 0; g0 < a.g; g0 += kG) {
      AttnArgs sub = a;
      sub.q = a.q + g0;
      sub.mask = a.mask ? a.mask + g0 : nullptr;
      sub.out = a.out + g0;
      sub.scores = a.scores + g0 * a.n_kv;
      sub.lse = a.lse ? a.lse + 2 * g0 : nullptr;
      switch (a.g - g0 >= kG ? kG : a.g - g0) {
        case 1:
          block<1>(sub, 0, inv);
          break;
        case 2:
          block<2>(sub, 0, inv);
          break;
        case 3:
          block<3>(sub, 0, inv);
          break;
        default:
          block<4>(sub, 0, inv);
          break;
      }
    }
  }
};

}  // namespace
}  // namespace tessera::cpu
