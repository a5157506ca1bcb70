// One-input elementwise ops: SCALE, SQR, SQRT, CLAMP and the UNARY functions;
// the gated ones, SWIGLU (silu(gate) * up), GEGLU (gelu(gate) * up) and
// SWIGLU_OAI (gpt-oss's clamped form), live here too. F32, F16 and BF16 in
// any mix and any strides; computed in f32 rows split over the threads.
#include <algorithm>
#include <cmath>

#include "cpu/kernels/kernels.h"
#include "cpu/ops/rows.h"
#include "tessera/core/op_params.h"

namespace tessera::cpu {
namespace {

constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kGeluCoef = 0.044715f;

// GELU's tanh approximation, 0.5 x (1 + tanh(z)) with z = sqrt(2/pi) (x + 0.044715 x^3), as
// ggml defines it, written as x / (1 + exp(-2z)): the same function, without the cancellation
// in 1 + tanh(z) that costs the tanh form most of its digits for x below about -3.
float gelu(float x) {
  return x / (1.0f + std::exp(-2.0f * kSqrt2OverPi * x * (1.0f + kGeluCoef * x * x)));
}
float gelu_quick(float x) {
  return x / (1.0f + std::exp(-1.702f * x));
}
float silu(float x) {
  return x / (1.0f + std::exp(-x));
}
float hardsigmoid(float x) {
  return std::fmin(1.0f, std::fmax(0.0f, (x + 3.0f) / 6.0f));
}

bool float_same_shape(const Tensor& node, const Tensor& a) {
  return writable_rows(node) && is_float_type(a.type) && same_shape(node, a);
}

bool map_supports(const Tensor& node) {
  if (!float_same_shape(node, *node.src[0])) return false;
  if (node.op == Op::kUnary) {
    const auto u = static_cast<int32_t>(UnaryParams::get(node).op);
    return u >= 0 && u < static_cast<int32_t>(UnaryOp::kCount);
  }
  return true;
}

size_t map_work_size(const Tensor& node, int nth) {
  return row_work_size(nth, 2, node.ne[0]);
}

template <class F>
void apply(Tensor& node, const OpContext& ctx, F f) {
  const int64_t n = node.ne[0];
  map_rows(node, ctx, [&](const RowIndex&, const float* x, float* d) {
    for (int64_t k = 0; k < n; ++k) d[k] = f(x[k]);
  });
}

void apply_unary(Tensor& node, const OpContext& ctx) {
  const UnaryParams params = UnaryParams::get(node);
  const float p = params.param;
  switch (params.op) {
    case UnaryOp::kGelu:
      if (ctx.kernels != nullptr && ctx.kernels->gelu != nullptr) {  // a SIMD tier (kernels.h)
        const int64_t n = node.ne[0];
        map_rows(node, ctx, [&](const RowIndex&, const float* x, float* d) { ctx.kernels->gelu(x, d, n); });
      } else {
        apply(node, ctx, gelu);
      }
      break;
    case UnaryOp::kGeluQuick:
      apply(node, ctx, gelu_quick);
      break;
    case UnaryOp::kSilu:
      apply(node, ctx, silu);
      break;
    case UnaryOp::kRelu:
      apply(node, ctx, [](float x) { return x > 0.0f ? x : 0.0f; });
      break;
    case UnaryOp::kLeakyRelu:
      apply(node, ctx, [p](float x) { return x > 0.0f ? x : p * x; });
      break;
    case UnaryOp::kHardSigmoid:
      apply(node, ctx, hardsigmoid);
      break;
    case UnaryOp::kHardSwish:
      apply(node, ctx, [](float x) { return x * hardsigmoid(x); });
      break;
    case UnaryOp::kTanh:
      apply(node, ctx, [](float x) { return std::tanh(x); });
      break;
    case UnaryOp::kSigmoid:
      apply(node, ctx, [](float x) { return 1.0f / (1.0f + std::exp(-x)); });
      break;
    case UnaryOp::kCount:
      break;
  }
}

void map_compute(Tensor& node, const OpContext& ctx) {
  switch (node.op) {
    case Op::kScale: {
      const ScaleParams p = ScaleParams::get(node);
      const float s = p.s, b = p.bias;
      apply(node, ctx, [s, b](float x) { return s * x + b; });
      break;
    }
    case Op::kSqr:
      apply(node, ctx, [](float x) { return x * x; });
      break;
    case Op::kSqrt:
      apply(node, ctx, [](float x) { return std::sqrt(x); });
      break;
    case Op::kClamp: {
      const ClampParams p = ClampParams::get(node);
      const float lo = p.min, hi = p.max;
      apply(node, ctx, [lo, hi](float x) { return x < lo ? lo : (x > hi ? hi : x); });
      break;
    }
    case Op::kUnary:
      apply_unary(node, ctx);
      break;
    default:
      break;
  }
}

bool glu_supports(const Tensor& node) {
  return float_same_shape(node, *node.src[0]) && float_same_shape(node, *node.src[1]);
}

size_t glu_work_size(const Tensor& node, int nth) {
  return row_work_size(nth, 3, node.ne[0]);
}

// A gated op row by row: combine(gate row, up row, out row, n).
template <class Combine>
void glu_rows(Tensor& node, const OpContext& ctx, Combine combine) {
  const Tensor& gate = *node.src[0];
  const Tensor& up = *node.src[1];
  const int64_t n = node.ne[0];
  float* sg = thread_row(ctx, 3, 0, n);
  float* su = thread_row(ctx, 3, 1, n);
  float* sd = thread_row(ctx, 3, 2, n);
  const Range r = split_rows(node.n_rows(), ctx.ith, ctx.nth);
  for (int64_t row = r.begin; row < r.end; ++row) {
    const RowIndex i = row_index(node, row);
    float* d = row_out(node, i, sd);
    combine(read_row(gate, i, sg), read_row(up, i, su), d, n);
    write_row(node, i, d);
  }
}

// act(gate) * up.
template <float (*act)(float)>
void glu_compute(Tensor& node, const OpContext& ctx) {
  glu_rows(node, ctx, [&ctx](const float* g, const float* u, float* d, int64_t n) {
    if (act == silu && ctx.kernels != nullptr && ctx.kernels->silu_mul != nullptr) {
      ctx.kernels->silu_mul(g, u, d, n);  // a SIMD tier (kernels.h)
    } else {
      for (int64_t k = 0; k < n; ++k) d[k] = act(g[k]) * u[k];
    }
  });
}

// gpt-oss's clamped SwiGLU: x = min(gate, limit), y = clamp(up, -limit, limit),
// x * sigmoid(alpha x) * (y + 1), as ggml's swiglu_oai computes it.
void swiglu_oai_compute(Tensor& node, const OpContext& ctx) {
  const SwigluOaiParams p = SwigluOaiParams::get(node);
  glu_rows(node, ctx, [p](const float* g, const float* u, float* d, int64_t n) {
    for (int64_t k = 0; k < n; ++k) {
      const float x = std::min(g[k], p.limit);
      const float y = std::clamp(u[k], -p.limit, p.limit);
      d[k] = x / (1.0f + std::exp(p.alpha * -x)) * (y + 1.0f);
    }
  });
}

}  // namespace

extern const OpImpl kMapOp{map_supports, map_work_size, map_compute};
extern const OpImpl kSwigluOaiOp{glu_supports, glu_work_size, swiglu_oai_compute};
extern const OpImpl kSwigluOp{glu_supports, glu_work_size, glu_compute<silu>};
extern const OpImpl kGegluOp{glu_supports, glu_work_size, glu_compute<gelu>};

}  // namespace tessera::cpu
