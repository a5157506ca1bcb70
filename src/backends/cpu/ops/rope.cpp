// ROPE, normal and NeoX, over the first n_dims of each row (the rest copied),
// with optional frequency factors and YaRN, as ggml's rope_yarn computes it.
// F32/F16/BF16 in any strides. Each thread recomputes the cos/sin table when
// its rows move to a new position (dim 2): n_dims / 2 sincos per token.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numbers>

#include "cpu/ops/rows.h"
#include "tessera/core/op_params.h"

namespace tessera::cpu {
namespace {

bool supports(const Tensor& node) {
  const Tensor& a = *node.src[0];
  const Tensor& pos = *node.src[1];
  const Tensor* ff = node.src[2];
  const RopeParams p = RopeParams::get(node);
  const bool mode = p.mode == RopeMode::kNormal || p.mode == RopeMode::kNeox;
  return writable_rows(node) && is_float_type(a.type) && same_shape(node, a) && mode &&
         pos.type == DType::kI32 && pos.ne[0] == a.ne[2] && pos.ne[1] == 1 && pos.ne[2] == 1 &&
         pos.ne[3] == 1 && p.n_dims > 0 && p.n_dims % 2 == 0 && p.n_dims <= a.ne[0] &&
         (ff == nullptr || (ff->type == DType::kF32 && ff->ne[0] >= p.n_dims / 2));
}

size_t work_size(const Tensor& node, int nth) {
  return row_work_size(nth, 3, node.ne[0]);
}

// YaRN's correction dim: the rotary pair whose wavelength fits n_rot times in n_ctx_orig.
float corr_dim(int n_dims, int n_ctx_orig, float n_rot, float base) {
  return static_cast<float>(n_dims) *
         std::log(static_cast<float>(n_ctx_orig) / (n_rot * 2.0f * std::numbers::pi_v<float>)) /
         (2.0f * std::log(base));
}

struct Yarn {
  float low, high;  // ramp from extrapolation (below low) to interpolation (above high)
};

Yarn yarn_dims(const RopeParams& p) {
  const float start = std::floor(corr_dim(p.n_dims, p.n_ctx_orig, p.beta_fast, p.freq_base));
  const float end = std::ceil(corr_dim(p.n_dims, p.n_ctx_orig, p.beta_slow, p.freq_base));
  return {std::max(0.0f, start), std::min(static_cast<float>(p.n_dims - 1), end)};
}

// cos/sin pairs for one position into cache[0..n_dims).
void fill_cache(const RopeParams& p, const Yarn& yarn, const Tensor* ff, float pos, float* cache) {
  const float theta_scale = std::pow(p.freq_base, -2.0f / static_cast<float>(p.n_dims));
  float theta_extrap = pos;
  for (int64_t i0 = 0; i0 < p.n_dims; i0 += 2) {
    float factor = 1.0f;
    if (ff != nullptr) std::memcpy(&factor, element_ptr(*ff, i0 / 2, 0, 0, 0), sizeof factor);
    const float extrap = theta_extrap / factor;
    const float interp = p.freq_scale * extrap;
    float theta = interp;
    float mscale = p.attn_factor;
    if (p.ext_factor != 0.0f) {
      const float y =
          (static_cast<float>(i0 / 2) - yarn.low) / std::max(0.001f, yarn.high - yarn.low);
      const float ramp = (1.0f - std::min(1.0f, std::max(0.0f, y))) * p.ext_factor;
      theta = interp * (1.0f - ramp) + extrap * ramp;
      mscale *= 1.0f + 0.1f * std::log(1.0f / p.freq_scale);
    }
    cache[i0] = std::cos(theta) * mscale;
    cache[i0 + 1] = std::sin(theta) * mscale;
    theta_extrap *= theta_scale;
  }
}

void compute(Tensor& node, const OpContext& ctx) {
  const Tensor& a = *node.src[0];
  const Tensor& pos = *node.src[1];
  const RopeParams p = RopeParams::get(node);
  const Yarn yarn = yarn_dims(p);
  const int64_t n = node.ne[0];
  const int64_t half = p.n_dims / 2;
  const bool neox = p.mode == RopeMode::kNeox;
  float* cache = thread_row(ctx, 3, 0, n);
  float* sa = thread_row(ctx, 3, 1, n);
  float* sd = thread_row(ctx, 3, 2, n);
  int64_t cached = -1;
  const Range r = split_rows(node.n_rows(), ctx.ith, ctx.nth);
  for (int64_t row = r.begin; row < r.end; ++row) {
    const RowIndex i = row_index(node, row);
    if (i.i2 != cached) {
      int32_t at;
      std::memcpy(&at, element_ptr(pos, i.i2, 0, 0, 0), sizeof at);
      fill_cache(p, yarn, node.src[2], static_cast<float>(at), cache);
      cached = i.i2;
    }
    const float* x = read_row(a, i, sa);
    float* d = row_out(node, i, sd);
    for (int64_t k = 0; k < half; ++k) {
      // Normal mode rotates (2k, 2k+1), NeoX (k, k + half); both use pair k's angle.
      const int64_t j0 = neox ? k : 2 * k;
      const int64_t j1 = neox ? k + half : 2 * k + 1;
      const float c = cache[2 * k], s = cache[2 * k + 1];
      const float x0 = x[j0], x1 = x[j1];
      d[j0] = x0 * c - x1 * s;
      d[j1] = x0 * s + x1 * c;
    }
    for (int64_t k = p.n_dims; k < n; ++k) d[k] = x[k];
    write_row(node, i, d);
  }
}

}  // namespace

extern const OpImpl kRopeOp{supports, work_size, compute};

}  // namespace tessera::cpu
