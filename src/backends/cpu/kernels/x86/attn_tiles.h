// FLASH_ATTN_EXT for many query rows of one f16 K/V head at once (a prompt's
// tokens times their GQA group; AttnTileArgs in kernels.h), over a tier's
// vector type V. Keys go in tiles of kAttnTileKeys; per tile:
//   1. its K and V rows are converted to f32 once for every row (F16C, exact);
//   2. scores S[key][row] = scale * q_row . k + mask, a small GEMM whose
//      vectors run across rows (q transposed once per call), kScoreKeys keys
//      by kScoreVecs row vectors of accumulators;
//   3. online softmax, also across rows: a row's max m grows to the tile's,
//      what was accumulated is rescaled by exp(m_old - m_new), the scores
//      become weights p = exp(s - m_new) (Attn::exp_neg) and add to the sum;
//   4. O[row] = O[row] * rescale + sum over keys of p * v, kPvRows rows by
//      kPvVecs vectors of dv.
// Cost per tile: rows * keys * (d + dv) FMAs against keys * (d + dv)
// conversions, where the per-token kernel (attn.h) pays both per GQA group.
// No software prefetch: a prompt's units reread one head's keys from L2, and
// prefetching the next tile measured the same. TinyLlama shape, one layer,
// 512 tokens at depth 2048, 2 threads on a Sapphire Rapids guest: 212 GFLOP/s
// (about half the FMA peak); the scores run at ~90% of it, the V sums ~80%,
// and the exponentials take most of the rest.
// Include after attn.h; internal linkage per tier.
#pragma once

#include <cstring>
#include <limits>

#include "cpu/kernels/kernels.h"
#include "cpu/kernels/x86/attn.h"

namespace tessera::cpu {
namespace {

template <class V, int kScoreVecs, int kScoreKeys, int kPvRows, int kPvVecs>
struct AttnTiles {
  using F = typename V::F;
  static constexpr int L = V::kLanes;
  static constexpr int kKeys = kAttnTileKeys;
  static constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  // A row's max before any key: finite, so that a row whose keys are all
  // masked so far subtracts a number, never -inf - -inf.
  static constexpr float kNoMax = -1e30f;

  struct Ctx {
    int64_t d, dv;
    int64_t dp, dvp;  // d, dv rounded up to kAttnTileAlign
    int64_t rp;       // rows rounded up to kAttnTileAlign
    float* qt;        // d x rp: qt[j * rp + r] = q_r[j] (0 past rows)
    float* kc;        // kKeys x dp: the tile's keys
    float* vc;        // kKeys x dvp: its values, 0 past dv
    float* p;         // kKeys x rp: scores, then weights
    float* mt;        // kKeys x rp: the mask, in masked tiles
    float* o;         // rp x dvp: accumulated output
    float* m;         // rp: each row's max so far
    float* l;         // rp: each row's sum of weights
    float* f;         // rp: this tile's rescale of o and l
  };

  static Ctx layout(const AttnTileArgs& a) {
    const AttnTileLayout t = attn_tile_layout(a.d, a.dv);
    float* s = a.scratch;
    return Ctx{a.d,      a.dv,     t.dp,     t.dvp,   attn_tile_round(a.rows),
               s + t.qt, s + t.kc, s + t.vc, s + t.p, s + t.mt,
               s + t.o,  s + t.m,  s + t.l,  s + t.f};
  }

  // Converts `n` f16 values to f32 at dst, zeros from n to `padded`.
  static void convert_row(const uint8_t* src, float* dst, int64_t n, int64_t padded) {
    const auto* h = reinterpret_cast<const uint16_t*>(src);
    int64_t j = 0;
    for (; j + L <= n; j += L) V::store(dst + j, V::load_f16(h + j));
    if (j < n) V::store(dst + j, V::load_f16_n(h + j, static_cast<int>(n - j)));
    for (j = (n + L - 1) / L * L; j < padded; j += L) V::store(dst + j, V::zero());
  }

