// ADD, SUB, MUL, DIV on f32 with b broadcast over a (each of a's dims a
// multiple of b's). Rows of a are split over the threads.
#include "backends/cpu/ops/op.h"

namespace tessera::cpu {
namespace {

bool supports(const Tensor& node) {
  const Tensor& a = *node.src[0];
  const Tensor& b = *node.src[1];
  return node.type == DType::kF32 && a.type == DType::kF32 && b.type == DType::kF32 &&
         can_repeat(b, a) && same_shape(node, a);
}

template <class F>
void apply(Tensor& node, const OpContext& ctx, F f) {
  const Tensor& a = *node.src[0];
  const Tensor& b = *node.src[1];
  const Range r = split_rows(node.n_rows(), ctx.ith, ctx.nth);
  for (int64_t row = r.begin; row < r.end; ++row) {
    const int64_t i1 = row % node.ne[1];
    const int64_t i2 = (row / node.ne[1]) % node.ne[2];
    const int64_t i3 = row / (node.ne[1] * node.ne[2]);
    const uint8_t* pa = row_ptr(a, i1, i2, i3);
    const uint8_t* pb = row_ptr(b, i1 % b.ne[1], i2 % b.ne[2], i3 % b.ne[3]);
    uint8_t* pd = row_ptr(node, i1, i2, i3);
    for (int64_t i0 = 0; i0 < node.ne[0]; ++i0) {
      const float x = *reinterpret_cast<const float*>(pa + i0 * static_cast<int64_t>(a.nb[0]));
      const float y = *reinterpret_cast<const float*>(
          pb + (i0 % b.ne[0]) * static_cast<int64_t>(b.nb[0]));
      *reinterpret_cast<float*>(pd + i0 * static_cast<int64_t>(node.nb[0])) = f(x, y);
    }
  }
}

void compute(Tensor& node, const OpContext& ctx) {
  switch (node.op) {
    case Op::kAdd: apply(node, ctx, [](float x, float y) { return x + y; }); break;
    case Op::kSub: apply(node, ctx, [](float x, float y) { return x - y; }); break;
    case Op::kMul: apply(node, ctx, [](float x, float y) { return x * y; }); break;
    case Op::kDiv: apply(node, ctx, [](float x, float y) { return x / y; }); break;
    default: break;
  }
}

}  // namespace

extern const OpImpl kBinaryOp{supports, nullptr, compute};

}  // namespace tessera::cpu
