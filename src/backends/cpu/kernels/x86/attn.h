// FLASH_ATTN_EXT over f16 K/V for the query rows of one KV head (AttnArgs in
// kernels.h), over a tier's vector type V, in blocks of up to kG = 8 query
// rows (a GQA group). Per block, each K and V row is read and converted (F16C,
// exact) once: pass 1, scores s = scale * q.k + mask into key-major scratch
// (the kG rows' scores of a key side by side); pass 2, per row max,
// p = exp(s - max) (polynomial below) and sum; pass 3, out = (sum of p * v) /
// sum, over tiles of keys whose V rows stay in L1 across the dv chunks.
// Cost per key and block: (d + dv) / lanes * G FMAs; at decode the reads are
// the cache rows, a cache row (every KV head) apart, so both passes prefetch.
// Include after the tier's vec.h; internal linkage per tier.
#pragma once

#include <cstring>
#include <limits>

#include "cpu/kernels/kernels.h"

namespace tessera::cpu {
namespace {

template <class V>
struct Attn {
  using F = typename V::F;
  static constexpr int kG = kAttnBlock;  // query rows a block: key-major scores, kG floats a key
  static constexpr int kTile = 32;       // keys a V tile: 32 rows of dv f16 stay in L1
  static constexpr int kAhead = 16;      // K rows prefetched ahead
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
    return V::scale_pow2_above(y, n, x, -87.0f);
  }

  static F load_f16(const uint8_t* p, int64_t j, int64_t n) {
    const auto* h = reinterpret_cast<const uint16_t*>(p) + j;
    return n - j >= V::kLanes ? V::load_f16(h) : V::load_f16_n(h, static_cast<int>(n - j));
  }
  static F load_f32(const float* p, int64_t j, int64_t n) {
    return n - j >= V::kLanes ? V::load(p + j) : V::load_n(p + j, static_cast<int>(n - j));
  }
  static void store_full(float* p, F v) { std::memcpy(p, &v, sizeof v); }
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

  static void prefetch(const uint8_t* row, size_t bytes) {
    for (size_t o = 0; o < bytes; o += 64) {
      _mm_prefetch(reinterpret_cast<const char*>(row + o), _MM_HINT_T0);
    }
  }

  // The block's q rows packed by chunk: chunk c holds G vectors (rows
  // 0..G-1, lanes c * kLanes..), zero past d, so the dot loop reads them at
  // fixed offsets from one pointer.
  struct Pass1 {
    const float* q;         // packed rows
    const float* mask[kG];  // row masks (null: none)
    bool shared_mask;       // every row reads the same mask row
    __m256 mx;              // lane i: row i's max so far (-inf past G)
  };

  // Keys [ic, ic + KB) against rows [0, G): s[key * kG + i] = scale * q_i . k
  // + mask_i[key] (-inf in lanes G..kG-1). KB * G <= 8 accumulators.
  template <int G, int KB>
  static void score_keys(const AttnArgs& a, Pass1& p, int64_t ic) {
    float* s = a.scores + ic * kG;
    if (a.mask != nullptr) {
      // Keys masked for every row (other sequences' cells) cost compares,
      // not dot products.
      bool visible = false;
      for (int kb = 0; kb < KB; ++kb) {
        for (int i = 0; i < (p.shared_mask ? 1 : G); ++i) visible |= p.mask[i][ic + kb] != kNegInf;
      }
      if (!visible) {
        for (int kb = 0; kb < KB; ++kb) _mm256_storeu_ps(s + kb * kG, _mm256_set1_ps(kNegInf));
        return;
      }
    }
    const uint8_t* kr = a.k + static_cast<size_t>(ic) * a.k_stride;
    F acc[KB * G];
    for (F& x : acc) x = V::zero();
    const float* qc = p.q;
    for (int64_t j = 0; j < a.d; j += V::kLanes, qc += G * V::kLanes) {
      F kv[KB];
      for (int kb = 0; kb < KB; ++kb) kv[kb] = load_f16(kr + kb * a.k_stride, j, a.d);
      for (int i = 0; i < G; ++i) {
        const F qv = V::load(qc + i * V::kLanes);
        for (int kb = 0; kb < KB; ++kb) acc[kb * G + i] = V::fma(qv, kv[kb], acc[kb * G + i]);
      }
    }
    const __m256 scale = _mm256_set1_ps(a.scale);
    if constexpr (G == kG) {  // one key, a vector of its kG scores
      __m256 t = _mm256_mul_ps(V::hsum8(acc), scale);
      if (a.mask != nullptr) {
        t = _mm256_add_ps(
            t, p.shared_mask
                   ? _mm256_set1_ps(p.mask[0][ic])
                   : _mm256_setr_ps(p.mask[0][ic], p.mask[1][ic], p.mask[2][ic], p.mask[3][ic],
                                    p.mask[4][ic], p.mask[5][ic], p.mask[6][ic], p.mask[7][ic]));
      }
      _mm256_storeu_ps(s, t);
      p.mx = _mm256_max_ps(t, p.mx);  // a NaN score leaves the max as it was
      return;
    }
    constexpr int kSums = KB * G, kQuads = kSums / 4 * 4;
    float sums[kSums];
    for (int n = 0; n < kQuads; n += 4) {
      _mm_storeu_ps(sums + n, V::hsum4(acc[n], acc[n + 1], acc[n + 2], acc[n + 3]));
    }
    for (int n = kQuads; n < kSums; ++n) sums[n] = V::hsum(acc[n]);
    for (int kb = 0; kb < KB; ++kb) {
      alignas(32) float t[kG];
      for (int i = 0; i < kG; ++i) {
        t[i] = i >= G ? kNegInf : sums[kb * G + i] * a.scale + (a.mask ? p.mask[i][ic + kb] : 0.0f);
      }
      const __m256 tv = _mm256_load_ps(t);
      _mm256_storeu_ps(s + kb * kG, tv);
      p.mx = _mm256_max_ps(tv, p.mx);
    }
  }

