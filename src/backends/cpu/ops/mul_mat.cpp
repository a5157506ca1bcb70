// MUL_MAT: dst[i, j] = sum_k w[k, i] * x[k, j] per batch, weights broadcast
// over dims 2 and 3.
//
// Fast path (a tier with a kernel for the weight layout, kernels/kernels.h):
//  1. the f32 activations are converted ONCE into scratch (Q8 / Q8_K blocks
//     for quantized weights; float weights read them as they are);
//  2. the (batch, row block, column block) chunks go to the kernels.
// GEMV-like shapes (<= 8 columns): each slot converts the columns itself
// (a few microseconds) into its own copy, then takes runs of rows from the
// op's counter: one phase, and a thread that starts late or runs slow (a
// busy machine) takes fewer runs instead of holding the others up.
// GEMM: phase 0 splits the conversion over the slots, phase 1 takes chunks
// from the op's counter. The device keeps the converted activations for the
// next MUL_MAT of the same activations (converted_input), which then skips
// the conversion: q / k / v and gate / up convert once, GEMV or GEMM.
// Ref path (the ref tier, or no kernel): each thread takes a range of weight
// rows, converts each row to f32 once and dots it with every input column.
#include <algorithm>
#include <atomic>
#include <cstring>

#include "cpu/kernels/kernels.h"
#include "cpu/kernels/repack.h"
#include "cpu/ops/mul_mat.h"
#include "cpu/ops/op.h"

