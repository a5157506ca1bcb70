// CPY, DUP, CONT: copy a tensor into another layout or type. Elements pair up
// in row-major order of each tensor's own shape (ggml's rule: shapes may
// differ when element counts match). Supported:
//   F32/F16/BF16 -> F32/F16/BF16, any strides;
//   a plain type -> the same type, any strides (raw element copies);
//   F32/F16/BF16 -> a type with a quantizer (Q8_0, Q4_0, ...), destination
//     blocks contiguous within each row, source any strides;
//   a type with a dequantizer (blocks contiguous) -> F32/F16/BF16;
//   a quantized type -> the same type with equal row length (raw rows).
#include <algorithm>
#include <cstring>

#include "cpu/ops/rows.h"

namespace tessera::cpu {
namespace {

enum class Kind { kNone, kFloatRows, kFlat, kQuantize, kDequantize, kRawRows };

bool blocks_contiguous(const Tensor& t) {
  return t.nb[0] == dtype_info(t.type).block_bytes;
}

Kind kind_of(const Tensor& node) {
  const Tensor& a = *node.src[0];
  if (a.n_elements() != node.n_elements()) return Kind::kNone;
  const DTypeInfo& in = dtype_info(a.type);
  const DTypeInfo& out = dtype_info(node.type);
  const bool float_in = is_float_type(a.type), float_out = is_float_type(node.type);
  if (float_in && float_out) return same_shape(a, node) ? Kind::kFloatRows : Kind::kFlat;
  if (a.type == node.type && in.block_size == 1) return Kind::kFlat;
  if (float_in && out.quantized && out.has_quantize && blocks_contiguous(node)) {
    return Kind::kQuantize;
  }
  if (in.quantized && in.has_dequantize && blocks_contiguous(a) && float_out) {
    return Kind::kDequantize;
  }
  if (a.type == node.type && in.quantized && a.ne[0] == node.ne[0] && blocks_contiguous(a) &&
      blocks_contiguous(node)) {
    return Kind::kRawRows;
  }
  return Kind::kNone;
}

bool supports(const Tensor& node) {
  return kind_of(node) != Kind::kNone;
}

size_t work_size(const Tensor& node, int nth) {
  return row_work_size(nth, 1, std::max(node.ne[0], node.src[0]->ne[0]));
}

// Float rows of equal shape: one conversion per row.
void copy_float_rows(Tensor& node, const Tensor& a, const OpContext& ctx) {
  float* scratch = thread_row(ctx, 1, 0, node.ne[0]);
  const Range r = split_rows(node.n_rows(), ctx.ith, ctx.nth);
  for (int64_t row = r.begin; row < r.end; ++row) {
    const RowIndex i = row_index(node, row);
    write_row(node, i, read_row(a, i, scratch));
  }
}

// Element by element in flat order: raw bytes for one type, else via float.
void copy_flat(Tensor& node, const Tensor& a, const OpContext& ctx) {
  const size_t width = dtype_info(a.type).block_bytes;
  const bool raw = a.type == node.type;
  const Range r = split_rows(node.n_elements(), ctx.ith, ctx.nth);
  for (int64_t i = r.begin; i < r.end; ++i) {
    const uint8_t* s = flat_element(a, i);
    uint8_t* d = flat_element(node, i);
    if (raw) {
      std::memcpy(d, s, width);
    } else {
      store_float(node.type, d, load_float(a.type, s));
    }
  }
}

// Destination row `row` (flat row order) gathered from the source as floats.
const float* gather_row(const Tensor& a, int64_t row, int64_t n, float* scratch) {
  if (a.ne[0] == n) return read_row(a, row_index(a, row), scratch);
  for (int64_t k = 0; k < n; ++k) scratch[k] = load_float(a.type, flat_element(a, row * n + k));
  return scratch;
}

void quantize(Tensor& node, const Tensor& a, const OpContext& ctx) {
  const int64_t n = node.ne[0];
  float* scratch = thread_row(ctx, 1, 0, std::max(n, a.ne[0]));
  const Range r = split_rows(node.n_rows(), ctx.ith, ctx.nth);
  for (int64_t row = r.begin; row < r.end; ++row) {
    const RowIndex i = row_index(node, row);
    quantize_row(node.type, gather_row(a, row, n, scratch), row_ptr(node, i.i1, i.i2, i.i3), n);
  }
}

// Source rows dequantized, then scattered to the destination's flat order.
void dequantize(Tensor& node, const Tensor& a, const OpContext& ctx) {
  const int64_t n = a.ne[0];
  float* scratch = thread_row(ctx, 1, 0, std::max(n, node.ne[0]));
  const Range r = split_rows(a.n_rows(), ctx.ith, ctx.nth);
  for (int64_t row = r.begin; row < r.end; ++row) {
    const float* x = read_row(a, row_index(a, row), scratch);
    if (node.ne[0] == n) {
      write_row(node, row_index(node, row), x);
    } else {
      for (int64_t k = 0; k < n; ++k) store_float(node.type, flat_element(node, row * n + k), x[k]);
    }
  }
}

void copy_raw_rows(Tensor& node, const Tensor& a, const OpContext& ctx) {
  const size_t bytes = node.row_size();
  const Range r = split_rows(node.n_rows(), ctx.ith, ctx.nth);
  for (int64_t row = r.begin; row < r.end; ++row) {
    const RowIndex s = row_index(a, row), d = row_index(node, row);
    std::memcpy(row_ptr(node, d.i1, d.i2, d.i3), row_ptr(a, s.i1, s.i2, s.i3), bytes);
  }
}

void compute(Tensor& node, const OpContext& ctx) {
  const Tensor& a = *node.src[0];
  switch (kind_of(node)) {
    case Kind::kFloatRows:
      copy_float_rows(node, a, ctx);
      break;
    case Kind::kFlat:
      copy_flat(node, a, ctx);
      break;
    case Kind::kQuantize:
      quantize(node, a, ctx);
      break;
    case Kind::kDequantize:
      dequantize(node, a, ctx);
      break;
    case Kind::kRawRows:
      copy_raw_rows(node, a, ctx);
      break;
    case Kind::kNone:
      break;
  }
}

}  // namespace

extern const OpImpl kCopyOp{supports, work_size, compute};

}  // namespace tessera::cpu