  // Pass 1: scores of rows [0, G) against every key, key-major (kG floats a
  // key, -inf in lanes G..kG-1), and each row's max (-inf for lanes >= G).
  template <int G>
  static void scores(const AttnArgs& a, float* mx) {
    constexpr int kKeys = G >= 8 ? 1 : 8 / G;  // keys a step
    alignas(64) float packed[kAttnMaxD * G];
    for (int64_t j = 0, c = 0; j < a.d; j += V::kLanes, ++c) {
      for (int i = 0; i < G; ++i) {
        const F x = load_f32(a.q[i], j, a.d);
        std::memcpy(packed + (c * G + i) * V::kLanes, &x, sizeof x);
      }
    }
    Pass1 p{packed, {}, true, _mm256_set1_ps(kNegInf)};
    for (int i = 0; i < G; ++i) {
      p.mask[i] = a.mask ? a.mask[i] : nullptr;
      p.shared_mask = p.shared_mask && p.mask[i] == p.mask[0];
    }
    const size_t k_bytes = static_cast<size_t>(a.d) * 2, v_bytes = static_cast<size_t>(a.dv) * 2;
    int64_t ic = 0;
    for (; ic + kKeys <= a.n_kv; ic += kKeys) {
      // K rows are a cache row apart (all KV heads' keys between them), too
      // far for the hardware prefetcher to follow at DRAM latency.
      for (int kb = 0; kb < kKeys; ++kb) {
        if (ic + kb + kAhead < a.n_kv) {
          prefetch(a.k + static_cast<size_t>(ic + kb + kAhead) * a.k_stride, k_bytes);
          prefetch(a.v + static_cast<size_t>(ic + kb + kAhead) * a.v_stride, v_bytes);
        }
      }
      score_keys<G, kKeys>(a, p, ic);
    }
    for (; ic < a.n_kv; ++ic) score_keys<G, 1>(a, p, ic);
    _mm256_storeu_ps(mx, p.mx);
  }

  // Pass 2: scores to weights p = exp(s - max) in place, and each row's sum
  // of them (0 for a row with every key masked, whose weights are all 0).
  static void weights(const AttnArgs& a, const float* mx, float* sum) {
    static_assert(V::kLanes % kG == 0);
    float m[V::kLanes], tot[V::kLanes];
    for (int l = 0; l < V::kLanes; ++l) m[l] = mx[l % kG] == kNegInf ? 0.0f : mx[l % kG];
    const F vm = V::load(m);
    F acc = V::zero();
    const int64_t n = a.n_kv * kG;
    for (int64_t o = 0; o < n; o += V::kLanes) {
      const F p = exp_neg(V::sub(load_f32(a.scores, o, n), vm));
      const int r = n - o >= V::kLanes ? V::kLanes : static_cast<int>(n - o);
      acc = V::add(acc, r == V::kLanes ? p : V::load_n(reinterpret_cast<const float*>(&p), r));
      store(a.scores, p, o, n);
    }
    std::memcpy(tot, &acc, sizeof(tot));
    for (int i = 0; i < kG; ++i) sum[i] = 0.0f;
    for (int l = 0; l < V::kLanes; ++l) sum[l % kG] += tot[l];
  }