namespace tessera::cpu {
namespace matmul {
namespace {

// The table entry for w's type and layout (null: a type with no kernel slot).
const MatKernel* entry(const Kernels& k, const Tensor& w) {
  switch (w.type) {
    case DType::kF32:
      return &k.f32;
    case DType::kF16:
      return is_repacked(w) ? &k.f16_panel : &k.f16;
    case DType::kBF16:
      return &k.bf16;
    case DType::kQ4_0:
      return is_repacked(w) ? &k.q4_0_panel : &k.q4_0;
    case DType::kQ8_0:
      return is_repacked(w) ? &k.q8_0_panel : &k.q8_0;
    case DType::kQ4_1:
      return &k.q4_1;
    case DType::kQ5_0:
      return &k.q5_0;
    case DType::kQ5_1:
      return &k.q5_1;
    case DType::kQ2_K:
      return is_repacked(w) ? &k.q2_k_panel : nullptr;
    case DType::kQ3_K:
      return is_repacked(w) ? &k.q3_k_panel : nullptr;
    case DType::kQ4_K:
      return is_repacked(w) ? &k.q4_k_panel : &k.q4_k;
    case DType::kQ5_K:
      return is_repacked(w) ? &k.q5_k_panel : nullptr;
    case DType::kIQ4_NL:
      return is_repacked(w) ? &k.iq4_nl_panel : nullptr;
    case DType::kMXFP4:
      return is_repacked(w) ? &k.mxfp4_panel : nullptr;
    case DType::kIQ4_XS:
      return is_repacked(w) ? &k.iq4_xs_panel : nullptr;
    case DType::kQ6_K:
      return is_repacked(w) ? &k.q6_k_panel : &k.q6_k;
    default:
      return nullptr;
  }
}

}  // namespace

const MatKernel* fast_kernel(const Kernels* k, const Tensor& w) {
  const MatKernel* mk = k != nullptr ? entry(*k, w) : nullptr;
  return mk != nullptr && *mk ? mk : nullptr;
}

size_t act_bytes(ActFormat act, int64_t k) {
  switch (act) {
    case ActFormat::kF32:
      return 0;
    case ActFormat::kQ8:
      return static_cast<size_t>(k / kQK) * sizeof(BlockQ8);
    case ActFormat::kQ8K:
      return static_cast<size_t>(k / kQKK) * sizeof(block_q8_K);
    case ActFormat::kF32Groups:
      return static_cast<size_t>(k) * sizeof(float);
  }
  return 0;
}

ActFormat act_format_for(DType wt) {
  switch (wt) {
    case DType::kQ2_K:
    case DType::kQ3_K:
    case DType::kQ4_K:
    case DType::kQ5_K:
    case DType::kQ6_K:
    case DType::kIQ4_XS:
      return ActFormat::kQ8K;
    case DType::kF16:
      return ActFormat::kF32Groups;  // repacked F16
    default:
      return ActFormat::kQ8;
  }
}

void set_weight_rows(const Tensor& w, int64_t r0, int64_t i2, int64_t i3, MatArgs& a) {
  if (is_repacked(w)) {
    const PanelLayout l = panel_layout(w);
    a.w = static_cast<const uint8_t*>(w.data) +
          static_cast<size_t>(i2 + i3 * w.ne[2]) * l.matrix_bytes +
          static_cast<size_t>(r0 / kPanelRows) * l.panel_bytes;
    a.w_stride = l.panel_bytes;
  } else {
    a.w = row_ptr(w, r0, i2, i3);
    a.w_stride = w.nb[1];
  }
}

}  // namespace matmul

namespace {

using namespace matmul;

bool supports(const Tensor& node) {
  const Tensor& w = *node.src[0];
  const Tensor& x = *node.src[1];
  const DTypeInfo& wi = dtype_info(w.type);
  return node.type == DType::kF32 && x.type == DType::kF32 && wi.has_dequantize &&
         w.nb[0] == wi.block_bytes && !is_view_of_repacked(w) && x.nb[0] == sizeof(float) &&
         node.nb[0] == sizeof(float) && w.ne[0] == x.ne[0] && x.ne[2] % w.ne[2] == 0 &&
         x.ne[3] % w.ne[3] == 0 && node.ne[0] == w.ne[1] && node.ne[1] == x.ne[1] &&
         node.ne[2] == x.ne[2] && node.ne[3] == x.ne[3];
}

size_t ref_row_scratch(const Tensor& node) {
  return round_up(static_cast<size_t>(node.src[0]->ne[0]) * sizeof(float), kLine);
}

// Converted activations of all columns; GEMV shapes keep one copy per thread.
size_t act_total(const Tensor& x, ActFormat act) {
  return round_up(act_bytes(act, x.ne[0]) * static_cast<size_t>(x.n_rows()), kLine);
}

// Copies of the converted activations: one per slot for GEMV shapes (each
// slot converts its own), one for GEMM (converted in phase 0, shared).
int act_copies(const Tensor& x, int nth) {
  return x.ne[1] <= kGemvCols ? nth : 1;
}

size_t work_size(const Tensor& node, int nth) {
  // Any tier may run the node: room for the ref path or the converted activations.
  const Tensor& x = *node.src[1];
  const ActFormat act = act_format_for(node.src[0]->type);
  const size_t fast = kLine + act_total(x, act) * static_cast<size_t>(act_copies(x, nth));
  return std::max(ref_row_scratch(node) * static_cast<size_t>(nth), fast);
}

void compute_ref(Tensor& node, const OpContext& ctx) {
  const Tensor& w = *node.src[0];
  const Tensor& x = *node.src[1];
  const int64_t k = w.ne[0];
  const int64_t r2 = x.ne[2] / w.ne[2];
  const int64_t r3 = x.ne[3] / w.ne[3];
  float* wrow =
      reinterpret_cast<float*>(ctx.work + ref_row_scratch(node) * static_cast<size_t>(ctx.ith));
  // Work items: (weight row, weight batch) pairs.
  const int64_t items = w.ne[1] * w.ne[2] * w.ne[3];
  const Range r = split_rows(items, ctx.ith, ctx.nth);
  for (int64_t item = r.begin; item < r.end; ++item) {
    const int64_t i = item % w.ne[1];
    const int64_t w2 = (item / w.ne[1]) % w.ne[2];
    const int64_t w3 = item / (w.ne[1] * w.ne[2]);
    read_row_f32(w, i, w2, w3, wrow);
    for (int64_t x3 = w3 * r3; x3 < (w3 + 1) * r3; ++x3) {
      for (int64_t x2 = w2 * r2; x2 < (w2 + 1) * r2; ++x2) {
        for (int64_t j = 0; j < x.ne[1]; ++j) {
          const float* xr = reinterpret_cast<const float*>(row_ptr(x, j, x2, x3));
          float sum = 0.0f;
          for (int64_t kk = 0; kk < k; ++kk) sum += wrow[kk] * xr[kk];
          *reinterpret_cast<float*>(element_ptr(node, i, j, x2, x3)) = sum;
        }
      }
    }
  }
}

// Groups of x's columns (kF32Groups) per batch.
int64_t groups_per_batch(const Tensor& x) {
  return (x.ne[1] + kActGroup - 1) / kActGroup;
}
int64_t conversion_units(const Tensor& x, ActFormat fmt) {
  return fmt == ActFormat::kF32Groups ? groups_per_batch(x) * x.ne[2] * x.ne[3] : x.n_rows();
}

// kF32Groups: groups [r.begin, r.end) of all batches, each written in order.
void group_activations(const Tensor& x, uint8_t* act, Range r) {
  const int64_t k = x.ne[0], per_batch = groups_per_batch(x);
  for (int64_t gi = r.begin; gi < r.end; ++gi) {
    const int64_t b = gi / per_batch, c0 = gi % per_batch * kActGroup;
    const int64_t x2 = b % x.ne[2], x3 = b / x.ne[2];
    const int64_t w = std::min(kActGroup, x.ne[1] - c0);
    const float* src[kActGroup];
    for (int64_t c = 0; c < w; ++c) {
      src[c] = reinterpret_cast<const float*>(row_ptr(x, c0 + c, x2, x3));
    }
    float* dst = reinterpret_cast<float*>(act) + (b * x.ne[1] + c0) * k;
    for (int64_t i = 0; i < k; ++i, dst += w) {
      for (int64_t c = 0; c < w; ++c) dst[c] = src[c][i];
    }
  }
}

// Phase 0: activation rows (j, x2, x3) -> column j + ne1 * (x2 + ne2 * x3) of `act`;
// units [r.begin, r.end) of conversion_units() (rows, or kF32Groups groups).
void convert_activations(const Tensor& x, const Kernels& k, ActFormat fmt, uint8_t* act, Range r) {
  if (fmt == ActFormat::kF32Groups) {
    group_activations(x, act, r);
    return;
  }
  const size_t bytes = act_bytes(fmt, x.ne[0]);
  for (int64_t q = r.begin; q < r.end; ++q) {
    const int64_t j = q % x.ne[1];
    const int64_t x2 = (q / x.ne[1]) % x.ne[2];
    const int64_t x3 = q / (x.ne[1] * x.ne[2]);
    const auto* src = reinterpret_cast<const float*>(row_ptr(x, j, x2, x3));
    uint8_t* dst = act + static_cast<size_t>(q) * bytes;
    if (fmt == ActFormat::kQ8) {
      k.quantize_q8(src, reinterpret_cast<BlockQ8*>(dst), x.ne[0]);
    } else {
      k.quantize_q8_k(src, reinterpret_cast<block_q8_K*>(dst), x.ne[0]);
    }
  }
}

// How phase 2 cuts the output: chunks of `rows` x `cols` per batch, rows
// fastest (a thread's consecutive chunks share activation columns).
struct Chunks {
  int64_t rows, cols, per_row_block, per_batch, total;
  bool dynamic;
};

Chunks plan_chunks(int64_t m, int64_t n, int64_t batches, int nth, const MatKernel& mk) {
  Chunks c{};
  c.dynamic = n > kGemvCols;
  if (!c.dynamic) {  // GEMV: runs of rows (whole panels) taken from the counter
    c.cols = std::max<int64_t>(n, 1);
    const int64_t runs = nth == 1 ? 1 : kGemvRunsPerSlot * nth;
    const int64_t per = std::max((m + runs - 1) / runs, kGemvMinRows);
    c.rows = std::max<int64_t>(kPanelRows, (per + kPanelRows - 1) / kPanelRows * kPanelRows);
  } else {  // GEMM: >= 4 chunks per thread when the shape allows
    c.cols = std::min(n, gemm_cols(mk));
    c.rows = gemm_rows(mk);
    const int64_t col_blocks = (n + c.cols - 1) / c.cols;
    while (c.rows > kPanelRows && batches * col_blocks * ((m + c.rows - 1) / c.rows) < 4 * nth) {
      c.rows /= 2;
    }
  }
  c.per_row_block = (m + c.rows - 1) / c.rows;
  c.per_batch = c.per_row_block * ((n + c.cols - 1) / c.cols);
  c.total = batches * c.per_batch;
  return c;
}

// Output rows [r0, r0 + rows) x columns [c0, c0 + cols) of batch b.
void run_block(Tensor& node, const MatKernel& mk, const uint8_t* act, int64_t b, int64_t r0,
               int64_t rows, int64_t c0, int64_t cols) {
  const Tensor& w = *node.src[0];
  const Tensor& x = *node.src[1];
  const int64_t x2 = b % x.ne[2], x3 = b / x.ne[2];
  const int64_t w2 = x2 / (x.ne[2] / w.ne[2]), w3 = x3 / (x.ne[3] / w.ne[3]);

  MatArgs a;
  a.k = w.ne[0];
  a.rows = std::min(rows, w.ne[1] - r0);
  a.cols = std::min(cols, x.ne[1] - c0);
  set_weight_rows(w, r0, w2, w3, a);
  if (mk.act == ActFormat::kF32) {
    a.x = row_ptr(x, c0, x2, x3);
    a.x_stride = x.nb[1];
  } else {  // (kF32Groups: c0 is a multiple of kActGroup, a group's start)
    const size_t bytes = act_bytes(mk.act, a.k);
    a.x = act + static_cast<size_t>(b * x.ne[1] + c0) * bytes;
    a.x_stride = bytes;
  }
  a.out = reinterpret_cast<float*>(element_ptr(node, r0, c0, x2, x3));
  a.out_stride = node.nb[1];
  mk.run(a);
}

void run_chunk(Tensor& node, const MatKernel& mk, const uint8_t* act, const Chunks& ch,
               int64_t index) {
  const int64_t b = index / ch.per_batch;
  const int64_t rb = index % ch.per_batch % ch.per_row_block;
  const int64_t cb = index % ch.per_batch / ch.per_row_block;
  run_block(node, mk, act, b, rb * ch.rows, ch.rows, cb * ch.cols, ch.cols);
}

// GEMV of one batch: runs of whole kGemvMinRows groups claimed from the
// counter, each 1 / (2 nth) of the groups left (at least one): long runs
// first (a stream the prefetchers have found keeps going), short ones last,
// so the slots end within about one group of each other.
void run_gemv_guided(Tensor& node, const MatKernel& mk, const uint8_t* act, int nth,
                     std::atomic<int64_t>& next) {
  const int64_t m = node.src[0]->ne[1];
  const int64_t groups = (m + kGemvMinRows - 1) / kGemvMinRows;
  int64_t start = next.load(std::memory_order_relaxed);
  while (start < groups) {
    const int64_t take = std::max<int64_t>(1, (groups - start) / (2 * nth));
    if (next.compare_exchange_weak(start, start + take, std::memory_order_relaxed)) {
      run_block(node, mk, act, 0, start * kGemvMinRows, take * kGemvMinRows, 0, node.ne[1]);
      start = next.load(std::memory_order_relaxed);
    }
  }
}

void compute(Tensor& node, const OpContext& ctx) {
  const Tensor& w = *node.src[0];
  const Tensor& x = *node.src[1];
  const MatKernel* mk = fast_kernel(ctx.kernels, w);
  if (mk == nullptr) {
    compute_ref(node, ctx);
    return;
  }
  const Chunks ch = plan_chunks(w.ne[1], x.ne[1], x.ne[2] * x.ne[3], ctx.nth, *mk);
  const bool convert = mk->act != ActFormat::kF32;
  uint8_t* act = ctx.work + kLine;
  if (!ch.dynamic) {
    // GEMV: each slot converts the few columns itself, into its own copy,
    // so slots never wait for each other; then runs of rows from the counter.
    act += act_total(x, mk->act) * static_cast<size_t>(ctx.ith);
    if (convert && !ctx.input_ready) {
      convert_activations(x, *ctx.kernels, mk->act, act, {0, conversion_units(x, mk->act)});
    }
  } else if (convert && ctx.phase == 0) {
    // GEMM: rows converted once, split over the slots (phase 0); then chunks
    // from the counter (the last phase).
    convert_activations(x, *ctx.kernels, mk->act, act,
                        split_rows(conversion_units(x, mk->act), ctx.ith, ctx.nth));
    return;
  }
  std::atomic<int64_t>& next = *ctx.counter;
  if (!ch.dynamic && ch.total == ch.per_row_block && ctx.nth > 1) {  // one batch, one column block
    run_gemv_guided(node, *mk, act, ctx.nth, next);
    return;
  }
  for (int64_t i = next.fetch_add(1, std::memory_order_relaxed); i < ch.total;
       i = next.fetch_add(1, std::memory_order_relaxed)) {
    run_chunk(node, *mk, act, ch, i);
  }
}

int phases(const Tensor& node, int nth, const Kernels* kernels) {
  const MatKernel* mk = fast_kernel(kernels, *node.src[0]);
  if (mk == nullptr || mk->act == ActFormat::kF32) return 1;
  const Tensor& w = *node.src[0];
  const Tensor& x = *node.src[1];
  return plan_chunks(w.ne[1], x.ne[1], x.ne[2] * x.ne[3], nth, *mk).dynamic ? 2 : 1;
}

// x converted into work + kLine, at offsets that depend on x's shape, the
// format and the copies alone (GEMM: one, in phase 0; GEMV: one per slot):
// q / k / v (and gate / up) share it.
ConvertedInput converted_input(const Tensor& node, int nth, const Kernels* kernels) {
  const MatKernel* mk = fast_kernel(kernels, *node.src[0]);
  if (mk == nullptr || mk->act == ActFormat::kF32) return {};
  return {node.src[1], static_cast<int>(mk->act), act_copies(*node.src[1], nth)};
}

}  // namespace

extern const OpImpl kMulMatOp{supports, work_size, compute, phases, converted_input};

}  // namespace tessera::cpu
