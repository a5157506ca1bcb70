// CPY, DUP, CONT: copy a tensor element by element into another layout or
// type. Float types convert any to any; a contiguous f32 source can also be
// quantized into rows of a quantized destination.
#include <cstring>
#include <vector>

#include "backends/cpu/ops/op.h"
#include "tessera/error.h"

namespace tessera::cpu {
namespace {

const Tensor& source(const Tensor& node) { return *node.src[0]; }

bool supports(const Tensor& node) {
  const Tensor& a = source(node);
  if (a.n_elements() != node.n_elements()) return false;
  if (is_float_type(a.type) && is_float_type(node.type)) return true;
  // Same type, any layout: copied as raw elements (plain types only).
  if (a.type == node.type && !dtype_info(a.type).quantized) return true;
  // Quantizing copy: f32 rows into whole blocks of a contiguous destination.
  const DTypeInfo& info = dtype_info(node.type);
  return a.type == DType::kF32 && info.quantized && info.has_quantize && a.is_contiguous() &&
         node.is_contiguous() && a.ne[0] == node.ne[0];
}

// Element `flat` (in row-major order of `t`'s shape) as a pointer.
const uint8_t* nth_element(const Tensor& t, int64_t flat) {
  const int64_t i0 = flat % t.ne[0];
  const int64_t i1 = (flat / t.ne[0]) % t.ne[1];
  const int64_t i2 = (flat / (t.ne[0] * t.ne[1])) % t.ne[2];
  const int64_t i3 = flat / (t.ne[0] * t.ne[1] * t.ne[2]);
  return element_ptr(t, i0, i1, i2, i3);
}

void compute(Tensor& node, const OpContext& ctx) {
  const Tensor& a = source(node);
  const DTypeInfo& out = dtype_info(node.type);
  if (out.quantized) {
    const Range r = split_rows(node.n_rows(), ctx.ith, ctx.nth);
    const size_t row = node.row_size();
    const float* src = static_cast<const float*>(a.data);
    for (int64_t i = r.begin; i < r.end; ++i) {
      quantize_row(node.type, src + i * a.ne[0], static_cast<uint8_t*>(node.data) + i * row,
                   node.ne[0]);
    }
    return;
  }
  // Elements in row-major order of each tensor's own shape (ggml's semantics:
  // shapes may differ when element counts match).
  const Range r = split_rows(node.n_elements(), ctx.ith, ctx.nth);
  const size_t width = dtype_info(a.type).block_bytes;
  for (int64_t i = r.begin; i < r.end; ++i) {
    const uint8_t* s = nth_element(a, i);
    uint8_t* d = const_cast<uint8_t*>(nth_element(node, i));
    if (a.type == node.type) {
      std::memcpy(d, s, width);
    } else {
      store_float(node.type, d, load_float(a.type, s));
    }
  }
}

}  // namespace

extern const OpImpl kCopyOp{supports, nullptr, compute};

}  // namespace tessera::cpu
