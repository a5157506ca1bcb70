// MUL_MAT_ID, the expert matmul: dst[:, s, t] = w[:, :, ids[s, t]] times
// x[:, s % n_x, t] (tessera/core/ops.h).
//
// The columns are grouped by expert so each selected expert's weights stream
// once per op, whatever the number of tokens, and an expert no column selects
// is not read at all (decode reads n_used of n_expert matrices).
//  phase 0  slot 0 checks the ids and groups the columns (s, t) by expert: the
//           plan, at the head of the work block;
//  phase 1  the columns are converted into the kernel's activation format, in
//           the plan's order, so each expert's columns lie evenly spaced (the
//           shape MUL_MAT's kernels take), split over the slots;
//  phase 2  work items from the op's counter: for an expert of a few columns
//           (GEMV-like), 64 weight rows; otherwise a (row block, column block)
//           GEMM chunk. Slots claim runs of items, each 1 / (2 nth) of those
//           left, so long runs (a stream the prefetchers keep) come first and
//           the slots end within about one item of each other; a run crosses
//           from one expert into the next. The kernel writes a slot's tile,
//           then copied to the columns' places in dst (one column: straight
//           into dst).
// One token (decode) takes one phase: each slot makes the plan and converts
// the n_used columns itself, into its own copy (microseconds), so no slot
// waits for another before the items.
// With no kernel for the weights (the ref tier, or a type without one),
// phase 1 computes instead: items of 16 weight rows of one expert, each row
// converted to f32 once and dotted with every column of that expert.
#include <algorithm>
#include <atomic>
#include <cstring>

#include "cpu/kernels/kernels.h"
#include "cpu/kernels/repack.h"
#include "cpu/ops/mul_mat.h"
#include "cpu/ops/op.h"
#include "tessera/core/error.h"

