// FLASH_ATTN_EXT: for each query row, one pass over the keys with an online
// softmax (running max M and sum S; earlier terms rescaled by exp(M_old - M)).
// Grouped-query heads read KV head h / (H / H_kv); batches likewise. Scores:
// s = q.k * scale, then softcap * tanh(s / softcap) when softcap > 0, plus
// slope * mask. With sinks (src[4], f32 [H]) head h's sink logit joins each
// row's softmax denominator: the sum gains e^(sink - M), the values nothing.
// K/V rows of any type read_row can convert. Cost per query row:
// n_kv * (D + Dv) multiply-adds plus one K and one V row conversion per key.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "cpu/kernels/kernels.h"
#include "cpu/ops/attention.h"
#include "cpu/ops/rows.h"
#include "tessera/core/op_params.h"

namespace tessera::cpu {
namespace {

bool supports(const Tensor& node) {
  const Tensor& q = *node.src[0];
  const Tensor& k = *node.src[1];
  const Tensor& v = *node.src[2];
  const Tensor* mask = node.src[3];
  const bool types =
      writable_rows(node) && is_float_type(q.type) && readable_rows(k) && readable_rows(v);
  const bool shapes = k.ne[0] == q.ne[0] && v.ne[1] == k.ne[1] && v.ne[2] == k.ne[2] &&
                      v.ne[3] == k.ne[3] && k.ne[2] >= 1 && k.ne[3] >= 1 &&
                      q.ne[2] % k.ne[2] == 0 && q.ne[3] % k.ne[3] == 0 && node.ne[0] == v.ne[0] &&
                      node.ne[1] == q.ne[2] && node.ne[2] == q.ne[1] && node.ne[3] == q.ne[3];
  const bool mask_ok =
      mask == nullptr || (is_float_type(mask->type) && mask->ne[0] == k.ne[1] &&
                          mask->ne[1] >= q.ne[1] && mask->ne[2] >= 1 && mask->ne[3] >= 1 &&
                          q.ne[2] % mask->ne[2] == 0 && q.ne[3] % mask->ne[3] == 0);
  const Tensor* sinks = node.src[4];
  const bool sinks_ok = sinks == nullptr || (sinks->type == DType::kF32 && sinks->ne[0] == q.ne[2] &&
                                             sinks->n_elements() == q.ne[2] && sinks->is_contiguous());
  return types && shapes && mask_ok && sinks_ok && FlashAttnExtParams::get(node).softcap >= 0.0f;
}

// Head h's sink logit, or null when the node has none.
const float* sinks_of(const Tensor& node) {
  return node.src[4] != nullptr ? static_cast<const float*>(node.src[4]->data) : nullptr;
}

// 1 / (sum + e^(sink - m)): what divides a row's undivided output (0 when
// nothing is left: every key masked and no sink, or a sink past float range).
float denominator_inverse(float m, float sum, const float* sink) {
  const float den = sink != nullptr ? sum + std::exp(*sink - m) : sum;
  return den == 0.0f || std::isinf(den) ? 0.0f : 1.0f / den;
}

constexpr int kRows = 6;  // q, k, v, mask, accumulator, output

int64_t row_len(const Tensor& node) {
  return std::max({node.src[0]->ne[0], node.src[2]->ne[0], node.src[1]->ne[1]});
}

// Fast path (a tier with attn_f16): f32 q of at most kAttnMaxD, f16 K and V with
// contiguous rows, no ALiBi, no softcap. Work units are (query, KV head, batch): the group of query
// heads sharing that KV head, each K/V row converted once for the group.
constexpr int64_t kMaxGroup = 64;

bool fast_shape(const Tensor& node) {
  const Tensor& q = *node.src[0];
  const Tensor& k = *node.src[1];
  const Tensor& v = *node.src[2];
  const FlashAttnExtParams p = FlashAttnExtParams::get(node);
  return q.type == DType::kF32 && k.type == DType::kF16 && v.type == DType::kF16 && k.nb[0] == 2 &&
         v.nb[0] == 2 && q.ne[2] / k.ne[2] <= kMaxGroup && q.ne[0] <= kAttnMaxD &&
         p.max_bias <= 0.0f && p.softcap <= 0.0f;
}

// Per thread: scores (kAttnBlock * n_kv) and mask rows (group * n_kv), q and
// out rows (group * len), and (max, sum) per row of a partial result.
size_t fast_floats(const Tensor& node) {
  const int64_t group = node.src[0]->ne[2] / node.src[1]->ne[2];
  return static_cast<size_t>(kAttnBlock + group) * scratch_floats(node.src[1]->ne[1]) +
         2 * static_cast<size_t>(group) * scratch_floats(row_len(node)) + scratch_floats(2 * group);
}

// Prompt path (a tier with attn_f16_tiles): units are (block of query
// tokens, KV head, batch), the block's tokens times the group's heads (at most
// kAttnTileRows rows) in one kernel call that converts each K / V row once for
// all of them. The mask must be one row per token (shared by the heads).
bool tile_shape(const Tensor& node) {
  const Tensor* mask = node.src[3];
  return fast_shape(node) && node.src[0]->ne[1] >= 2 && (mask == nullptr || mask->ne[2] == 1);
}

bool tiled(const Tensor& node, const Kernels* kernels) {
  // (Sinks go through the token path, which has each row's max and sum.)
  return kernels != nullptr && kernels->attn_f16_tiles != nullptr && tile_shape(node) &&
         node.src[4] == nullptr;
}

int64_t tile_tokens(const Tensor& node) {
  const int64_t group = node.src[0]->ne[2] / node.src[1]->ne[2];
  return std::max<int64_t>(1, kAttnTileRows / group);
}

int64_t key_tiles(const Tensor& node) {
  return (node.src[1]->ne[1] + kAttnTileKeys - 1) / kAttnTileKeys;
}

// Per thread, after fast_floats: the kernel's scratch, q and out rows (one a
// row), one mask row a token, and the tiles' flags.
size_t tile_floats(const Tensor& node) {
  if (!tile_shape(node)) return 0;
  const int64_t tokens = tile_tokens(node);
  const int64_t rows = tokens * (node.src[0]->ne[2] / node.src[1]->ne[2]);
  return attn_tile_floats(node.src[0]->ne[0], node.src[2]->ne[0]) +
         2 * static_cast<size_t>(rows) * scratch_floats(row_len(node)) +
         static_cast<size_t>(tokens) * scratch_floats(node.src[1]->ne[1]) +
         scratch_floats(key_tiles(node));
}

size_t slot_floats(const Tensor& node) {
  return fast_floats(node) + tile_floats(node);
}

size_t work_size(const Tensor& node, int nth) {
  const size_t ref = row_work_size(nth, kRows, row_len(node));
  if (!fast_shape(node)) return ref;
  return std::max(ref, static_cast<size_t>(nth) * slot_floats(node) * sizeof(float));
}

// Decode with fewer units than threads: each unit's keys split into `chunks`
// ranges (one per slot, at least kMinChunk keys each), merged in a second phase.
constexpr int64_t kMinChunk = 64;

int64_t key_chunks(int64_t units, int64_t n_kv, int nth) {
  const int64_t chunks = units < nth ? std::min<int64_t>(nth / units, n_kv / kMinChunk) : 1;
  return std::max<int64_t>(chunks, 1);
}

struct FastState {
  const Tensor &q, &k, &v;
  const Tensor* mask;
  int64_t group, batch_group, units, chunks;
  size_t kv_row, row;
  float* base;  // this thread's scratch
  const float* qp[kMaxGroup];
  const float* mp[kMaxGroup];
  float* op[kMaxGroup];
  AttnArgs a;