  // Pass 3: out_i = inv_i * sum over keys of p_i * v, over tiles of kTile
  // keys (their V rows stay in L1 across the dv chunks). Keys whose weight
  // is 0 for every row are not read (their V rows may hold NaN).
  template <int G>
  static void values(const AttnArgs& a, const float* inv) {
    for (int i = 0; i < G; ++i) {
      for (int64_t j = 0; j < a.dv; j += V::kLanes) store(a.out[i], V::zero(), j, a.dv);
    }
    const size_t v_bytes = static_cast<size_t>(a.dv) * 2;
    // Per tile, the visible keys' V rows and their G weights, each already
    // broadcast to a vector (the FMAs read them as memory operands).
    const uint16_t* rows[kTile];
    alignas(64) float wb[kTile * G * V::kLanes];
    for (int64_t t0 = 0; t0 < a.n_kv; t0 += kTile) {
      const int64_t t1 = t0 + kTile < a.n_kv ? t0 + kTile : a.n_kv;
      for (int64_t ic = t1; ic < t1 + kTile && ic < a.n_kv; ++ic) {
        prefetch(a.v + static_cast<size_t>(ic) * a.v_stride, v_bytes);  // the next tile
      }
      int n = 0;
      for (int64_t ic = t0; ic < t1; ++ic) {
        const float* w = a.scores + ic * kG;
        if (_mm256_movemask_ps(
                _mm256_cmp_ps(_mm256_loadu_ps(w), _mm256_setzero_ps(), _CMP_NEQ_UQ)) == 0) {
          continue;
        }
        rows[n] = reinterpret_cast<const uint16_t*>(a.v + static_cast<size_t>(ic) * a.v_stride);
        for (int i = 0; i < G; ++i) store_full(wb + (n * G + i) * V::kLanes, V::set1(w[i]));
        ++n;
      }
      if (n == 0) continue;
      int64_t j = 0;
      for (; j + V::kLanes <= a.dv; j += V::kLanes) {
        F acc[G];
        for (int i = 0; i < G; ++i) acc[i] = V::zero();
        const float* wt = wb;
        for (int t = 0; t < n; ++t, wt += G * V::kLanes) {
          const F vv = V::load_f16(rows[t] + j);
          for (int i = 0; i < G; ++i) acc[i] = V::fma(V::load(wt + i * V::kLanes), vv, acc[i]);
        }
        for (int i = 0; i < G; ++i) store_full(a.out[i] + j, V::add(V::load(a.out[i] + j), acc[i]));
      }
      if (j < a.dv) {  // the last dv % kLanes columns
        const int r = static_cast<int>(a.dv - j);
        F acc[G];
        for (int i = 0; i < G; ++i) acc[i] = V::zero();
        for (int t = 0; t < n; ++t) {
          const F vv = V::load_f16_n(rows[t] + j, r);
          for (int i = 0; i < G; ++i)
            acc[i] = V::fma(V::load(wb + (t * G + i) * V::kLanes), vv, acc[i]);
        }
        for (int i = 0; i < G; ++i)
          store(a.out[i], V::add(V::load_n(a.out[i] + j, r), acc[i]), j, a.dv);
      }
    }
    for (int i = 0; i < G; ++i) {
      const F s = V::set1(inv[i]);
      for (int64_t j = 0; j < a.dv; j += V::kLanes) {
        store(a.out[i], V::mul(load_f32(a.out[i], j, a.dv), s), j, a.dv);
      }
    }
  }

  template <int G>
  static void block(const AttnArgs& a) {
    float mx[kG], sum[kG], inv[kG];
    scores<G>(a, mx);
    weights(a, mx, sum);
    for (int i = 0; i < G; ++i) {
      if (a.lse) {  // a partial result: (max, sum), out not divided by the sum
        a.lse[2 * i] = mx[i];
        a.lse[2 * i + 1] = sum[i];
        inv[i] = 1.0f;
      } else {
        inv[i] = sum[i] == 0.0f ? 0.0f : 1.0f / sum[i];
      }
    }
    values<G>(a, inv);
  }

  // Query rows in blocks of kG: each block reads every K and V row once.
  static void run(const AttnArgs& a) {
    for (int g0 = 0; g0 < a.g; g0 += kG) {
      AttnArgs sub = a;
      sub.q = a.q + g0;
      sub.mask = a.mask ? a.mask + g0 : nullptr;
      sub.out = a.out + g0;
      sub.lse = a.lse ? a.lse + 2 * g0 : nullptr;
      switch (a.g - g0 >= kG ? kG : a.g - g0) {
        case 1:
          block<1>(sub);
          break;
        case 2:
          block<2>(sub);
          break;
        case 3:
          block<3>(sub);
          break;
        case 4:
          block<4>(sub);
          break;
        case 5:
          block<5>(sub);
          break;
        case 6:
          block<6>(sub);
          break;
        case 7:
          block<7>(sub);
          break;
        default:
          block<8>(sub);
          break;
      }
    }
  }
};

}  // namespace
}  // namespace tessera::cpu
