// NORM and RMS_NORM over each row, GROUP_NORM over groups of channels (dim 2)
// of each sample (dim 3). F32, F16 and BF16 in any strides; statistics are
// accumulated in double.
#include <algorithm>
#include <cmath>

#include "cpu/kernels/kernels.h"
#include "cpu/ops/rows.h"
#include "tessera/core/op_params.h"

namespace tessera::cpu {
namespace {

bool supports(const Tensor& node) {
  const Tensor& a = *node.src[0];
  if (!(writable_rows(node) && is_float_type(a.type) && same_shape(node, a))) return false;
  return node.op != Op::kGroupNorm || GroupNormParams::get(node).n_groups >= 1;
}

size_t work_size(const Tensor& node, int nth) {
  return row_work_size(nth, 2, node.ne[0]);
}

void norm_rows(Tensor& node, const OpContext& ctx) {
  const Tensor& a = *node.src[0];
  const float eps = NormParams::get(node).eps;
  const int64_t n = node.ne[0];
  float* sa = thread_row(ctx, 2, 0, n);
  float* sd = thread_row(ctx, 2, 1, n);
  const Range r = split_rows(node.n_rows(), ctx.ith, ctx.nth);
  const auto fast = node.op == Op::kRmsNorm && ctx.kernels ? ctx.kernels->rms_norm : nullptr;
  for (int64_t row = r.begin; row < r.end; ++row) {
    const RowIndex i = row_index(node, row);
    const float* x = read_row(a, i, sa);
    if (fast) {  // a SIMD tier: f32 vector sums (kernels.h)
      float* y = row_out(node, i, sd);
      fast(x, y, n, eps);
      write_row(node, i, y);
      continue;
    }
    double mean = 0.0;
    if (node.op == Op::kNorm) {
      for (int64_t k = 0; k < n; ++k) mean += x[k];
      mean /= static_cast<double>(n);
    }
    double sum_sq = 0.0;
    for (int64_t k = 0; k < n; ++k) {
      const double d = x[k] - mean;
      sum_sq += d * d;
    }
    const float inv = static_cast<float>(1.0 / std::sqrt(sum_sq / static_cast<double>(n) + eps));
    float* y = row_out(node, i, sd);
    for (int64_t k = 0; k < n; ++k) y[k] = static_cast<float>(x[k] - mean) * inv;
    write_row(node, i, y);
  }
}

// Work items: (group, sample) pairs; channels per group = ceil(C / n_groups).
void group_norm(Tensor& node, const OpContext& ctx) {
  const Tensor& a = *node.src[0];
  const GroupNormParams p = GroupNormParams::get(node);
  const int64_t n_groups = p.n_groups;
  const float eps = p.eps;
  const int64_t n = node.ne[0];
  const int64_t per_group = (node.ne[2] + n_groups - 1) / n_groups;
  float* sa = thread_row(ctx, 2, 0, n);
  float* sd = thread_row(ctx, 2, 1, n);
  const Range r = split_rows(n_groups * node.ne[3], ctx.ith, ctx.nth);
  for (int64_t item = r.begin; item < r.end; ++item) {
    const int64_t group = item % n_groups;
    const int64_t i3 = item / n_groups;
    const int64_t c0 = group * per_group;
    const int64_t c1 = std::min(c0 + per_group, node.ne[2]);
    if (c0 >= c1) continue;
    // Visits every row of the group: f(row values, output row index).
    auto each_row = [&](auto f) {
      for (int64_t c = c0; c < c1; ++c) {
        for (int64_t i1 = 0; i1 < node.ne[1]; ++i1)
          f(read_row(a, i1, c, i3, sa), RowIndex{i1, c, i3});
      }
    };
    const double count = static_cast<double>(n * node.ne[1] * (c1 - c0));
    double sum = 0.0;
    each_row([&](const float* x, RowIndex) {
      for (int64_t k = 0; k < n; ++k) sum += x[k];
    });
    const double mean = sum / count;
    double sum_sq = 0.0;
    each_row([&](const float* x, RowIndex) {
      for (int64_t k = 0; k < n; ++k) sum_sq += (x[k] - mean) * (x[k] - mean);
    });
    const float inv = static_cast<float>(1.0 / std::sqrt(sum_sq / count + eps));
    each_row([&](const float* x, RowIndex i) {
      float* y = row_out(node, i, sd);
      for (int64_t k = 0; k < n; ++k) y[k] = static_cast<float>(x[k] - mean) * inv;
      write_row(node, i, y);
    });
  }
}

void compute(Tensor& node, const OpContext& ctx) {
  if (node.op == Op::kGroupNorm) {
    group_norm(node, ctx);
  } else {
    norm_rows(node, ctx);
  }
}

}  // namespace

extern const OpImpl kNormOp{supports, work_size, compute};

}  // namespace tessera::cpu