  FastState(const Tensor& node, const OpContext& ctx)
      : q(*node.src[0]), k(*node.src[1]), v(*node.src[2]), mask(node.src[3]) {
    group = q.ne[2] / k.ne[2];
    batch_group = q.ne[3] / k.ne[3];
    units = q.ne[1] * k.ne[2] * q.ne[3];
    chunks = key_chunks(units, k.ne[1], ctx.nth);
    kv_row = scratch_floats(k.ne[1]);
    row = scratch_floats(row_len(node));
    base = thread_base(ctx, ctx.ith, node);
    a.d = q.ne[0];
    a.dv = v.ne[0];
    a.g = static_cast<int>(group);
    a.q = qp;
    a.mask = mask ? mp : nullptr;
    a.k_stride = k.nb[1];
    a.v_stride = v.nb[1];
    a.scale = FlashAttnExtParams::get(node).scale;
    a.scores = base;
    a.out = op;
  }
  static float* thread_base(const OpContext& ctx, int ith, const Tensor& node) {
    return reinterpret_cast<float*>(ctx.work) + static_cast<size_t>(ith) * slot_floats(node);
  }
  float* masks() const { return base + kAttnBlock * kv_row; }
  float* qs() const { return masks() + group * kv_row; }
  static float* outs(float* b, int64_t group, size_t kv_row, size_t row) {
    return b + (kAttnBlock + group) * kv_row + group * row;
  }
  static float* lse(float* b, int64_t group, size_t kv_row, size_t row) {
    return b + (kAttnBlock + group) * kv_row + 2 * group * row;
  }

