// SOFT_MAX (scale, optional f32/f16 mask broadcast over dims 2 and 3, ALiBi
// slope per head = dim 2) and DIAG_MASK_INF, per row. F32/F16/BF16 in any
// strides; the softmax sum is accumulated in double.
#include <cmath>
#include <limits>

#include "cpu/kernels/kernels.h"
#include "cpu/ops/attention.h"
#include "cpu/ops/rows.h"
#include "tessera/core/op_params.h"

namespace tessera::cpu {
namespace {

bool softmax_supports(const Tensor& node) {
  const Tensor& a = *node.src[0];
  if (!(writable_rows(node) && is_float_type(a.type) && same_shape(node, a))) return false;
  const Tensor* mask = node.src[1];
  if (mask == nullptr) return true;
  return is_float_type(mask->type) && mask->ne[0] == a.ne[0] && mask->ne[1] >= a.ne[1] &&
         mask->ne[2] >= 1 && mask->ne[3] >= 1 && a.ne[2] % mask->ne[2] == 0 &&
         a.ne[3] % mask->ne[3] == 0;
}

size_t softmax_work_size(const Tensor& node, int nth) {
  return row_work_size(nth, 4, node.ne[0]);
}

void softmax_compute(Tensor& node, const OpContext& ctx) {
  const Tensor& a = *node.src[0];
  const Tensor* mask = node.src[1];
  const SoftMaxParams p = SoftMaxParams::get(node);
  const float scale = p.scale;
  const float max_bias = p.max_bias;
  const int64_t n = node.ne[0];
  float* sa = thread_row(ctx, 4, 0, n);
  float* sm = thread_row(ctx, 4, 1, n);
  float* w = thread_row(ctx, 4, 2, n);
  float* sd = thread_row(ctx, 4, 3, n);
  const Range r = split_rows(node.n_rows(), ctx.ith, ctx.nth);
  for (int64_t row = r.begin; row < r.end; ++row) {
    const RowIndex i = row_index(node, row);
    const float* x = read_row(a, i, sa);
    const float slope = alibi_slope(max_bias, i.i2, a.ne[2]);
    const float* m =
        mask ? read_row(*mask, i.i1, i.i2 % mask->ne[2], i.i3 % mask->ne[3], sm) : nullptr;
    float max = -std::numeric_limits<float>::infinity();
    for (int64_t k = 0; k < n; ++k) {
      w[k] = x[k] * scale + (m ? slope * m[k] : 0.0f);
      max = std::fmax(max, w[k]);
    }
    float* d = row_out(node, i, sd);
    double sum = 0.0;
    if (ctx.kernels && ctx.kernels->exp_sum) {  // a SIMD tier (kernels.h)
      sum = ctx.kernels->exp_sum(w, d, n, max);
    } else {
      for (int64_t k = 0; k < n; ++k) {
        d[k] = std::exp(w[k] - max);
        sum += d[k];
      }
    }
    const auto inv = static_cast<float>(1.0 / sum);
    for (int64_t k = 0; k < n; ++k) d[k] *= inv;
    write_row(node, i, d);
  }
}

bool diag_supports(const Tensor& node) {
  const Tensor& a = *node.src[0];
  return writable_rows(node) && is_float_type(a.type) && same_shape(node, a);
}

size_t diag_work_size(const Tensor& node, int nth) {
  return row_work_size(nth, 2, node.ne[0]);
}

void diag_compute(Tensor& node, const OpContext& ctx) {
  const int64_t n_past = DiagMaskInfParams::get(node).n_past;
  const int64_t n = node.ne[0];
  map_rows(node, ctx, [&](const RowIndex& i, const float* x, float* d) {
    for (int64_t k = 0; k < n; ++k) {
      d[k] = k > n_past + i.i1 ? -std::numeric_limits<float>::infinity() : x[k];
    }
  });
}

}  // namespace

extern const OpImpl kSoftMaxOp{softmax_supports, softmax_work_size, softmax_compute};
extern const OpImpl kDiagMaskInfOp{diag_supports, diag_work_size, diag_compute};

}  // namespace tessera::cpu