namespace tessera::cpu {
namespace {

using namespace matmul;

constexpr int64_t kRefRows = 16;                      // weight rows per item of the ref path
constexpr int64_t kMaxTile = int64_t{256} * 256;      // floats: the largest GEMM chunk a kernel asks for

struct Shape {
  int64_t k, m, n_expert, n_used, n_x, n_tokens, pairs;
};
Shape shape_of(const Tensor& node) {
  const Tensor& w = *node.src[0];
  const Tensor& x = *node.src[1];
  const Tensor& ids = *node.src[2];
  return {w.ne[0], w.ne[1], w.ne[2], ids.ne[0], x.ne[1], ids.ne[1], ids.ne[0] * ids.ne[1]};
}

// Bytes of one gathered column: the kernel's format, or f32 for kernels that
// read f32 (kF32, kF32Groups).
size_t column_bytes(ActFormat act, int64_t k) {
  return act == ActFormat::kF32 ? static_cast<size_t>(k) * sizeof(float) : act_bytes(act, k);
}
size_t max_column_bytes(int64_t k) {
  return std::max({column_bytes(ActFormat::kF32, k), column_bytes(ActFormat::kQ8, k),
                   k % kQKK == 0 ? column_bytes(ActFormat::kQ8K, k) : 0});
}

// One token: the fast path takes one phase, each slot planning and
// converting alone into its own copy of the plan.
bool one_token(const Shape& s) { return s.n_tokens == 1; }
bool one_phase(const Shape& s, const MatKernel* mk) { return mk != nullptr && one_token(s); }

// Where each part of the work block lies (bytes from its start): the plan and
// the converted columns (`copies` of them, `copy` bytes apart: one per slot in
// one phase), then a tile per slot.
struct Layout {
  size_t offsets, items, pairs, act, copy, tiles, total;
};
Layout layout_of(const Tensor& node, int nth, int copies) {
  const Shape s = shape_of(node);
  const auto ints = [](int64_t n, size_t each) { return round_up(static_cast<size_t>(n) * each, kLine); };
  Layout l{};
  l.offsets = 0;
  l.items = l.offsets + ints(s.n_expert + 1, sizeof(int64_t));
  l.pairs = l.items + ints(s.n_expert + 1, sizeof(int64_t));
  l.act = l.pairs + ints(s.pairs, sizeof(int32_t));
  l.copy = l.act + ints(s.pairs, max_column_bytes(s.k));
  l.tiles = l.copy * static_cast<size_t>(copies);
  const size_t tile = std::max(static_cast<size_t>(kMaxTile) * sizeof(float),
                               static_cast<size_t>(kRefRows + s.k) * sizeof(float));
  l.total = l.tiles + round_up(tile, kLine) * static_cast<size_t>(nth);
  return l;
}

// The plan: expert e's columns are pairs[offsets[e] .. offsets[e + 1]), each
// s + n_used * t, in (t, s) order; its work items are items[e] .. items[e + 1].
struct Plan {
  int64_t* offsets;
  int64_t* items;
  int32_t* pairs;
  uint8_t* act;  // the converted columns, in plan order
};
Plan plan_of(const OpContext& ctx, const Layout& l, int copy) {
  uint8_t* base = ctx.work + l.copy * static_cast<size_t>(copy);
  return {reinterpret_cast<int64_t*>(base + l.offsets), reinterpret_cast<int64_t*>(base + l.items),
          reinterpret_cast<int32_t*>(base + l.pairs), base + l.act};
}

// How expert columns are cut into work items: rows x cols per item.
struct Cut {
  int64_t rows, cols;
};
Cut cut_for(const MatKernel* mk, int64_t count) {
  if (mk == nullptr) return {kRefRows, std::max<int64_t>(count, 1)};
  // GEMV: 64-row items, claimed in runs (run_items).
  if (count <= kGemvCols) return {kGemvMinRows, std::max<int64_t>(count, 1)};
  return {std::min(gemm_rows(*mk), kMaxTile / gemm_cols(*mk)), gemm_cols(*mk)};
}
int64_t items_for(const Cut& c, int64_t m, int64_t count) {
  if (count == 0) return 0;
  return (m + c.rows - 1) / c.rows * ((count + c.cols - 1) / c.cols);
}

bool supports(const Tensor& node) {
  if (node.src[0] == nullptr || node.src[1] == nullptr || node.src[2] == nullptr) return false;
  const Tensor& w = *node.src[0];
  const Tensor& x = *node.src[1];
  const Tensor& ids = *node.src[2];
  const DTypeInfo& wi = dtype_info(w.type);
  return node.type == DType::kF32 && x.type == DType::kF32 && ids.type == DType::kI32 &&
         wi.has_dequantize && w.nb[0] == wi.block_bytes && !is_view_of_repacked(w) &&
         x.nb[0] == sizeof(float) && node.nb[0] == sizeof(float) && ids.nb[0] == sizeof(int32_t) &&
         w.ne[3] == 1 && x.ne[3] == 1 && w.ne[0] == x.ne[0] && ids.ne[1] == x.ne[2] &&
         ids.ne[2] == 1 && ids.ne[3] == 1 && x.ne[1] > 0 && ids.ne[0] % x.ne[1] == 0 &&
         node.ne[0] == w.ne[1] && node.ne[1] == ids.ne[0] && node.ne[2] == x.ne[2] &&
         node.ne[3] == 1 && ids.ne[0] <= (int64_t{1} << 20) && ids.n_elements() < (int64_t{1} << 31);
}

size_t work_size(const Tensor& node, int nth) {
  // Sized for one phase's per-slot copies whatever the kernels: the device
  // may pick the tier after sizing.
  return layout_of(node, nth, one_token(shape_of(node)) ? nth : 1).total;
}

int phases(const Tensor& node, int, const Kernels* kernels) {
  const MatKernel* mk = fast_kernel(kernels, *node.src[0]);
  if (one_phase(shape_of(node), mk)) return 1;
  return mk != nullptr ? 3 : 2;
}

// Phase 0: checks the ids and writes the plan.
void make_plan(const Tensor& node, const Plan& p, const MatKernel* mk) {
  const Shape s = shape_of(node);
  const Tensor& ids = *node.src[2];
  std::fill(p.offsets, p.offsets + s.n_expert + 1, 0);
  for (int64_t t = 0; t < s.n_tokens; ++t) {
    for (int64_t slot = 0; slot < s.n_used; ++slot) {
      int32_t e;
      std::memcpy(&e, element_ptr(ids, slot, t, 0, 0), sizeof e);
      if (e < 0 || e >= s.n_expert) {
        fail(ErrorCategory::kInvalidArgument, "[MUL_MAT_ID] expert id {} at [{}, {}], expected 0..{}", e,
             slot, t, s.n_expert - 1);
      }
      ++p.offsets[e + 1];
    }
  }
  p.items[0] = 0;
  for (int64_t e = 0; e < s.n_expert; ++e) {
    const int64_t count = p.offsets[e + 1];
    p.items[e + 1] = p.items[e] + items_for(cut_for(mk, count), s.m, count);
    p.offsets[e + 1] += p.offsets[e];
  }
  // Place the pairs: a running fill per expert, kept in offsets[e] and restored after.
  for (int64_t t = 0; t < s.n_tokens; ++t) {
    for (int64_t slot = 0; slot < s.n_used; ++slot) {
      int32_t e;
      std::memcpy(&e, element_ptr(ids, slot, t, 0, 0), sizeof e);
      p.pairs[p.offsets[e]++] = static_cast<int32_t>(slot + s.n_used * t);
    }
  }
  for (int64_t e = s.n_expert; e > 0; --e) p.offsets[e] = p.offsets[e - 1];
  p.offsets[0] = 0;
}

const float* column_of(const Tensor& x, const Shape& s, int32_t pair) {
  const int64_t slot = pair % s.n_used, t = pair / s.n_used;
  return reinterpret_cast<const float*>(row_ptr(x, slot % s.n_x, t, 0));
}

// Phase 1 (fast path): the columns in plan order, converted; slot ith of nth
// takes its share (one phase: 0 of 1, every column).
void convert(const Tensor& node, const Plan& p, const Kernels& k, ActFormat act, int ith, int nth) {
  const Shape s = shape_of(node);
  const Tensor& x = *node.src[1];
  if (act == ActFormat::kF32Groups) {  // per expert: groups of kActGroup columns, k-major
    const Range r = split_rows(s.n_expert, ith, nth);
    for (int64_t e = r.begin; e < r.end; ++e) {
      const int64_t first = p.offsets[e], count = p.offsets[e + 1] - first;
      for (int64_t c0 = 0; c0 < count; c0 += kActGroup) {
        const int64_t w = std::min(kActGroup, count - c0);
        float* dst = reinterpret_cast<float*>(p.act) + (first + c0) * s.k;
        for (int64_t c = 0; c < w; ++c) {
          const float* src = column_of(x, s, p.pairs[first + c0 + c]);
          for (int64_t i = 0; i < s.k; ++i) dst[i * w + c] = src[i];
        }
      }
    }
    return;
  }
  const size_t bytes = column_bytes(act, s.k);
  const Range r = split_rows(s.pairs, ith, nth);
  for (int64_t q = r.begin; q < r.end; ++q) {
    uint8_t* dst = p.act + static_cast<size_t>(q) * bytes;
    if (s.n_x == 1 && one_token(s) && q > r.begin) {  // every pair reads the same column
      std::memcpy(dst, p.act + static_cast<size_t>(r.begin) * bytes, bytes);
      continue;
    }
    const float* src = column_of(x, s, p.pairs[q]);
    switch (act) {
      case ActFormat::kF32:
        std::memcpy(dst, src, bytes);
        break;
      case ActFormat::kQ8:
        k.quantize_q8(src, reinterpret_cast<BlockQ8*>(dst), s.k);
        break;
      case ActFormat::kQ8K:
        k.quantize_q8_k(src, reinterpret_cast<block_q8_K*>(dst), s.k);
        break;
      case ActFormat::kF32Groups:
        break;
    }
  }
}

// The expert whose items hold `item` (items is a prefix over experts).
int64_t expert_of(const Plan& p, int64_t n_expert, int64_t item) {
  return std::upper_bound(p.items, p.items + n_expert + 1, item) - p.items - 1;
}

// Copies a tile of rows x cols outputs (column c at tile + c * rows) to the
// places of columns first + c of the plan, rows r0...
void scatter(Tensor& node, const Shape& s, const Plan& p, int64_t first, int64_t r0, int64_t rows,
             int64_t cols, const float* tile) {
  for (int64_t c = 0; c < cols; ++c) {
    const int32_t pair = p.pairs[first + c];
    std::memcpy(element_ptr(node, r0, pair % s.n_used, pair / s.n_used, 0), tile + c * rows,
                static_cast<size_t>(rows) * sizeof(float));
  }
}

// Rows [r0, r0 + rows) of expert e against its columns c0 .. c0 + cols.
void run_block(Tensor& node, const Shape& s, const Plan& p, const MatKernel& mk, int64_t e,
               int64_t r0, int64_t rows, int64_t c0, int64_t cols, float* tile) {
  const Tensor& w = *node.src[0];
  const size_t bytes = column_bytes(mk.act, s.k);
  const int64_t first = p.offsets[e];
  MatArgs a;
  a.k = s.k;
  a.rows = rows;
  a.cols = cols;
  set_weight_rows(w, r0, e, 0, a);
  a.x = p.act + static_cast<size_t>(first + c0) * bytes;
  a.x_stride = bytes;
  const bool direct = cols == 1;
  if (direct) {
    const int32_t pair = p.pairs[first + c0];
    a.out = reinterpret_cast<float*>(element_ptr(node, r0, pair % s.n_used, pair / s.n_used, 0));
    a.out_stride = node.nb[1];
  } else {
    a.out = tile;
    a.out_stride = static_cast<size_t>(rows) * sizeof(float);
  }
  mk.run(a);
  if (!direct) scatter(node, s, p, first + c0, r0, rows, cols, tile);
}

// Items [i, end) of expert e's, all within it.
void run_span(Tensor& node, const Shape& s, const Plan& p, const MatKernel& mk, int64_t e, int64_t i,
              int64_t end, float* tile) {
  const int64_t count = p.offsets[e + 1] - p.offsets[e];
  const Cut cut = cut_for(&mk, count);
  if (count <= kGemvCols) {  // one column block: the items' rows are one run
    const int64_t r0 = (i - p.items[e]) * cut.rows;
    const int64_t r1 = std::min((end - p.items[e]) * cut.rows, s.m);
    // Rows a tile holds, whole items (a run starts on a panel).
    const int64_t step = count == 1 ? r1 - r0 : kMaxTile / count / cut.rows * cut.rows;
    for (int64_t r = r0; r < r1; r += step) {
      run_block(node, s, p, mk, e, r, std::min(step, r1 - r), 0, count, tile);
    }
    return;
  }
  const int64_t row_blocks = (s.m + cut.rows - 1) / cut.rows;
  for (; i < end; ++i) {
    const int64_t local = i - p.items[e];
    const int64_t r0 = local % row_blocks * cut.rows, c0 = local / row_blocks * cut.cols;
    run_block(node, s, p, mk, e, r0, std::min(cut.rows, s.m - r0), c0,
              std::min(cut.cols, count - c0), tile);
  }
}

// Phase 2 (fast path): runs of items from the counter, each 1 / (2 nth) of
// the items left (at least one).
void run_items(Tensor& node, const Plan& p, const MatKernel& mk, float* tile, const OpContext& ctx) {
  const Shape s = shape_of(node);
  const int64_t total = p.items[s.n_expert];
  std::atomic<int64_t>& next = *ctx.counter;
  int64_t start = next.load(std::memory_order_relaxed);
  while (start < total) {
    const int64_t take = std::max<int64_t>(1, (total - start) / (2 * ctx.nth));
    if (!next.compare_exchange_weak(start, start + take, std::memory_order_relaxed)) continue;
    for (int64_t i = start; i < start + take;) {
      const int64_t e = expert_of(p, s.n_expert, i);
      const int64_t end = std::min(start + take, p.items[e + 1]);
      run_span(node, s, p, mk, e, i, end, tile);
      i = end;
    }
    start = next.load(std::memory_order_relaxed);
  }
}

// Phase 1 (ref path): items of kRefRows rows of one expert.
void compute_ref(Tensor& node, const Plan& p, float* wrow, const OpContext& ctx) {
  const Shape s = shape_of(node);
  const Tensor& w = *node.src[0];
  const Tensor& x = *node.src[1];
  const int64_t total = p.items[s.n_expert];
  std::atomic<int64_t>& next = *ctx.counter;
  for (int64_t item = next.fetch_add(1, std::memory_order_relaxed); item < total;
       item = next.fetch_add(1, std::memory_order_relaxed)) {
    const int64_t e = expert_of(p, s.n_expert, item);
    const int64_t r0 = (item - p.items[e]) * kRefRows;
    for (int64_t i = r0; i < std::min(r0 + kRefRows, s.m); ++i) {
      read_row_f32(w, i, e, 0, wrow);
      for (int64_t q = p.offsets[e]; q < p.offsets[e + 1]; ++q) {
        const int32_t pair = p.pairs[q];
        const float* xr = column_of(x, s, pair);
        float sum = 0.0f;
        for (int64_t kk = 0; kk < s.k; ++kk) sum += wrow[kk] * xr[kk];
        *reinterpret_cast<float*>(element_ptr(node, i, pair % s.n_used, pair / s.n_used, 0)) = sum;
      }
    }
  }
}

void compute(Tensor& node, const OpContext& ctx) {
  const MatKernel* mk = fast_kernel(ctx.kernels, *node.src[0]);
  const bool alone = one_phase(shape_of(node), mk);
  const Layout l = layout_of(node, ctx.nth, alone ? ctx.nth : 1);
  const Plan p = plan_of(ctx, l, alone ? ctx.ith : 0);
  const size_t tile_bytes = (l.total - l.tiles) / static_cast<size_t>(ctx.nth);
  float* tile = reinterpret_cast<float*>(ctx.work + l.tiles + tile_bytes * static_cast<size_t>(ctx.ith));
  if (alone) {
    make_plan(node, p, mk);
    convert(node, p, *ctx.kernels, mk->act, 0, 1);
    run_items(node, p, *mk, tile, ctx);
    return;
  }
  if (ctx.phase == 0) {
    if (ctx.ith == 0) make_plan(node, p, mk);
    return;
  }
  if (mk == nullptr) {
    compute_ref(node, p, tile, ctx);
  } else if (ctx.phase == 1) {
    convert(node, p, *ctx.kernels, mk->act, ctx.ith, ctx.nth);
  } else {
    run_items(node, p, *mk, tile, ctx);
  }
}

// ---- ADD_ID ------------------------------------------------------------------------

bool add_id_supports(const Tensor& node) {
  if (node.src[0] == nullptr || node.src[1] == nullptr || node.src[2] == nullptr) return false;
  const Tensor& a = *node.src[0];
  const Tensor& b = *node.src[1];
  const Tensor& ids = *node.src[2];
  return node.type == DType::kF32 && a.type == DType::kF32 && b.type == DType::kF32 &&
         ids.type == DType::kI32 && a.nb[0] == sizeof(float) && b.nb[0] == sizeof(float) &&
         node.nb[0] == sizeof(float) && b.ne[0] == a.ne[0] && ids.ne[0] == a.ne[1] &&
         ids.ne[1] == a.ne[2] && a.ne[3] == 1 && node.ne == a.ne;
}

void add_id_compute(Tensor& node, const OpContext& ctx) {
  const Tensor& a = *node.src[0];
  const Tensor& b = *node.src[1];
  const Tensor& ids = *node.src[2];
  const Range r = split_rows(a.ne[1] * a.ne[2], ctx.ith, ctx.nth);
  for (int64_t row = r.begin; row < r.end; ++row) {
    const int64_t i1 = row % a.ne[1], i2 = row / a.ne[1];
    int32_t id;
    std::memcpy(&id, element_ptr(ids, i1, i2, 0, 0), sizeof id);
    if (id < 0 || id >= b.ne[1]) {
      fail(ErrorCategory::kInvalidArgument, "[ADD_ID] row id {} at [{}, {}], expected 0..{}", id, i1, i2,
           b.ne[1] - 1);
    }
    const auto* x = reinterpret_cast<const float*>(row_ptr(a, i1, i2, 0));
    const auto* bias = reinterpret_cast<const float*>(row_ptr(b, id, 0, 0));
    auto* y = reinterpret_cast<float*>(row_ptr(node, i1, i2, 0));
    for (int64_t i = 0; i < a.ne[0]; ++i) y[i] = x[i] + bias[i];
  }
}

}  // namespace

extern const OpImpl kMulMatIdOp{supports, work_size, compute, phases};
extern const OpImpl kAddIdOp{add_id_supports, nullptr, add_id_compute};

}  // namespace tessera::cpu
