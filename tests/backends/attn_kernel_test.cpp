// The SIMD tiers' attn_f16 (grouped FLASH_ATTN_EXT over f16 K/V) against a
// double-precision softmax(scale q.k + mask) v: random groups with masked
// keys and tails in d / dv, rows with every key masked (zeros), and the
// polynomial exp through two-key rows whose weights are exp(x) for x in [-87, 0].
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "kernel_test_util.h"
#include "tessera/core/half.h"

namespace tessera::cpu {
namespace {

using testing::fresh_seed;

class AttnKernelTest : public ::testing::TestWithParam<Isa> {
 protected:
  const Kernels& kernels() { return kernels_for(GetParam()); }
  uint32_t seed_ = fresh_seed();
};

struct Problem {
  int64_t d, dv, n_kv;
  int g;
  float scale;
  std::vector<float> q, mask;  // g x d, g x n_kv (empty: no mask)
  std::vector<uint16_t> k, v;  // n_kv x d, n_kv x dv
  bool shared_mask = false;    // every row reads mask row 0 (one token's mask, as in decode)
  const float* mask_row(int i) const { return mask.data() + (shared_mask ? 0 : i * n_kv); }
};

// lse: when not null, the kernel's partial result (max, sum) per row, out undivided.
// p's rows as the kernels take them: q, mask (empty: none) and out pointers,
// out filled with -1; both kernels' K / V arguments.
struct Rows {
  std::vector<const float*> q, mask;
  std::vector<float> out;
  std::vector<float*> outs;
  explicit Rows(const Problem& p) : out(static_cast<size_t>(p.g * p.dv), -1.0f) {
    for (int i = 0; i < p.g; ++i) {
      q.push_back(p.q.data() + i * p.d);
      if (!p.mask.empty()) mask.push_back(p.mask_row(i));
      outs.push_back(out.data() + i * p.dv);
    }
  }
  template <class Args>
  void fill(const Problem& p, Args& a) {
    a.d = p.d;
    a.dv = p.dv;
    a.n_kv = p.n_kv;
    a.q = q.data();
    a.mask = p.mask.empty() ? nullptr : mask.data();
    a.k = reinterpret_cast<const uint8_t*>(p.k.data());
    a.k_stride = static_cast<size_t>(p.d) * 2;
    a.v = reinterpret_cast<const uint8_t*>(p.v.data());
    a.v_stride = static_cast<size_t>(p.dv) * 2;
    a.scale = p.scale;
    a.out = outs.data();
  }
};

std::vector<float> run(const Kernels& kern, const Problem& p, std::vector<float>* lse = nullptr) {
  Rows rows(p);
  std::vector<float> scores(static_cast<size_t>(kAttnBlock * p.n_kv));
  if (lse != nullptr) lse->assign(static_cast<size_t>(2 * p.g), -1.0f);
  AttnArgs a;
  rows.fill(p, a);
  a.g = p.g;
  a.scores = scores.data();
  a.lse = lse != nullptr ? lse->data() : nullptr;
  kern.attn_f16(a);
  return rows.out;
}

// Per row, softmax(scale q.k + mask) v in double; with lse, the row's max
// score and sum of exp(s - max) go there (2 per row) and out is not divided.
std::vector<double> reference(const Problem& p, std::vector<double>* lse = nullptr) {
  std::vector<double> out(static_cast<size_t>(p.g * p.dv), 0.0);
  if (lse != nullptr) lse->assign(static_cast<size_t>(2 * p.g), 0.0);
  for (int i = 0; i < p.g; ++i) {
    std::vector<double> s(p.n_kv);
    double mx = -INFINITY;
    const float* m = p.mask.empty() ? nullptr : p.mask_row(i);
    for (int64_t c = 0; c < p.n_kv; ++c) {
      if (m != nullptr && m[c] == -INFINITY) {  // skipped, as the op's
        s[c] = -INFINITY;
        continue;
      }
      double dot = 0;
      for (int64_t j = 0; j < p.d; ++j)
        dot += double(p.q[i * p.d + j]) * fp16_to_fp32(p.k[c * p.d + j]);
      s[c] = dot * p.scale + (m == nullptr ? 0.0 : m[c]);
      mx = std::max(mx, s[c]);
    }
    if (lse != nullptr) (*lse)[2 * i] = mx;
    if (mx == -INFINITY) continue;
    double sum = 0;
    for (int64_t c = 0; c < p.n_kv; ++c) {
      if (s[c] == -INFINITY) continue;
      const double w = std::exp(s[c] - mx);
      sum += w;
      for (int64_t j = 0; j < p.dv; ++j) out[i * p.dv + j] += w * fp16_to_fp32(p.v[c * p.dv + j]);
    }
    if (lse != nullptr) {
      (*lse)[2 * i + 1] = sum;
      continue;
    }
    for (int64_t j = 0; j < p.dv; ++j) out[i * p.dv + j] /= sum;
  }
  return out;
}

std::vector<uint16_t> random_f16(size_t n, std::mt19937& rng) {
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<uint16_t> out(n);
  for (uint16_t& h : out) h = fp32_to_fp16(dist(rng));
  return out;
}

TEST_P(AttnKernelTest, MatchesDoubleReference) {
  std::mt19937 rng(seed_);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  struct Shape {
    int64_t d, dv, n_kv;
    int g;
    bool mask;
  };
  for (const Shape s :
       {Shape{8, 8, 300, 2, true}, Shape{20, 24, 33, 5, false}, Shape{64, 64, 41, 4, true},
        Shape{40, 17, 1, 3, true}, Shape{128, 128, 77, 8, true}}) {
    Problem p{s.d, s.dv, s.n_kv, s.g, 2.0f / std::sqrt(float(s.d)), {}, {}, {}, {}};
    p.q.resize(static_cast<size_t>(s.g * s.d));
    for (float& x : p.q) x = 4.0f * dist(rng);
    p.k = random_f16(static_cast<size_t>(s.n_kv * s.d), rng);
    p.v = random_f16(static_cast<size_t>(s.n_kv * s.dv), rng);
    if (s.mask) {
      p.mask.resize(static_cast<size_t>(s.g * s.n_kv));
      for (size_t i = 0; i < p.mask.size(); ++i) {
        p.mask[i] = i % s.n_kv != 0 && rng() % 4 == 0 ? -INFINITY : dist(rng);
      }
      if (s.g > 2) {  // row 1: every key masked
        for (int64_t c = 0; c < s.n_kv; ++c) p.mask[s.n_kv + c] = -INFINITY;
      }
    }
    const std::vector<float> got = run(kernels(), p);
    const std::vector<double> want = reference(p);
    for (size_t i = 0; i < want.size(); ++i) {
      ASSERT_NEAR(got[i], want[i], 1e-5)
          << "d " << s.d << " n_kv " << s.n_kv << " at " << i << " seed " << seed_;
    }
  }
}

// Random q, K, V (never zeros) and masks: scores go through the dot, the
// exp and the V sum of every key that is not -inf.
Problem random_problem(int64_t d, int64_t dv, int64_t n_kv, int g, std::mt19937& rng) {
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  Problem p{d, dv, n_kv, g, 2.0f / std::sqrt(float(d)), {}, {}, {}, {}};
  p.q.resize(static_cast<size_t>(g * d));
  for (float& x : p.q) x = 4.0f * dist(rng);
  p.k = random_f16(static_cast<size_t>(n_kv * d), rng);
  p.v = random_f16(static_cast<size_t>(n_kv * dv), rng);
  return p;
}

// f32 accumulation over n_kv keys: the 1e-5 of a 64-key row, growing as the
// random walk of rounding errors (sqrt(n_kv)); outputs are averages of V in [-1, 1].
double tolerance(int64_t n_kv) {
  return 1e-5 * std::max(1.0, std::sqrt(double(n_kv) / 64.0));
}

// GQA groups as decode runs them: one query token's heads (1..16 rows: blocks of
// 8 and the 1..7-row remainders), sharing one mask row or each with its own;
// n_kv off the 32-key V tile and the 8-key score steps; a cache bucket whose
// tail past the filled cells is -inf; d / dv off the vector width.
TEST_P(AttnKernelTest, GqaGroupsMatchDoubleReference) {
  std::mt19937 rng(seed_);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  struct Shape {
    int64_t d, dv, n_kv;
    int g;
    bool shared;
    int64_t filled;  // keys before the -inf tail (n_kv: none)
  };
  for (const Shape s : {Shape{64, 64, 2304, 8, true, 2049}, Shape{64, 64, 33, 8, false, 33},
                        Shape{64, 64, 65, 16, true, 60}, Shape{72, 36, 97, 12, false, 97},
                        Shape{64, 64, 1, 8, true, 1}, Shape{64, 64, 37, 1, false, 37},
                        Shape{64, 64, 41, 2, true, 41}, Shape{48, 64, 45, 3, false, 40},
                        Shape{64, 64, 31, 5, true, 31}, Shape{64, 64, 39, 7, false, 39},
                        Shape{128, 128, 300, 6, true, 290}}) {
    Problem p = random_problem(s.d, s.dv, s.n_kv, s.g, rng);
    p.shared_mask = s.shared;
    const int rows = s.shared ? 1 : s.g;
    p.mask.resize(static_cast<size_t>(rows * s.n_kv));
    for (int i = 0; i < rows; ++i) {
      for (int64_t c = 0; c < s.n_kv; ++c) {
        float& m = p.mask[static_cast<size_t>(i * s.n_kv + c)];
        m = c >= s.filled ? -INFINITY : c > 0 && rng() % 5 == 0 ? -INFINITY : dist(rng);
      }
    }
    if (!s.shared && s.g > 2) {  // row 1: every key masked
      for (int64_t c = 0; c < s.n_kv; ++c) p.mask[static_cast<size_t>(s.n_kv + c)] = -INFINITY;
    }
    const std::vector<float> got = run(kernels(), p);
    const std::vector<double> want = reference(p);
    for (size_t i = 0; i < want.size(); ++i) {
      ASSERT_NEAR(got[i], want[i], tolerance(s.n_kv))
          << "g " << s.g << " d " << s.d << " n_kv " << s.n_kv << " at " << i << " seed " << seed_;
    }
  }
}

// Keys split over threads: each part gives (max, sum) per row and out not
// divided by the sum; FLASH_ATTN_EXT merges parts with them.
TEST_P(AttnKernelTest, PartialResultsGiveMaxAndSum) {
  std::mt19937 rng(seed_);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (const int g : {8, 3, 11}) {
    Problem p = random_problem(64, 64, 150, g, rng);
    p.shared_mask = g != 3;
    p.mask.resize(static_cast<size_t>((p.shared_mask ? 1 : g) * p.n_kv));
    for (float& m : p.mask) m = rng() % 6 == 0 ? -INFINITY : dist(rng);
    if (!p.shared_mask) {  // row 2: every key masked, (-inf, 0) and zeros
      for (int64_t c = 0; c < p.n_kv; ++c) p.mask[static_cast<size_t>(2 * p.n_kv + c)] = -INFINITY;
    }
    std::vector<float> lse;
    std::vector<double> want_lse;
    const std::vector<float> got = run(kernels(), p, &lse);
    const std::vector<double> want = reference(p, &want_lse);
    for (int i = 0; i < g; ++i) {
      const double sum = want_lse[2 * i + 1];
      EXPECT_FLOAT_EQ(lse[2 * i], float(want_lse[2 * i])) << "row " << i << " seed " << seed_;
      if (sum == 0.0) {
        EXPECT_EQ(lse[2 * i + 1], 0.0f) << "row " << i;
      } else {
        EXPECT_NEAR(lse[2 * i + 1] / sum, 1.0, tolerance(p.n_kv))
            << "row " << i << " seed " << seed_;
      }
      for (int64_t j = 0; j < p.dv; ++j) {
        const size_t at = static_cast<size_t>(i * p.dv + j);
        ASSERT_NEAR(got[at] / std::max(sum, 1.0), want[at] / std::max(sum, 1.0), tolerance(p.n_kv))
            << "row " << i << " col " << j << " seed " << seed_;
      }
    }
  }
}

// Keys masked for every row are skipped: NaN in their K and V rows (as in a
// cache's unwritten tail) does not reach the output.
TEST_P(AttnKernelTest, MaskedKeysAreNotRead) {
  std::mt19937 rng(seed_);
  const int64_t d = 16, n_kv = 40;
  const int g = 3;
  Problem p{d,
            d,
            n_kv,
            g,
            0.25f,
            std::vector<float>(g * d, 0.5f),
            std::vector<float>(g * n_kv, 0.0f),
            random_f16(n_kv * d, rng),
            random_f16(n_kv * d, rng)};
  const uint16_t nan = 0x7E00;
  for (int64_t c = 30; c < n_kv; ++c) {
    for (int i = 0; i < g; ++i) p.mask[i * n_kv + c] = -INFINITY;
    for (int64_t j = 0; j < d; ++j) p.k[c * d + j] = p.v[c * d + j] = nan;
  }
  const std::vector<float> got = run(kernels(), p);
  const std::vector<double> want = reference(p);
  for (size_t i = 0; i < want.size(); ++i) ASSERT_NEAR(got[i], want[i], 1e-5) << i;
}

// q = 0, V rows 0 and 1, mask (0, x): out = exp(x) / (1 + exp(x)).
TEST_P(AttnKernelTest, ExpIsAccurate) {
  Problem p{8,
            8,
            2,
            1,
            1.0f,
            std::vector<float>(8, 0.0f),
            {0.0f, 0.0f},
            std::vector<uint16_t>(16, 0),
            std::vector<uint16_t>(16, 0)};
  for (int j = 0; j < 8; ++j) p.v[8 + j] = fp32_to_fp16(1.0f);
  double worst = 0;
  for (float x = -87.0f; x <= 0.0f; x += 0.0137f) {
    p.mask[1] = x;
    const float got = run(kernels(), p)[0];
    const double e = std::exp(double(x)), want = e / (1.0 + e);
    worst = std::max(worst, std::fabs(got - want) / want);
  }
  EXPECT_LT(worst, 1e-6);
}

// attn_f16_tiles: every row of p (tokens x group, each with its mask row) in
// one call, the tiles' flags as FLASH_ATTN_EXT derives them from the masks.
std::vector<float> run_tiles(const Kernels& kern, const Problem& p) {
  Rows rows(p);
  std::vector<float> scratch(attn_tile_floats(p.d, p.dv), std::nanf(""));  // starts as NaN
  std::vector<AttnTile> tiles;
  for (int64_t k0 = 0; k0 < p.n_kv; k0 += kAttnTileKeys) {
    bool seen = p.mask.empty(), plain = true;
    for (int i = 0; i < p.g && !p.mask.empty(); ++i) {
      for (int64_t c = k0; c < std::min(p.n_kv, k0 + kAttnTileKeys); ++c) {
        seen |= p.mask_row(i)[c] != -INFINITY;
        plain &= p.mask_row(i)[c] == 0.0f;
      }
    }
    tiles.push_back(!seen ? AttnTile::kSkip : plain ? AttnTile::kPlain : AttnTile::kMasked);
  }
  AttnTileArgs a;
  rows.fill(p, a);
  a.rows = p.g;
  a.tiles = tiles.data();
  a.scratch = scratch.data();
  kern.attn_f16_tiles(a);
  return rows.out;
}

// Prompts as FLASH_ATTN_EXT hands them to the tiles: `tokens` query tokens
// times a GQA group of `group` heads, each token's mask shared by its heads.
// Causal masks at depth (mask 0 where seen: plain tiles; -inf past the
// diagonal and in the cache's tail: skipped tiles) with NaN in the K / V rows
// no row sees; random masks (values, -inf, a token seeing nothing: zeros);
// no mask; rows off the 16-row vectors, n_kv off the 32-key tiles, d / dv off
// the vector width, and the 64-row maximum.
TEST_P(AttnKernelTest, TilesMatchDoubleReference) {
  std::mt19937 rng(seed_);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  struct Shape {
    int64_t d, dv, n_kv;
    int tokens, group;
    int64_t depth;  // causal: token t sees keys <= depth + t; -1 random; -2 no mask
  };
  for (const Shape s :
       {Shape{64, 64, 300, 8, 8, 250}, Shape{72, 36, 97, 9, 7, -1}, Shape{40, 17, 33, 5, 3, -2},
        Shape{128, 128, 70, 4, 16, -1}, Shape{64, 64, 1, 1, 1, -1}, Shape{64, 64, 45, 64, 1, 0},
        Shape{16, 16, 200, 3, 5, 120}}) {
    const int rows = s.tokens * s.group;
    Problem p = random_problem(s.d, s.dv, s.n_kv, rows, rng);
    if (s.depth != -2) {
      p.mask.resize(static_cast<size_t>(rows) * static_cast<size_t>(s.n_kv));
      for (int t = 0; t < s.tokens; ++t) {
        std::vector<float> m(static_cast<size_t>(s.n_kv));
        for (int64_t c = 0; c < s.n_kv; ++c) {
          m[c] = s.depth >= 0              ? (c <= s.depth + t ? 0.0f : -INFINITY)
                 : c > 0 && rng() % 4 == 0 ? -INFINITY
                                           : dist(rng);
        }
        if (s.depth == -1 && t == 1) std::fill(m.begin(), m.end(), -INFINITY);
        for (int i = 0; i < s.group; ++i) {
          std::copy(m.begin(), m.end(), p.mask.begin() + (t * s.group + i) * s.n_kv);
        }
      }
      const uint16_t nan = 0x7E00;
      for (int64_t c = 0; c < s.n_kv; ++c) {
        bool seen = false;
        for (int r = 0; r < rows; ++r)
          seen |= p.mask[static_cast<size_t>(r * s.n_kv + c)] != -INFINITY;
        if (seen) continue;
        for (int64_t j = 0; j < s.d; ++j) p.k[static_cast<size_t>(c * s.d + j)] = nan;
        for (int64_t j = 0; j < s.dv; ++j) p.v[static_cast<size_t>(c * s.dv + j)] = nan;
      }
    }
    const std::vector<float> got = run_tiles(kernels(), p);
    const std::vector<double> want = reference(p);
    for (size_t i = 0; i < want.size(); ++i) {
      ASSERT_NEAR(got[i], want[i], tolerance(s.n_kv))
          << "tokens " << s.tokens << " group " << s.group << " d " << s.d << " n_kv " << s.n_kv
          << " at " << i << " seed " << seed_;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Tiers, AttnKernelTest, ::testing::ValuesIn(testing::simd_tiers()),
                         testing::tier_name);

}  // namespace
}  // namespace tessera::cpu
