// Image helpers: IM2COL (1-D and 2-D), POOL_2D (max, avg) and UPSCALE
// (nearest). F32/F16/BF16 inputs in any strides; split over output rows.
#include <algorithm>
#include <cfloat>

#include "cpu/ops/rows.h"
#include "tessera/core/op_params.h"

namespace tessera::cpu {
namespace {

int64_t window_out(int64_t in, int64_t kernel, int64_t stride, int64_t pad, int64_t dilation) {
  return (in + 2 * pad - dilation * (kernel - 1) - 1) / stride + 1;
}

// IM2COL params (Im2ColParams) widened, with the geometry they imply. 1-D is
// 2-D with one row of height 1: input [IW, IC, N] and output [IC*KW, OW, N].
struct Im2Col {
  int64_t s0, s1, p0, p1, d0, d1;
  bool is_2d;
  int64_t kw, kh, iw, ih, ic, n, ow, oh;
};

Im2Col im2col_geometry(const Tensor& node) {
  const Tensor& k = *node.src[0];
  const Tensor& a = *node.src[1];
  const Im2ColParams p = Im2ColParams::get(node);
  Im2Col g{p.s0, p.s1, p.p0, p.p1, p.d0, p.d1, p.is_2d, 0, 0, 0, 0, 0, 0, 0, 0};
  if (!g.is_2d) g.s1 = 1, g.p1 = 0, g.d1 = 1;
  g.kw = k.ne[0];
  g.kh = g.is_2d ? k.ne[1] : 1;
  g.iw = a.ne[0];
  g.ih = g.is_2d ? a.ne[1] : 1;
  g.ic = g.is_2d ? a.ne[2] : a.ne[1];
  g.n = g.is_2d ? a.ne[3] : a.ne[2];
  g.ow = g.s0 >= 1 && g.d0 >= 1 ? window_out(g.iw, g.kw, g.s0, g.p0, g.d0) : 0;
  g.oh = g.s1 >= 1 && g.d1 >= 1 ? window_out(g.ih, g.kh, g.s1, g.p1, g.d1) : 0;
  return g;
}

bool im2col_supports(const Tensor& node) {
  const Tensor& k = *node.src[0];
  const Tensor& a = *node.src[1];
  const Im2Col g = im2col_geometry(node);
  if (!(writable_rows(node) && is_float_type(a.type)) || g.p0 < 0 || g.p1 < 0) return false;
  if (g.ow < 1 || g.oh < 1 || (g.is_2d ? k.ne[2] : k.ne[1]) != g.ic) return false;
  const std::array<int64_t, kMaxDims> want =
      g.is_2d ? std::array<int64_t, kMaxDims>{g.ic * g.kh * g.kw, g.ow, g.oh, g.n}
              : std::array<int64_t, kMaxDims>{g.ic * g.kw, g.ow, g.n, 1};
  return node.ne == want && (g.is_2d || a.ne[3] == 1);
}

size_t im2col_work_size(const Tensor& node, int nth) {
  return row_work_size(nth, 1, node.ne[0]);
}

void im2col_compute(Tensor& node, const OpContext& ctx) {
  const Tensor& a = *node.src[1];
  const Im2Col g = im2col_geometry(node);
  float* scratch = thread_row(ctx, 1, 0, node.ne[0]);
  const Range r = split_rows(node.n_rows(), ctx.ith, ctx.nth);
  for (int64_t row = r.begin; row < r.end; ++row) {
    const RowIndex o = row_index(node, row);
    // 2-D rows are (ow, oh, n); 1-D rows (ow, n).
    const int64_t ox = o.i1, oy = g.is_2d ? o.i2 : 0, n = g.is_2d ? o.i3 : o.i2;
    float* d = row_out(node, o, scratch);
    for (int64_t c = 0; c < g.ic; ++c) {
      for (int64_t ky = 0; ky < g.kh; ++ky) {
        for (int64_t kx = 0; kx < g.kw; ++kx) {
          const int64_t x = ox * g.s0 + kx * g.d0 - g.p0;
          const int64_t y = oy * g.s1 + ky * g.d1 - g.p1;
          float v = 0.0f;
          if (x >= 0 && x < g.iw && y >= 0 && y < g.ih) {
            v = load_float(a.type,
                           g.is_2d ? element_ptr(a, x, y, c, n) : element_ptr(a, x, c, n, 0));
          }
          d[(c * g.kh + ky) * g.kw + kx] = v;
        }
      }
    }
    write_row(node, o, d);
  }
}

bool pool_supports(const Tensor& node) {
  const Tensor& a = *node.src[0];
  const Pool2dParams p = Pool2dParams::get(node);
  const int64_t k0 = p.k0, k1 = p.k1, s0 = p.s0, s1 = p.s1, p0 = p.p0, p1 = p.p1;
  const bool op = p.op == PoolOp::kMax || p.op == PoolOp::kAvg;
  if (!(writable_rows(node) && is_float_type(a.type)) || !op) return false;
  if (k0 < 1 || k1 < 1 || s0 < 1 || s1 < 1 || p0 < 0 || p1 < 0) return false;
  return node.ne[0] == window_out(a.ne[0], k0, s0, p0, 1) && node.ne[0] >= 1 &&
         node.ne[1] == window_out(a.ne[1], k1, s1, p1, 1) && node.ne[1] >= 1 &&
         node.ne[2] == a.ne[2] && node.ne[3] == a.ne[3];
}

size_t pool_work_size(const Tensor& node, int nth) {
  return row_work_size(nth, 2, std::max(node.ne[0], node.src[0]->ne[0]));
}

void pool_compute(Tensor& node, const OpContext& ctx) {
  const Tensor& a = *node.src[0];
  const Pool2dParams p = Pool2dParams::get(node);
  const bool is_max = p.op == PoolOp::kMax;
  const int64_t k0 = p.k0, k1 = p.k1, s0 = p.s0, s1 = p.s1, p0 = p.p0, p1 = p.p1;
  const int64_t len = std::max(node.ne[0], a.ne[0]);
  float* sa = thread_row(ctx, 2, 0, len);
  float* sd = thread_row(ctx, 2, 1, len);
  const Range r = split_rows(node.n_rows(), ctx.ith, ctx.nth);
  for (int64_t row = r.begin; row < r.end; ++row) {
    const RowIndex o = row_index(node, row);  // (oy, channel, sample)
    float* d = row_out(node, o, sd);
    std::fill(d, d + node.ne[0], is_max ? -FLT_MAX : 0.0f);
    for (int64_t ky = 0; ky < k1; ++ky) {
      const int64_t y = o.i1 * s1 - p1 + ky;
      if (y < 0 || y >= a.ne[1]) continue;
      const float* x = read_row(a, y, o.i2, o.i3, sa);
      for (int64_t ox = 0; ox < node.ne[0]; ++ox) {
        for (int64_t kx = 0; kx < k0; ++kx) {
          const int64_t xi = ox * s0 - p0 + kx;
          if (xi < 0 || xi >= a.ne[0]) continue;
          d[ox] = is_max ? std::max(d[ox], x[xi]) : d[ox] + x[xi];
        }
      }
    }
    if (!is_max) {
      const auto inv = 1.0f / static_cast<float>(k0 * k1);
      for (int64_t ox = 0; ox < node.ne[0]; ++ox) d[ox] *= inv;
    }
    write_row(node, o, d);
  }
}

bool upscale_supports(const Tensor& node) {
  return writable_rows(node) && is_float_type(node.src[0]->type) &&
         UpscaleParams::get(node).mode == UpscaleMode::kNearest;
}

size_t upscale_work_size(const Tensor& node, int nth) {
  return row_work_size(nth, 2, std::max(node.ne[0], node.src[0]->ne[0]));
}

void upscale_compute(Tensor& node, const OpContext& ctx) {
  const Tensor& a = *node.src[0];
  // Source index floor(i / (ne / a.ne)) with the ratio in f32, as ggml.
  auto src_index = [&](int64_t i, size_t d) {
    const float ratio = static_cast<float>(node.ne[d]) / static_cast<float>(a.ne[d]);
    return std::min(static_cast<int64_t>(static_cast<float>(i) / ratio), a.ne[d] - 1);
  };
  const int64_t len = std::max(node.ne[0], a.ne[0]);
  float* sa = thread_row(ctx, 2, 0, len);
  float* sd = thread_row(ctx, 2, 1, len);
  const Range r = split_rows(node.n_rows(), ctx.ith, ctx.nth);
  for (int64_t row = r.begin; row < r.end; ++row) {
    const RowIndex o = row_index(node, row);
    const float* x = read_row(a, src_index(o.i1, 1), src_index(o.i2, 2), src_index(o.i3, 3), sa);
    float* d = row_out(node, o, sd);
    for (int64_t i0 = 0; i0 < node.ne[0]; ++i0) d[i0] = x[src_index(i0, 0)];
    write_row(node, o, d);
  }
}

}  // namespace

extern const OpImpl kIm2ColOp{im2col_supports, im2col_work_size, im2col_compute};
extern const OpImpl kPool2dOp{pool_supports, pool_work_size, pool_compute};
extern const OpImpl kUpscaleOp{upscale_supports, upscale_work_size, upscale_compute};

}  // namespace tessera::cpu