  // Step 1 for keys [k0, k0 + nk): K and V rows to f32; in a masked tile the
  // mask too, key-major like the scores, and the K / V rows of keys masked
  // for every row zeroed (never read: they may be any bits, NaN included).
  static void load_tile(const AttnTileArgs& a, const Ctx& c, int64_t k0, int nk, bool masked) {
    for (int kk = 0; kk < nk; ++kk) {
      bool seen = true;
      if (masked) {
        float* mrow = c.mt + kk * c.rp;
        seen = false;
        for (int r = 0; r < a.rows; ++r) {
          mrow[r] = a.mask[r][k0 + kk];
          seen |= mrow[r] != kNegInf;
        }
        for (int64_t r = a.rows; r < c.rp; ++r) mrow[r] = 0.0f;
      }
      float* kd = c.kc + kk * c.dp;
      float* vd = c.vc + kk * c.dvp;
      if (!seen) {
        std::memset(kd, 0, static_cast<size_t>(c.dp) * sizeof(float));
        std::memset(vd, 0, static_cast<size_t>(c.dvp) * sizeof(float));
        continue;
      }
      convert_row(a.k + static_cast<size_t>(k0 + kk) * a.k_stride, kd, a.d, c.dp);
      convert_row(a.v + static_cast<size_t>(k0 + kk) * a.v_stride, vd, a.dv, c.dvp);
    }
  }

  // Step 2: scores of keys [kk0, kk0 + KB) for row vectors [n0, n0 + NV).
  template <int NV, int KB>
  static void score_block(const Ctx& c, int64_t n0, int kk0, F scale, bool masked) {
    F acc[KB][NV];
    for (auto& row : acc) {
      for (F& x : row) x = V::zero();
    }
    const float* qt = c.qt + n0 * L;
    const float* kc = c.kc + kk0 * c.dp;
    for (int64_t j = 0; j < c.d; ++j, qt += c.rp) {
      F qv[NV];
      for (int n = 0; n < NV; ++n) qv[n] = V::load(qt + n * L);
      for (int kb = 0; kb < KB; ++kb) {
        const F kv = V::set1(kc[kb * c.dp + j]);
        for (int n = 0; n < NV; ++n) acc[kb][n] = V::fma(qv[n], kv, acc[kb][n]);
      }
    }
    for (int kb = 0; kb < KB; ++kb) {
      const int64_t at = (kk0 + kb) * c.rp + n0 * L;
      for (int n = 0; n < NV; ++n) {
        const F add = masked ? V::load(c.mt + at + n * L) : V::zero();
        V::store(c.p + at + n * L, V::fma(acc[kb][n], scale, add));
      }
    }
  }

  // The row vectors left after whole kScoreVecs blocks: N of them, N < kScoreVecs.
  template <int KB, int N = kScoreVecs - 1>
  static void score_rest(const Ctx& c, int64_t n0, int64_t left, int kk0, F scale, bool masked) {
    if constexpr (N > 0) {
      if (left == N) return score_block<N, KB>(c, n0, kk0, scale, masked);
      score_rest<KB, N - 1>(c, n0, left, kk0, scale, masked);
    }
  }

  template <int KB>
  static void score_keys(const Ctx& c, int kk0, F scale, bool masked) {
    const int64_t nv = c.rp / L;
    int64_t n0 = 0;
    for (; n0 + kScoreVecs <= nv; n0 += kScoreVecs) {
      score_block<kScoreVecs, KB>(c, n0, kk0, scale, masked);
    }
    score_rest<KB>(c, n0, nv - n0, kk0, scale, masked);
  }

  static void scores(const Ctx& c, int nk, float scale, bool masked) {
    const F vs = V::set1(scale);
    int kk = 0;
    for (; kk + kScoreKeys <= nk; kk += kScoreKeys) score_keys<kScoreKeys>(c, kk, vs, masked);
    for (; kk < nk; ++kk) score_keys<1>(c, kk, vs, masked);
  }

  // Step 3, for every row vector: the new max, the rescale, the weights and sums.
  static void softmax(const Ctx& c, int nk) {
    for (int64_t n = 0; n < c.rp; n += L) {
      F mx = V::set1(kNegInf);
      // max(s, mx) keeps mx where s is NaN: a NaN score does not poison the max.
      for (int kk = 0; kk < nk; ++kk) mx = V::max(V::load(c.p + kk * c.rp + n), mx);
      const F m_old = V::load(c.m + n);
      const F m_new = V::max(mx, m_old);
      F sum = V::zero();
      for (int kk = 0; kk < nk; ++kk) {
        float* s = c.p + kk * c.rp + n;
        const F w = Attn<V>::exp_neg(V::sub(V::load(s), m_new));
        V::store(s, w);
        sum = V::add(sum, w);
      }
      const F f = Attn<V>::exp_neg(V::sub(m_old, m_new));
      V::store(c.f + n, f);
      V::store(c.m + n, m_new);
      V::store(c.l + n, V::fma(V::load(c.l + n), f, sum));
    }
  }

