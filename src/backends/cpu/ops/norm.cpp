// NORM and RMS_NORM over each row of an f32 tensor, accumulated in double.
#include <cmath>

#include "backends/cpu/ops/op.h"

namespace tessera::cpu {
namespace {

bool supports(const Tensor& node) {
  const Tensor& a = *node.src[0];
  return node.type == DType::kF32 && a.type == DType::kF32 && same_shape(node, a) &&
         a.nb[0] == sizeof(float) && node.nb[0] == sizeof(float);
}

void compute(Tensor& node, const OpContext& ctx) {
  const Tensor& a = *node.src[0];
  const float eps = node.param_f32(0);
  const int64_t n = node.ne[0];
  const Range r = split_rows(node.n_rows(), ctx.ith, ctx.nth);
  for (int64_t row = r.begin; row < r.end; ++row) {
    const int64_t i1 = row % node.ne[1];
    const int64_t i2 = (row / node.ne[1]) % node.ne[2];
    const int64_t i3 = row / (node.ne[1] * node.ne[2]);
    const float* x = reinterpret_cast<const float*>(row_ptr(a, i1, i2, i3));
    float* y = reinterpret_cast<float*>(row_ptr(node, i1, i2, i3));
    double mean = 0.0;
    if (node.op == Op::kNorm) {
      for (int64_t i = 0; i < n; ++i) mean += x[i];
      mean /= static_cast<double>(n);
    }
    double sum_sq = 0.0;
    for (int64_t i = 0; i < n; ++i) {
      const double d = x[i] - mean;
      sum_sq += d * d;
    }
    const float inv = static_cast<float>(1.0 / std::sqrt(sum_sq / static_cast<double>(n) + eps));
    for (int64_t i = 0; i < n; ++i) y[i] = static_cast<float>(x[i] - mean) * inv;
  }
}

}  // namespace

extern const OpImpl kNormOp{supports, nullptr, compute};

}  // namespace tessera::cpu
