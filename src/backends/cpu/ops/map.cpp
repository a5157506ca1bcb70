// One-input elementwise ops on f32: SCALE, SQR, SQRT, CLAMP and the UNARY
// functions; SWIGLU (silu(gate) * up) lives here too.
#include <cmath>

#include "backends/cpu/ops/op.h"

namespace tessera::cpu {
namespace {

constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kGeluCoef = 0.044715f;

float gelu(float x) {  // the tanh approximation, as ggml computes GELU
  return 0.5f * x * (1.0f + std::tanh(kSqrt2OverPi * x * (1.0f + kGeluCoef * x * x)));
}
float gelu_quick(float x) { return x / (1.0f + std::exp(-1.702f * x)); }
float silu(float x) { return x / (1.0f + std::exp(-x)); }
float hardsigmoid(float x) { return std::fmin(1.0f, std::fmax(0.0f, (x + 3.0f) / 6.0f)); }

bool f32_same_shape(const Tensor& node) {
  const Tensor& a = *node.src[0];
  return node.type == DType::kF32 && a.type == DType::kF32 && same_shape(node, a);
}

bool map_supports(const Tensor& node) {
  if (!f32_same_shape(node)) return false;
  if (node.op == Op::kUnary) {
    const int32_t u = node.param_i32(0);
    return u >= 0 && u < static_cast<int32_t>(UnaryOp::kCount);
  }
  return true;
}

template <class F>
void apply(Tensor& node, const OpContext& ctx, F f) {
  const Tensor& a = *node.src[0];
  const Range r = split_rows(node.n_rows(), ctx.ith, ctx.nth);
  for (int64_t row = r.begin; row < r.end; ++row) {
    const int64_t i1 = row % node.ne[1];
    const int64_t i2 = (row / node.ne[1]) % node.ne[2];
    const int64_t i3 = row / (node.ne[1] * node.ne[2]);
    const uint8_t* pa = row_ptr(a, i1, i2, i3);
    uint8_t* pd = row_ptr(node, i1, i2, i3);
    for (int64_t i0 = 0; i0 < node.ne[0]; ++i0) {
      const float x = *reinterpret_cast<const float*>(pa + i0 * static_cast<int64_t>(a.nb[0]));
      *reinterpret_cast<float*>(pd + i0 * static_cast<int64_t>(node.nb[0])) = f(x);
    }
  }
}

void apply_unary(Tensor& node, const OpContext& ctx) {
  const float p = node.param_f32(1);
  switch (static_cast<UnaryOp>(node.param_i32(0))) {
    case UnaryOp::kGelu: apply(node, ctx, gelu); break;
    case UnaryOp::kGeluQuick: apply(node, ctx, gelu_quick); break;
    case UnaryOp::kSilu: apply(node, ctx, silu); break;
    case UnaryOp::kRelu: apply(node, ctx, [](float x) { return x > 0.0f ? x : 0.0f; }); break;
    case UnaryOp::kLeakyRelu:
      apply(node, ctx, [p](float x) { return x > 0.0f ? x : p * x; });
      break;
    case UnaryOp::kHardSigmoid: apply(node, ctx, hardsigmoid); break;
    case UnaryOp::kHardSwish: apply(node, ctx, [](float x) { return x * hardsigmoid(x); }); break;
    case UnaryOp::kTanh: apply(node, ctx, [](float x) { return std::tanh(x); }); break;
    case UnaryOp::kCount: break;
  }
}

void map_compute(Tensor& node, const OpContext& ctx) {
  switch (node.op) {
    case Op::kScale: {
      const float s = node.param_f32(0), b = node.param_f32(1);
      apply(node, ctx, [s, b](float x) { return s * x + b; });
      break;
    }
    case Op::kSqr: apply(node, ctx, [](float x) { return x * x; }); break;
    case Op::kSqrt: apply(node, ctx, [](float x) { return std::sqrt(x); }); break;
    case Op::kClamp: {
      const float lo = node.param_f32(0), hi = node.param_f32(1);
      apply(node, ctx, [lo, hi](float x) { return x < lo ? lo : (x > hi ? hi : x); });
      break;
    }
    case Op::kUnary: apply_unary(node, ctx); break;
    default: break;
  }
}

bool swiglu_supports(const Tensor& node) {
  return f32_same_shape(node) && node.src[1]->type == DType::kF32 &&
         same_shape(node, *node.src[1]);
}

void swiglu_compute(Tensor& node, const OpContext& ctx) {
  const Tensor& gate = *node.src[0];
  const Tensor& up = *node.src[1];
  const Range r = split_rows(node.n_rows(), ctx.ith, ctx.nth);
  for (int64_t row = r.begin; row < r.end; ++row) {
    const int64_t i1 = row % node.ne[1];
    const int64_t i2 = (row / node.ne[1]) % node.ne[2];
    const int64_t i3 = row / (node.ne[1] * node.ne[2]);
    const uint8_t* pg = row_ptr(gate, i1, i2, i3);
    const uint8_t* pu = row_ptr(up, i1, i2, i3);
    uint8_t* pd = row_ptr(node, i1, i2, i3);
    for (int64_t i0 = 0; i0 < node.ne[0]; ++i0) {
      const float g = *reinterpret_cast<const float*>(pg + i0 * static_cast<int64_t>(gate.nb[0]));
      const float u = *reinterpret_cast<const float*>(pu + i0 * static_cast<int64_t>(up.nb[0]));
      *reinterpret_cast<float*>(pd + i0 * static_cast<int64_t>(node.nb[0])) = silu(g) * u;
    }
  }
}

}  // namespace

extern const OpImpl kMapOp{map_supports, nullptr, map_compute};
extern const OpImpl kSwigluOp{swiglu_supports, nullptr, swiglu_compute};

}  // namespace tessera::cpu
