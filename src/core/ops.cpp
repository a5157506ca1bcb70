#include "tessera/core/ops.h"

#include <fmt/format.h>

#include "ops_check.h"
#include "tessera/core/error.h"

namespace tessera::ops {
namespace {

using Shape = std::array<int64_t, kMaxDims>;
using detail::bad_input;

Tensor* elementwise(Graph& g, Op op, Tensor* a, Tensor* b) {
  if (!can_repeat(*b, *a)) {
    fail(ErrorCategory::kInvalidArgument, "[{}] found {} and {}, expected the second to "
         "broadcast over the first", op_name(op), a->describe(), b->describe());
  }
  return g.new_node(op, a->type, a->ne, {a, b});
}

Tensor* same_shape_node(Graph& g, Op op, Tensor* a) {
  return g.new_node(op, a->type, a->ne, {a});
}

// A gated activation: act(gate) * up, elementwise over equal shapes.
Tensor* gated(Graph& g, Op op, Tensor* gate, Tensor* up) {
  if (!same_shape(*gate, *up)) {
    fail(ErrorCategory::kInvalidArgument, "[{}] gate {} and up {} differ in shape", op_name(op),
         gate->describe(), up->describe());
  }
  return g.new_node(op, gate->type, gate->ne, {gate, up});
}

}  // namespace

Tensor* reshape(Graph& g, Tensor* a, std::initializer_list<int64_t> ne) {
  if (!a->is_contiguous()) bad_input(Op::kReshape, *a, "a contiguous tensor");
  if (ne.size() == 0 || ne.size() > kMaxDims) bad_input(Op::kReshape, *a, "1 to 4 dims");
  Shape shape{1, 1, 1, 1};
  int64_t n = 1;
  size_t i = 0;
  for (int64_t d : ne) {
    shape[i++] = d;
    n *= d;
  }
  if (n != a->n_elements()) {
    fail(ErrorCategory::kInvalidArgument, "[RESHAPE] {} has {} elements, new shape has {}",
         a->describe(), a->n_elements(), n);
  }
  return g.new_view(Op::kReshape, a, a->type, shape, contiguous_strides(a->type, shape), 0);
}

Tensor* view(Graph& g, Tensor* a, std::initializer_list<int64_t> ne,
             std::initializer_list<size_t> nb_outer, size_t offset) {
  if (ne.size() == 0 || ne.size() > kMaxDims || nb_outer.size() + 1 != ne.size()) {
    bad_input(Op::kView, *a, "n dims and n-1 outer strides");
  }
  Shape shape{1, 1, 1, 1};
  std::copy(ne.begin(), ne.end(), shape.begin());
  std::array<size_t, kMaxDims> nb = contiguous_strides(a->type, shape);
  size_t i = 1;
  for (size_t s : nb_outer) nb[i++] = s;
  for (; i < kMaxDims; ++i) nb[i] = nb[i - 1] * static_cast<size_t>(shape[i - 1]);
  Tensor probe;
  probe.type = a->type;
  probe.ne = shape;
  probe.nb = nb;
  if (offset > a->n_bytes() || probe.n_bytes() > a->n_bytes() - offset) {
    fail(ErrorCategory::kInvalidArgument, "[VIEW] of {} at offset {} spans {} bytes, source has {}",
         a->describe(), offset, probe.n_bytes(), a->n_bytes());
  }
  return g.new_view(Op::kView, a, a->type, shape, nb, offset);
}

Tensor* permute(Graph& g, Tensor* a, int axis0, int axis1, int axis2, int axis3) {
  const std::array<int, kMaxDims> axes{axis0, axis1, axis2, axis3};
  std::array<bool, kMaxDims> used{};
  for (int ax : axes) {
    if (ax < 0 || ax >= kMaxDims || used[static_cast<size_t>(ax)]) {
      bad_input(Op::kPermute, *a, "axes that are a permutation of 0..3");
    }
    used[static_cast<size_t>(ax)] = true;
  }
  Shape ne{};
  std::array<size_t, kMaxDims> nb{};
  for (size_t i = 0; i < kMaxDims; ++i) {
    ne[static_cast<size_t>(axes[i])] = a->ne[i];
    nb[static_cast<size_t>(axes[i])] = a->nb[i];
  }
  return g.new_view(Op::kPermute, a, a->type, ne, nb, 0);
}

Tensor* transpose(Graph& g, Tensor* a) {
  Tensor* t = permute(g, a, 1, 0, 2, 3);
  t->op = Op::kTranspose;
  return t;
}

Tensor* get_rows(Graph& g, Tensor* a, Tensor* ids) {
  if (ids->type != DType::kI32) bad_input(Op::kGetRows, *ids, "i32 row ids");
  if (ids->ne[3] != 1 || ids->ne[1] != a->ne[2] || ids->ne[2] != a->ne[3]) {
    fail(ErrorCategory::kInvalidArgument, "[GET_ROWS] ids {} do not match rows of {}",
         ids->describe(), a->describe());
  }
  const DType out = a->type == DType::kI32 ? DType::kI32 : DType::kF32;
  return g.new_node(Op::kGetRows, out, {a->ne[0], ids->ne[0], ids->ne[1], ids->ne[2]}, {a, ids});
}

Tensor* cpy(Graph& g, Tensor* a, Tensor* b) {
  if (a->n_elements() != b->n_elements()) {
    fail(ErrorCategory::kInvalidArgument, "[CPY] {} into {}: element counts differ",
         a->describe(), b->describe());
  }
  Tensor* t = g.new_view(Op::kCpy, b, b->type, b->ne, b->nb, 0);
  t->src[0] = a;
  t->src[1] = b;
  return t;
}

Tensor* set_rows(Graph& g, Tensor* dst, Tensor* values, Tensor* ids) {
  using detail::expect;
  const DTypeInfo& info = dtype_info(dst->type);
  // A quantized row is rewritten whole, block by block: blocks must be adjacent.
  expect(detail::is_float(dst->type) ||
             (info.quantized && info.has_quantize && dst->nb[0] == info.block_bytes),
         Op::kSetRows, *dst, "an f32, f16 or bf16 destination, or contiguous blocks of a type "
         "with a quantizer");
  expect(values->type == DType::kF32, Op::kSetRows, *values, "f32 values");
  expect(ids->type == DType::kI32 || ids->type == DType::kI64, Op::kSetRows, *ids,
         "i32 or i64 row ids");
  if (values->ne[0] != dst->ne[0] || values->ne[2] != dst->ne[2] || values->ne[3] != dst->ne[3]) {
    bad_input(Op::kSetRows,
              fmt::format("values {} for destination {}", values->describe(), dst->describe()),
              "equal ne[0], ne[2] and ne[3]");
  }
  if (ids->ne[3] != 1 || ids->ne[0] != values->ne[1] || ids->ne[1] < 1 || ids->ne[2] < 1 ||
      dst->ne[2] % ids->ne[1] != 0 || dst->ne[3] % ids->ne[2] != 0) {
    bad_input(Op::kSetRows,
              fmt::format("ids {} for values {} and destination {}", ids->describe(),
                          values->describe(), dst->describe()),
              "ids [values ne[1], ne2', ne3'] with the destination's ne[2], ne[3] multiples of "
              "ne2', ne3'");
  }
  // As cpy: the node is a view of dst, so dst's other rows are its own bytes.
  Tensor* t = g.new_view(Op::kSetRows, dst, dst->type, dst->ne, dst->nb, 0);
  t->src[0] = values;
  t->src[1] = ids;
  t->src[2] = dst;
  return t;
}

Tensor* dup(Graph& g, Tensor* a) { return same_shape_node(g, Op::kDup, a); }

Tensor* cont(Graph& g, Tensor* a) { return same_shape_node(g, Op::kCont, a); }

Tensor* add(Graph& g, Tensor* a, Tensor* b) { return elementwise(g, Op::kAdd, a, b); }
Tensor* sub(Graph& g, Tensor* a, Tensor* b) { return elementwise(g, Op::kSub, a, b); }
Tensor* mul(Graph& g, Tensor* a, Tensor* b) { return elementwise(g, Op::kMul, a, b); }
Tensor* div(Graph& g, Tensor* a, Tensor* b) { return elementwise(g, Op::kDiv, a, b); }

Tensor* scale(Graph& g, Tensor* a, float s, float bias) {
  Tensor* t = same_shape_node(g, Op::kScale, a);
  ScaleParams{s, bias}.set(*t);
  return t;
}

Tensor* sqr(Graph& g, Tensor* a) { return same_shape_node(g, Op::kSqr, a); }
Tensor* sqrt(Graph& g, Tensor* a) { return same_shape_node(g, Op::kSqrt, a); }

Tensor* clamp(Graph& g, Tensor* a, float min, float max) {
  Tensor* t = same_shape_node(g, Op::kClamp, a);
  ClampParams{min, max}.set(*t);
  return t;
}

Tensor* unary(Graph& g, Tensor* a, UnaryOp op, float param) {
  Tensor* t = same_shape_node(g, Op::kUnary, a);
  UnaryParams{op, param}.set(*t);
  return t;
}

Tensor* swiglu(Graph& g, Tensor* gate, Tensor* up) {
  return gated(g, Op::kSwiglu, gate, up);
}
Tensor* geglu(Graph& g, Tensor* gate, Tensor* up) {
  return gated(g, Op::kGeglu, gate, up);
}
Tensor* swiglu_oai(Graph& g, Tensor* gate, Tensor* up, float alpha, float limit) {
  Tensor* t = gated(g, Op::kSwigluOai, gate, up);
  SwigluOaiParams{alpha, limit}.set(*t);
  return t;
}

Tensor* norm(Graph& g, Tensor* a, float eps) {
  Tensor* t = same_shape_node(g, Op::kNorm, a);
  NormParams{eps}.set(*t);
  return t;
}

Tensor* rms_norm(Graph& g, Tensor* a, float eps) {
  Tensor* t = same_shape_node(g, Op::kRmsNorm, a);
  NormParams{eps}.set(*t);
  return t;
}

Tensor* mul_mat(Graph& g, Tensor* w, Tensor* x) {
  if (w->ne[0] != x->ne[0] || x->ne[2] % w->ne[2] != 0 || x->ne[3] % w->ne[3] != 0) {
    fail(ErrorCategory::kInvalidArgument, "[MUL_MAT] weights {} and input {}: expected equal "
         "ne[0] and input batch dims multiples of the weights'", w->describe(), x->describe());
  }
  if (x->is_transposed()) bad_input(Op::kMulMat, *x, "an input whose rows are contiguous");
  return g.new_node(Op::kMulMat, DType::kF32, {w->ne[1], x->ne[1], x->ne[2], x->ne[3]}, {w, x});
}

Tensor* mul_mat_id(Graph& g, Tensor* w, Tensor* x, Tensor* ids) {
  constexpr Op op = Op::kMulMatId;
  detail::expect(w->ne[3] == 1 && !w->is_transposed(), op, *w,
                 "experts [K, M, n_expert] with contiguous rows");
  detail::expect(x->type == DType::kF32 && x->ne[3] == 1 && x->ne[0] == w->ne[0] && x->ne[1] > 0 &&
                     !x->is_transposed(),
                 op, *x, fmt::format("an f32 input [{}, n_x > 0, T] with contiguous rows", w->ne[0]));
  detail::expect(ids->type == DType::kI32 && ids->ne[2] == 1 && ids->ne[3] == 1 &&
                     ids->ne[1] == x->ne[2] && ids->ne[0] % x->ne[1] == 0,
                 op, *ids, fmt::format("i32 ids [n_used, {}] with n_used a multiple of {}", x->ne[2], x->ne[1]));
  return g.new_node(op, DType::kF32, {w->ne[1], ids->ne[0], x->ne[2], 1}, {w, x, ids});
}

Tensor* add_id(Graph& g, Tensor* a, Tensor* b, Tensor* ids) {
  constexpr Op op = Op::kAddId;
  detail::expect(a->type == DType::kF32 && a->ne[3] == 1, op, *a, "an f32 a [ne0, ne1, ne2]");
  detail::expect(b->type == DType::kF32 && b->ne[0] == a->ne[0] && b->ne[2] == 1 && b->ne[3] == 1, op,
                 *b, fmt::format("f32 bias rows [{}, n]", a->ne[0]));
  detail::expect(ids->type == DType::kI32 && ids->ne[0] == a->ne[1] && ids->ne[1] == a->ne[2] &&
                     ids->ne[2] == 1 && ids->ne[3] == 1,
                 op, *ids, fmt::format("i32 ids [{}, {}]", a->ne[1], a->ne[2]));
  return g.new_node(op, DType::kF32, a->ne, {a, b, ids});
}

}  // namespace tessera::ops
