// Graph builders for the rest of the op set (docs/ops.md): data movement (CONCAT, REPEAT,
// ACC, PAD), generators (ARANGE, TIMESTEP_EMBEDDING), reductions (SUM_ROWS,
// ARGSORT, GROUP_NORM) and image helpers (IM2COL, POOL_2D, UPSCALE).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include <fmt/format.h>

#include "ops_check.h"
#include "tessera/core/ops.h"

namespace tessera::ops {
namespace {

using detail::bad_input;
using detail::expect;
using detail::expect_param;
using Shape = std::array<int64_t, kMaxDims>;

// Output length of a sliding window (conv or pool); may be <= 0 when it does not fit.
int64_t window_out(int64_t in, int64_t kernel, int64_t stride, int64_t pad, int64_t dilation) {
  return (in + 2 * pad - dilation * (kernel - 1) - 1) / stride + 1;
}

}  // namespace

Tensor* group_norm(Graph& g, Tensor* a, int n_groups, float eps) {
  constexpr Op kOp = Op::kGroupNorm;
  expect(a->type == DType::kF32, kOp, *a, "an f32 input");
  expect_param(n_groups >= 1, kOp, "n_groups", n_groups, ">= 1");
  Tensor* t = g.new_node(kOp, DType::kF32, a->ne, {a});
  GroupNormParams{n_groups, eps}.set(*t);
  return t;
}

Tensor* concat(Graph& g, Tensor* a, Tensor* b, int dim) {
  constexpr Op kOp = Op::kConcat;
  expect_param(dim >= 0 && dim < kMaxDims, kOp, "dim", dim, "0..3");
  expect(detail::is_plain(a->type), kOp, *a, "a plain (not quantized) type");
  bool same = a->type == b->type;
  for (int d = 0; d < kMaxDims; ++d) same = same && (d == dim || a->ne[d] == b->ne[d]);
  expect(same, kOp, *b, fmt::format("{}'s type and shape outside dim {}", a->describe(), dim));
  Shape ne = a->ne;
  ne[static_cast<size_t>(dim)] += b->ne[static_cast<size_t>(dim)];
  Tensor* t = g.new_node(kOp, a->type, ne, {a, b});
  ConcatParams{dim}.set(*t);
  return t;
}

Tensor* repeat(Graph& g, Tensor* a, Tensor* shape_of) {
  constexpr Op kOp = Op::kRepeat;
  expect(detail::is_plain(a->type), kOp, *a, "a plain (not quantized) type");
  expect(can_repeat(*a, *shape_of), kOp, *a,
         fmt::format("a shape that tiles {}", shape_of->describe()));
  return g.new_node(kOp, a->type, shape_of->ne, {a});
}

Tensor* acc(Graph& g, Tensor* a, Tensor* b, size_t nb1, size_t nb2, size_t nb3, size_t offset) {
  constexpr Op kOp = Op::kAcc;
  expect(a->type == DType::kF32 && a->is_contiguous(), kOp, *a, "a contiguous f32 tensor");
  expect(b->type == DType::kF32, kOp, *b, "an f32 tensor");
  constexpr size_t kF = sizeof(float);
  constexpr size_t kMax = std::numeric_limits<int32_t>::max();
  const std::array<size_t, 4> nb{kF, nb1, nb2, nb3};
  bool ok = offset % kF == 0 && offset <= kMax;
  size_t span = kF * static_cast<size_t>(b->ne[0]);  // bytes the dims so far cover
  for (size_t d = 1; d < kMaxDims; ++d) {
    ok = ok && nb[d] % kF == 0 && nb[d] <= kMax;
    if (b->ne[d] > 1) {
      // Rows and planes must not overlap: each stride spans the dims below it.
      ok = ok && nb[d] >= span;
      span += nb[d] * static_cast<size_t>(b->ne[d] - 1);
    }
  }
  if (!ok || b->n_elements() == 0 || offset + span > a->n_bytes()) {
    bad_input(
        kOp,
        fmt::format("{} at strides [{}, {}, {}] offset {}", b->describe(), nb1, nb2, nb3, offset),
        fmt::format("a view inside {} ({} bytes): f32-aligned, non-overlapping rows", a->describe(),
                    a->n_bytes()));
  }
  Tensor* t = g.new_node(kOp, DType::kF32, a->ne, {a, b});
  // Each fits in i32: checked above against kMax.
  AccParams{static_cast<int32_t>(nb1), static_cast<int32_t>(nb2), static_cast<int32_t>(nb3),
            static_cast<int32_t>(offset)}
      .set(*t);
  return t;
}

Tensor* pad(Graph& g, Tensor* a, int p0, int p1, int p2, int p3) {
  constexpr Op kOp = Op::kPad;
  expect(detail::is_plain(a->type), kOp, *a, "a plain (not quantized) type");
  const std::array<int, kMaxDims> p{p0, p1, p2, p3};
  Shape ne = a->ne;
  for (size_t d = 0; d < kMaxDims; ++d) {
    expect_param(p[d] >= 0, kOp, "padding", p[d], ">= 0");
    ne[d] += p[d];
  }
  Tensor* t = g.new_node(kOp, a->type, ne, {a});
  PadParams{{}, {p0, p1, p2, p3}}.set(*t);  // nothing before, as ggml_pad
  return t;
}

Tensor* arange(Graph& g, float start, float stop, float step) {
  constexpr Op kOp = Op::kArange;
  const float steps = step != 0.0f ? std::ceil((stop - start) / step) : 0.0f;
  if (!(steps >= 1.0f && steps < 1e9f)) {
    bad_input(kOp, fmt::format("start {} stop {} step {}", start, stop, step),
              "at least one step from start towards stop");
  }
  Tensor* t = g.new_node(kOp, DType::kF32, {static_cast<int64_t>(steps), 1, 1, 1}, {});
  ArangeParams{start, stop, step}.set(*t);
  return t;
}

Tensor* timestep_embedding(Graph& g, Tensor* timesteps, int dim, int max_period) {
  constexpr Op kOp = Op::kTimestepEmbedding;
  expect(timesteps->type == DType::kF32 && detail::is_vector(*timesteps), kOp, *timesteps,
         "f32 timesteps [N]");
  expect_param(dim >= 1, kOp, "dim", dim, ">= 1");
  expect_param(max_period >= 1, kOp, "max_period", max_period, ">= 1");
  Tensor* t = g.new_node(kOp, DType::kF32, {dim + dim % 2, timesteps->ne[0], 1, 1}, {timesteps});
  TimestepEmbeddingParams{dim, max_period}.set(*t);
  return t;
}

Tensor* sum_rows(Graph& g, Tensor* a) {
  expect(detail::is_float(a->type), Op::kSumRows, *a, "an f32, f16 or bf16 input");
  return g.new_node(Op::kSumRows, DType::kF32, {1, a->ne[1], a->ne[2], a->ne[3]}, {a});
}

Tensor* argsort(Graph& g, Tensor* a, SortOrder order) {
  constexpr Op kOp = Op::kArgsort;
  expect(a->type == DType::kF32, kOp, *a, "an f32 input");
  const auto o = static_cast<int32_t>(order);
  expect_param(o == 0 || o == 1, kOp, "order", o, "ascending (0) or descending (1)");
  Tensor* t = g.new_node(kOp, DType::kI32, a->ne, {a});
  ArgsortParams{order}.set(*t);
  return t;
}

Tensor* im2col(Graph& g, Tensor* k, Tensor* a, int s0, int s1, int p0, int p1, int d0, int d1,
               bool is_2d, DType out_type) {
  constexpr Op kOp = Op::kIm2Col;
  expect(a->type == DType::kF32 || a->type == DType::kF16, kOp, *a, "an f32 or f16 input");
  if (out_type != DType::kF32 && out_type != DType::kF16) {
    bad_input(kOp, fmt::format("output type {}", dtype_name(out_type)), "f32 or f16");
  }
  expect_param(s0 >= 1 && (!is_2d || s1 >= 1), kOp, "stride", is_2d ? std::min(s0, s1) : s0,
               ">= 1");
  expect_param(d0 >= 1 && (!is_2d || d1 >= 1), kOp, "dilation", is_2d ? std::min(d0, d1) : d0,
               ">= 1");
  expect_param(p0 >= 0 && (!is_2d || p1 >= 0), kOp, "padding", is_2d ? std::min(p0, p1) : p0,
               ">= 0");
  const int64_t channels = is_2d ? a->ne[2] : a->ne[1];
  const int64_t k_channels = is_2d ? k->ne[2] : k->ne[1];
  expect(channels == k_channels && (is_2d || a->ne[3] == 1), kOp, *a,
         fmt::format("an input with {} channels for kernel {}", k_channels, k->describe()));
  const int64_t ow = window_out(a->ne[0], k->ne[0], s0, p0, d0);
  const int64_t oh = is_2d ? window_out(a->ne[1], k->ne[1], s1, p1, d1) : 1;
  expect(ow >= 1 && oh >= 1, kOp, *a, fmt::format("an input the kernel {} fits", k->describe()));
  const Shape ne = is_2d ? Shape{channels * k->ne[1] * k->ne[0], ow, oh, a->ne[3]}
                         : Shape{channels * k->ne[0], ow, a->ne[2], 1};
  Tensor* t = g.new_node(kOp, out_type, ne, {k, a});
  Im2ColParams{s0, s1, p0, p1, d0, d1, is_2d}.set(*t);
  return t;
}

Tensor* pool_2d(Graph& g, Tensor* a, PoolOp op, int k0, int k1, int s0, int s1, int p0, int p1) {
  constexpr Op kOp = Op::kPool2d;
  expect(detail::is_float(a->type), kOp, *a, "an f32, f16 or bf16 input");
  const auto o = static_cast<int32_t>(op);
  expect_param(o == 0 || o == 1, kOp, "op", o, "max (0) or avg (1)");
  expect_param(k0 >= 1 && k1 >= 1, kOp, "kernel", std::min(k0, k1), ">= 1");
  expect_param(s0 >= 1 && s1 >= 1, kOp, "stride", std::min(s0, s1), ">= 1");
  expect_param(p0 >= 0 && p1 >= 0, kOp, "padding", std::min(p0, p1), ">= 0");
  const int64_t ow = window_out(a->ne[0], k0, s0, p0, 1);
  const int64_t oh = window_out(a->ne[1], k1, s1, p1, 1);
  expect(ow >= 1 && oh >= 1, kOp, *a, fmt::format("an input a {}x{} window fits", k0, k1));
  Tensor* t = g.new_node(kOp, DType::kF32, {ow, oh, a->ne[2], a->ne[3]}, {a});
  Pool2dParams{op, k0, k1, s0, s1, p0, p1}.set(*t);
  return t;
}

Tensor* upscale(Graph& g, Tensor* a, int ne0, int ne1, int ne2, int ne3) {
  constexpr Op kOp = Op::kUpscale;
  expect(detail::is_float(a->type), kOp, *a, "an f32, f16 or bf16 input");
  expect_param(ne0 >= 1 && ne1 >= 1 && ne2 >= 1 && ne3 >= 1, kOp, "size",
               std::min({ne0, ne1, ne2, ne3}), ">= 1 in every dim");
  Tensor* t = g.new_node(kOp, a->type, {ne0, ne1, ne2, ne3}, {a});
  UpscaleParams{UpscaleMode::kNearest}.set(*t);
  return t;
}

}  // namespace tessera::ops
