// ADD, SUB, MUL, DIV with b broadcast over a (each of a's dims a multiple of
// b's). F32, F16 and BF16 in any mix and any strides; computed in f32 rows.
// Rows of a are split over the threads.
#include "cpu/ops/rows.h"

namespace tessera::cpu {
namespace {

bool supports(const Tensor& node) {
  const Tensor& a = *node.src[0];
  const Tensor& b = *node.src[1];
  return writable_rows(node) && is_float_type(a.type) && is_float_type(b.type) &&
         can_repeat(b, a) && same_shape(node, a);
}

size_t work_size(const Tensor& node, int nth) {
  return row_work_size(nth, 3, node.ne[0]);
}

template <class F>
void apply(Tensor& node, const OpContext& ctx, F f) {
  const Tensor& a = *node.src[0];
  const Tensor& b = *node.src[1];
  const int64_t n = node.ne[0];
  const int64_t nb0 = b.ne[0];
  float* sa = thread_row(ctx, 3, 0, n);
  float* sb = thread_row(ctx, 3, 1, n);
  float* sd = thread_row(ctx, 3, 2, n);
  const Range r = split_rows(node.n_rows(), ctx.ith, ctx.nth);
  for (int64_t row = r.begin; row < r.end; ++row) {
    const RowIndex i = row_index(node, row);
    const float* x = read_row(a, i, sa);
    const float* y = read_row(b, i.i1 % b.ne[1], i.i2 % b.ne[2], i.i3 % b.ne[3], sb);
    float* d = row_out(node, i, sd);
    // b's row repeated n / nb0 times; no division per element (a MoE's
    // expert outputs times their weights, nb0 1, spent ~24 us a call in it).
    if (nb0 == n) {
      for (int64_t k = 0; k < n; ++k) d[k] = f(x[k], y[k]);
    } else if (nb0 == 1) {
      const float y0 = y[0];
      for (int64_t k = 0; k < n; ++k) d[k] = f(x[k], y0);
    } else {
      for (int64_t k0 = 0; k0 < n; k0 += nb0) {
        for (int64_t k = 0; k < nb0; ++k) d[k0 + k] = f(x[k0 + k], y[k]);
      }
    }
    write_row(node, i, d);
  }
}

void compute(Tensor& node, const OpContext& ctx) {
  switch (node.op) {
    case Op::kAdd:
      apply(node, ctx, [](float x, float y) { return x + y; });
      break;
    case Op::kSub:
      apply(node, ctx, [](float x, float y) { return x - y; });
      break;
    case Op::kMul:
      apply(node, ctx, [](float x, float y) { return x * y; });
      break;
    case Op::kDiv:
      apply(node, ctx, [](float x, float y) { return x / y; });
      break;
    default:
      break;
  }
}

}  // namespace

extern const OpImpl kBinaryOp{supports, work_size, compute};

}  // namespace tessera::cpu