  // Step 4 for rows [r0, r0 + RB), output vectors [j0, j0 + DB * L).
  template <int RB, int DB>
  static void pv_block(const Ctx& c, int64_t r0, int64_t j0, int nk) {
    F acc[RB][DB];
    for (int rb = 0; rb < RB; ++rb) {
      const F f = V::set1(c.f[r0 + rb]);
      for (int db = 0; db < DB; ++db)
        acc[rb][db] = V::mul(V::load(c.o + (r0 + rb) * c.dvp + j0 + db * L), f);
    }
    const float* vc = c.vc + j0;
    const float* p = c.p + r0;
    for (int kk = 0; kk < nk; ++kk, vc += c.dvp, p += c.rp) {
      F vv[DB];
      for (int db = 0; db < DB; ++db) vv[db] = V::load(vc + db * L);
      for (int rb = 0; rb < RB; ++rb) {
        const F w = V::set1(p[rb]);
        for (int db = 0; db < DB; ++db) acc[rb][db] = V::fma(w, vv[db], acc[rb][db]);
      }
    }
    for (int rb = 0; rb < RB; ++rb) {
      for (int db = 0; db < DB; ++db) V::store(c.o + (r0 + rb) * c.dvp + j0 + db * L, acc[rb][db]);
    }
  }

  template <int RB, int N = kPvVecs - 1>
  static void pv_rest(const Ctx& c, int64_t r0, int64_t j0, int64_t left, int nk) {
    if constexpr (N > 0) {
      if (left == N) return pv_block<RB, N>(c, r0, j0, nk);
      pv_rest<RB, N - 1>(c, r0, j0, left, nk);
    }
  }

  template <int RB>
  static void pv_rows(const Ctx& c, int64_t r0, int nk) {
    const int64_t nv = c.dvp / L;
    int64_t v0 = 0;
    for (; v0 + kPvVecs <= nv; v0 += kPvVecs) pv_block<RB, kPvVecs>(c, r0, v0 * L, nk);
    pv_rest<RB>(c, r0, v0 * L, nv - v0, nk);
  }

  template <int N = kPvRows - 1>
  static void pv_rows_rest(const Ctx& c, int64_t r0, int64_t left, int nk) {
    if constexpr (N > 0) {
      if (left == N) return pv_rows<N>(c, r0, nk);
      pv_rows_rest<N - 1>(c, r0, left, nk);
    }
  }

  static void values(const Ctx& c, int nk) {
    int64_t r0 = 0;
    for (; r0 + kPvRows <= c.rp; r0 += kPvRows) pv_rows<kPvRows>(c, r0, nk);
    pv_rows_rest(c, r0, c.rp - r0, nk);
  }

  static void run(const AttnTileArgs& a) {
    const Ctx c = layout(a);
    for (int64_t j = 0; j < a.d; ++j) {
      float* col = c.qt + j * c.rp;
      for (int r = 0; r < a.rows; ++r) col[r] = a.q[r][j];
      for (int64_t r = a.rows; r < c.rp; ++r) col[r] = 0.0f;
    }
    std::memset(c.o, 0, static_cast<size_t>(c.rp * c.dvp) * sizeof(float));
    for (int64_t r = 0; r < c.rp; ++r) {
      c.m[r] = kNoMax;
      c.l[r] = 0.0f;
    }
    const int64_t n_tiles = (a.n_kv + kKeys - 1) / kKeys;
    for (int64_t t = 0; t < n_tiles; ++t) {
      if (a.tiles[t] == AttnTile::kSkip) continue;
      const int64_t k0 = t * kKeys;
      const int nk = static_cast<int>(a.n_kv - k0 < kKeys ? a.n_kv - k0 : kKeys);
      const bool masked = a.tiles[t] == AttnTile::kMasked;
      load_tile(a, c, k0, nk, masked);
      scores(c, nk, a.scale, masked);
      softmax(c, nk);
      values(c, nk);
    }
    for (int r = 0; r < a.rows; ++r) {
      const float inv = c.l[r] == 0.0f ? 0.0f : 1.0f / c.l[r];  // every key masked: zeros
      const F s = V::set1(inv);
      const float* o = c.o + r * c.dvp;
      float* out = a.out[r];
      int64_t j = 0;
      for (; j + L <= a.dv; j += L) V::store(out + j, V::mul(V::load(o + j), s));
      if (j < a.dv) V::store_n(out + j, V::mul(V::load(o + j), s), static_cast<int>(a.dv - j));
    }
  }
};

}  // namespace
}  // namespace tessera::cpu
