// Ops that generate values: ARANGE (start + i * step) and TIMESTEP_EMBEDDING
// (cos then sin of t * max_period^(-j / half), as ggml computes them in f32).
#include <cmath>

#include "cpu/ops/rows.h"
#include "tessera/core/op_params.h"

namespace tessera::cpu {
namespace {

bool arange_supports(const Tensor& node) {
  const ArangeParams p = ArangeParams::get(node);
  if (!is_float_type(node.type) || p.step == 0.0f) return false;
  const float steps = std::ceil((p.stop - p.start) / p.step);
  return steps >= 1.0f && node.ne[0] == static_cast<int64_t>(steps) && node.ne[1] == 1 &&
         node.ne[2] == 1 && node.ne[3] == 1;
}

void arange_compute(Tensor& node, const OpContext& ctx) {
  const ArangeParams p = ArangeParams::get(node);
  const float start = p.start, step = p.step;
  const Range r = split_rows(node.ne[0], ctx.ith, ctx.nth);
  for (int64_t i = r.begin; i < r.end; ++i) {
    store_float(node.type, element_ptr(node, i, 0, 0, 0), start + step * static_cast<float>(i));
  }
}

bool timestep_supports(const Tensor& node) {
  const Tensor& t = *node.src[0];
  const TimestepEmbeddingParams p = TimestepEmbeddingParams::get(node);
  const int32_t dim = p.dim, max_period = p.max_period;
  return writable_rows(node) && is_float_type(t.type) && dim >= 1 && max_period >= 1 &&
         t.ne[1] == 1 && t.ne[2] == 1 && t.ne[3] == 1 && node.ne[0] == dim + dim % 2 &&
         node.ne[1] == t.ne[0] && node.ne[2] == 1 && node.ne[3] == 1;
}

size_t timestep_work_size(const Tensor& node, int nth) {
  return row_work_size(nth, 1, node.ne[0]);
}

void timestep_compute(Tensor& node, const OpContext& ctx) {
  const Tensor& ts = *node.src[0];
  const TimestepEmbeddingParams p = TimestepEmbeddingParams::get(node);
  const int64_t half = p.dim / 2;
  const float log_period = std::log(static_cast<float>(p.max_period));
  float* scratch = thread_row(ctx, 1, 0, node.ne[0]);
  const Range r = split_rows(node.ne[1], ctx.ith, ctx.nth);
  for (int64_t i = r.begin; i < r.end; ++i) {
    const float t = load_float(ts.type, element_ptr(ts, i, 0, 0, 0));
    float* d = row_out(node, i, 0, 0, scratch);
    for (int64_t j = 0; j < half; ++j) {
      const float freq = std::exp(-log_period * static_cast<float>(j) / static_cast<float>(half));
      d[j] = std::cos(t * freq);
      d[j + half] = std::sin(t * freq);
    }
    for (int64_t j = 2 * half; j < node.ne[0]; ++j) d[j] = 0.0f;  // odd dim: a zero column
    write_row(node, i, 0, 0, d);
  }
}

}  // namespace

extern const OpImpl kArangeOp{arange_supports, nullptr, arange_compute};
extern const OpImpl kTimestepEmbeddingOp{timestep_supports, timestep_work_size, timestep_compute};

}  // namespace tessera::cpu