  // Unit u as (KV head, query, batch); q and mask rows of its heads, keys [k0, k1).
  void load(int64_t u, int64_t k0, int64_t k1, int64_t* hk, int64_t* iq, int64_t* b) {
    *hk = u % k.ne[2];
    *iq = (u / k.ne[2]) % q.ne[1];
    *b = u / (k.ne[2] * q.ne[1]);
    for (int64_t i = 0; i < group; ++i) {
      const int64_t h = *hk * group + i;
      qp[i] = read_row(q, *iq, h, *b, qs() + i * row);
      if (mask) {
        const int64_t hm = h % mask->ne[2];
        mp[i] = i > 0 && hm == (h - 1) % mask->ne[2]
                    ? mp[i - 1] - k0
                    : read_row(*mask, *iq, hm, *b % mask->ne[3], masks() + i * kv_row);
        mp[i] += k0;
      }
    }
    a.n_kv = k1 - k0;
    int64_t begin = 0;
    if (mask) {
      // Keys no row may see add nothing: a cache read in buckets of rows has
      // a masked tail, and in a batch of several sequences (an encoder's
      // documents) a token sees only its own sequence's run of cells.
      constexpr float kMasked = -std::numeric_limits<float>::infinity();
      int64_t end = 0;
      for (int64_t i = 0; i < group; ++i) {
        int64_t e = a.n_kv;
        while (e > end && mp[i][e - 1] == kMasked) --e;
        end = std::max(end, e);
      }
      begin = end;
      for (int64_t i = 0; i < group; ++i) {
        int64_t f = 0;
        while (f < begin && mp[i][f] == kMasked) ++f;
        begin = std::min(begin, f);
      }
      for (int64_t i = 0; i < group; ++i) mp[i] += begin;
      a.n_kv = end - begin;
    }
    a.k = row_ptr(k, k0 + begin, *hk, *b / batch_group);
    a.v = row_ptr(v, k0 + begin, *hk, *b / batch_group);
  }
};

// Unit u of FastState (one query token's group of heads) over every key.
void run_token(Tensor& node, const OpContext& ctx, FastState& st, int64_t u) {
  const int64_t group = st.group;
  int64_t hk = 0, iq = 0, b = 0;
  st.load(u, 0, st.k.ne[1], &hk, &iq, &b);
  float* outs = FastState::outs(st.base, group, st.kv_row, st.row);
  for (int64_t i = 0; i < group; ++i) {
    st.op[i] = row_out(node, hk * group + i, iq, b, outs + i * st.row);
  }
  const float* sinks = sinks_of(node);
  // With sinks the kernel leaves each row undivided and reports (max, sum).
  float* lse = sinks != nullptr ? FastState::lse(st.base, group, st.kv_row, st.row) : nullptr;
  st.a.lse = lse;
  ctx.kernels->attn_f16(st.a);
  for (int64_t i = 0; i < group; ++i) {
    if (lse != nullptr) {
      const float inv = denominator_inverse(lse[2 * i], lse[2 * i + 1], sinks + hk * group + i);
      for (int64_t j = 0; j < st.v.ne[0]; ++j) st.op[i][j] *= inv;
    }
    write_row(node, hk * group + i, iq, b, st.op[i]);
  }
}

// Tiles of keys for `nt` tokens' mask rows: skipped if no token sees any of
// the tile's keys, plain if every token sees all of them with mask 0, else
// masked. seen: (token, tile) pairs where the token sees a key; kept: tiles
// not skipped.
void classify_tiles(const float* const* mrow, int64_t nt, int64_t n_kv, AttnTile* tiles,
                    int64_t* seen, int64_t* kept) {
  *seen = *kept = 0;
  for (int64_t it = 0; it * kAttnTileKeys < n_kv; ++it) {
    const int64_t k0 = it * kAttnTileKeys, k1 = std::min(n_kv, k0 + kAttnTileKeys);
    bool any = false, plain = true;
    for (int64_t t = 0; t < nt; ++t) {
      // On the bits, as OR reductions the compiler vectorizes: some key
      // not -inf (0xff800000), every key +-0.
      uint32_t differs = 0, nonzero = 0;
      for (int64_t c = k0; c < k1; ++c) {
        uint32_t bits;
        std::memcpy(&bits, mrow[t] + c, sizeof bits);
        differs |= bits ^ 0xff800000u;
        nonzero |= bits << 1;
      }
      *seen += differs != 0;
      any |= differs != 0;
      plain &= nonzero == 0;
    }
    tiles[it] = !any ? AttnTile::kSkip : plain ? AttnTile::kPlain : AttnTile::kMasked;
    *kept += any;
  }
}

// Prompt path. Units, taken from the op's counter, are (token block, KV
// head, batch) with the token block fastest, so that consecutive units read
// the same head's keys while they are in cache. A block whose tokens see
// different keys (a batch of several sequences' tokens) goes token by token
// instead: the tiles would compute every token against every key any of
// them sees.
void compute_tiles(Tensor& node, const OpContext& ctx) {
  FastState st(node, ctx);
  const Tensor& q = st.q;
  const Tensor& k = st.k;
  const Tensor* mask = st.mask;
  const int64_t group = st.group, n_q = q.ne[1], n_kv = k.ne[1];
  const int64_t tokens = tile_tokens(node), blocks = (n_q + tokens - 1) / tokens;
  const int64_t units = blocks * k.ne[2] * q.ne[3], n_tiles = key_tiles(node);
  float* at = st.base + fast_floats(node);
  float* kernel_scratch = at;
  at += attn_tile_floats(q.ne[0], st.v.ne[0]);
  float* qs = at;
  at += tokens * group * st.row;
  float* outs = at;
  at += tokens * group * st.row;
  float* masks = at;
  at += tokens * st.kv_row;
  auto* tiles = reinterpret_cast<AttnTile*>(at);
  const float* qp[kAttnTileRows];
  const float* mp[kAttnTileRows];
  const float* mrow[kAttnTileRows];
  float* op[kAttnTileRows];
  AttnTileArgs a;
  a.d = q.ne[0];
  a.dv = st.v.ne[0];
  a.n_kv = n_kv;
  a.q = qp;
  a.mask = mask ? mp : nullptr;
  a.tiles = tiles;
  a.k_stride = k.nb[1];
  a.v_stride = st.v.nb[1];
  a.scale = st.a.scale;
  a.scratch = kernel_scratch;
  a.out = op;
  for (int64_t n = 0;; ++n) {
    const int64_t u =
        ctx.counter ? ctx.counter->fetch_add(1, std::memory_order_relaxed) : ctx.ith + n * ctx.nth;
    if (u >= units) break;
    const int64_t tb = u % blocks, hk = (u / blocks) % k.ne[2], b = u / (blocks * k.ne[2]);
    const int64_t t0 = tb * tokens, nt = std::min(tokens, n_q - t0);
    int64_t seen = n_tiles * nt, kept = n_tiles;  // no mask: every tile plain
    if (mask == nullptr) {
      std::fill(tiles, tiles + n_tiles, AttnTile::kPlain);
    } else {
      for (int64_t t = 0; t < nt; ++t) {
        mrow[t] = read_row(*mask, t0 + t, 0, b % mask->ne[3], masks + t * st.kv_row);
      }
      classify_tiles(mrow, nt, n_kv, tiles, &seen, &kept);
    }
    if (4 * seen < 3 * kept * nt) {
      for (int64_t t = 0; t < nt; ++t)
        run_token(node, ctx, st, ((b * n_q) + t0 + t) * k.ne[2] + hk);
      continue;
    }
    a.rows = static_cast<int>(nt * group);
    for (int64_t t = 0; t < nt; ++t) {
      for (int64_t i = 0; i < group; ++i) {
        const int64_t r = t * group + i, h = hk * group + i;
        qp[r] = read_row(q, t0 + t, h, b, qs + r * st.row);
        mp[r] = mask ? mrow[t] : nullptr;
        op[r] = row_out(node, h, t0 + t, b, outs + r * st.row);
      }
    }
    a.k = row_ptr(k, 0, hk, b / st.batch_group);
    a.v = row_ptr(st.v, 0, hk, b / st.batch_group);
    ctx.kernels->attn_f16_tiles(a);
    for (int64_t t = 0; t < nt; ++t) {
      for (int64_t i = 0; i < group; ++i)
        write_row(node, hk * group + i, t0 + t, b, op[t * group + i]);
    }
  }
}

void compute_fast(Tensor& node, const OpContext& ctx) {
  if (tiled(node, ctx.kernels)) return compute_tiles(node, ctx);
  FastState st(node, ctx);
  const int64_t group = st.group;
  int64_t hk = 0, iq = 0, b = 0;
  if (st.chunks == 1) {
    const Range r = split_rows(st.units, ctx.ith, ctx.nth);
    for (int64_t u = r.begin; u < r.end; ++u) run_token(node, ctx, st, u);
    return;
  }
  // Split keys: partial (max, sum, undivided out) per thread, then chunk 0 merges.
  const int64_t tasks = st.units * st.chunks;
  const int64_t u = ctx.ith / st.chunks, c = ctx.ith % st.chunks;
  if (ctx.phase == 0) {
    if (ctx.ith < tasks) {
      const Range kr = split_rows(st.k.ne[1], static_cast<int>(c), static_cast<int>(st.chunks));
      st.load(u, kr.begin, kr.end, &hk, &iq, &b);
      float* outs = FastState::outs(st.base, group, st.kv_row, st.row);
      for (int64_t i = 0; i < group; ++i) st.op[i] = outs + i * st.row;
      st.a.lse = FastState::lse(st.base, group, st.kv_row, st.row);
      ctx.kernels->attn_f16(st.a);
    }
    return;
  }
  // Phase 1: chunk 0 of each unit merges the unit's partials.
  if (ctx.ith >= tasks || c != 0) return;
  hk = u % st.k.ne[2];
  iq = (u / st.k.ne[2]) % st.q.ne[1];
  b = u / (st.k.ne[2] * st.q.ne[1]);
  const int64_t dv = st.v.ne[0];
  float* mine = FastState::outs(st.base, group, st.kv_row, st.row);
  for (int64_t i = 0; i < group; ++i) {
    float m = -std::numeric_limits<float>::infinity();
    for (int64_t t = 0; t < st.chunks; ++t) {
      float* tb = FastState::thread_base(ctx, static_cast<int>(ctx.ith + t), node);
      m = std::max(m, FastState::lse(tb, group, st.kv_row, st.row)[2 * i]);
    }
    float* out = row_out(node, hk * group + i, iq, b, mine + i * st.row);
    float sum = 0.0f;
    for (int64_t t = 0; t < st.chunks; ++t) {
      float* tb = FastState::thread_base(ctx, static_cast<int>(ctx.ith + t), node);
      const float* l = FastState::lse(tb, group, st.kv_row, st.row) + 2 * i;
      const float w = l[1] == 0.0f ? 0.0f : std::exp(l[0] - m);
      const float* part = FastState::outs(tb, group, st.kv_row, st.row) + i * st.row;
      for (int64_t j = 0; j < dv; ++j) out[j] = (t == 0 ? 0.0f : out[j]) + w * part[j];
      sum += w * l[1];
    }
    const float* sinks = sinks_of(node);
    const float inv = denominator_inverse(m, sum, sinks ? sinks + hk * group + i : nullptr);
    for (int64_t j = 0; j < dv; ++j) out[j] *= inv;
    write_row(node, hk * group + i, iq, b, out);
  }
}

void compute(Tensor& node, const OpContext& ctx) {
  if (ctx.kernels && ctx.kernels->attn_f16 && fast_shape(node)) return compute_fast(node, ctx);
  const Tensor& q = *node.src[0];
  const Tensor& k = *node.src[1];
  const Tensor& v = *node.src[2];
  const Tensor* mask = node.src[3];
  const FlashAttnExtParams p = FlashAttnExtParams::get(node);
  const float max_bias = p.max_bias;
  const float softcap = p.softcap;
  // With a softcap the scale folds into tanh's argument: softcap * tanh(q.k * scale / softcap).
  const float scale = softcap > 0.0f ? p.scale / softcap : p.scale;
  const int64_t d = q.ne[0], dv = v.ne[0], n_kv = k.ne[1];
  const int64_t group = q.ne[2] / k.ne[2], batch_group = q.ne[3] / k.ne[3];
  const int64_t len = row_len(node);
  float* sq = thread_row(ctx, kRows, 0, len);
  float* sk = thread_row(ctx, kRows, 1, len);
  float* sv = thread_row(ctx, kRows, 2, len);
  float* sm = thread_row(ctx, kRows, 3, len);
  float* acc = thread_row(ctx, kRows, 4, len);
  float* sd = thread_row(ctx, kRows, 5, len);
  const Range r = split_rows(node.n_rows(), ctx.ith, ctx.nth);
  for (int64_t row = r.begin; row < r.end; ++row) {
    const RowIndex o = row_index(node, row);  // (head, query, batch)
    const int64_t h = o.i1, iq = o.i2, b = o.i3;
    const int64_t hk = h / group, bk = b / batch_group;
    const float* qr = read_row(q, iq, h, b, sq);
    const float* mr = mask ? read_row(*mask, iq, h % mask->ne[2], b % mask->ne[3], sm) : nullptr;
    const float slope = alibi_slope(max_bias, h, q.ne[2]);
    float m = -std::numeric_limits<float>::infinity();
    float sum = 0.0f;
    std::fill(acc, acc + dv, 0.0f);
    for (int64_t ic = 0; ic < n_kv; ++ic) {
      const float bias = mr ? slope * mr[ic] : 0.0f;
      if (bias == -std::numeric_limits<float>::infinity()) continue;
      const float* kr = read_row(k, ic, hk, bk, sk);
      float s = 0.0f;
      for (int64_t j = 0; j < d; ++j) s += qr[j] * kr[j];
      s *= scale;
      if (softcap > 0.0f) s = softcap * std::tanh(s);
      s += bias;
      // Rescale what is accumulated when the max grows, else weight this key.
      float weight = 1.0f;
      if (s > m) {
        const float shrink = std::exp(m - s);
        for (int64_t j = 0; j < dv; ++j) acc[j] *= shrink;
        sum *= shrink;
        m = s;
      } else {
        weight = std::exp(s - m);
      }
      const float* vr = read_row(v, ic, hk, bk, sv);
      for (int64_t j = 0; j < dv; ++j) acc[j] += weight * vr[j];
      sum += weight;
    }
    const float* sinks = sinks_of(node);
    const float inv = denominator_inverse(m, sum, sinks ? sinks + h : nullptr);  // all masked: zeros
    float* out = row_out(node, o, sd);
    for (int64_t j = 0; j < dv; ++j) out[j] = acc[j] * inv;
    write_row(node, o, out);
  }
}

int phases(const Tensor& node, int nth, const Kernels* kernels) {
  if (kernels == nullptr || !kernels->attn_f16 || !fast_shape(node) || tiled(node, kernels))
    return 1;
  const Tensor& q = *node.src[0];
  const Tensor& k = *node.src[1];
  return key_chunks(q.ne[1] * k.ne[2] * q.ne[3], k.ne[1], nth) > 1 ? 2 : 1;
}

}  // namespace

extern const OpImpl kFlashAttnExtOp{supports, work_size, compute, phases};

}  // namespace tessera::cpu
