// Graph builders for attention: ROPE, SOFT_MAX, DIAG_MASK_INF, FLASH_ATTN_EXT.
// Shapes and params follow ggml's ops of the same names (slots: tessera/op_params.h).
#include <fmt/format.h>

#include "ops_check.h"
#include "tessera/core/ops.h"

namespace tessera::ops {
namespace {

using detail::bad_input;
using detail::expect;

// Checks a mask for scores of shape [n_kv, n_q, heads, batch].
void check_mask(Op op, const Tensor& mask, int64_t n_kv, int64_t n_q, int64_t heads,
                int64_t batch) {
  expect(mask.type == DType::kF32 || mask.type == DType::kF16, op, mask, "an f32 or f16 mask");
  const bool shape = mask.ne[0] == n_kv && mask.ne[1] >= n_q && mask.ne[2] >= 1 &&
                     mask.ne[3] >= 1 && heads % mask.ne[2] == 0 && batch % mask.ne[3] == 0;
  expect(
      shape, op, mask,
      fmt::format("a mask [{}, >= {}, a divisor of {}, a divisor of {}]", n_kv, n_q, heads, batch));
}

}  // namespace

Tensor* rope(Graph& g, Tensor* a, Tensor* pos, Tensor* freq_factors, const RopeParams& p) {
  constexpr Op kOp = Op::kRope;
  expect(a->type == DType::kF32 || a->type == DType::kF16, kOp, *a, "an f32 or f16 input");
  expect(pos->type == DType::kI32 && detail::is_vector(*pos) && pos->ne[0] == a->ne[2], kOp, *pos,
         fmt::format("i32 positions [{}], one per a.ne[2]", a->ne[2]));
  if (p.n_dims <= 0 || p.n_dims % 2 != 0 || p.n_dims > a->ne[0]) {
    bad_input(kOp, fmt::format("n_dims {}", p.n_dims),
              fmt::format("an even count in 2..{} (the head dim)", a->ne[0]));
  }
  if (p.mode != RopeMode::kNormal && p.mode != RopeMode::kNeox) {
    bad_input(kOp, fmt::format("mode {}", static_cast<int>(p.mode)), "normal (0) or NeoX (2)");
  }
  if (freq_factors != nullptr) {
    expect(freq_factors->type == DType::kF32 && freq_factors->ne[0] >= p.n_dims / 2, kOp,
           *freq_factors, fmt::format("f32 freq factors [>= {}]", p.n_dims / 2));
  }
  Tensor* t = g.new_node(kOp, a->type, a->ne, {a, pos, freq_factors});
  p.set(*t);
  return t;
}

Tensor* soft_max(Graph& g, Tensor* a, Tensor* mask, float scale, float max_bias) {
  constexpr Op kOp = Op::kSoftMax;
  expect(a->type == DType::kF32, kOp, *a, "an f32 input");
  if (mask != nullptr) check_mask(kOp, *mask, a->ne[0], a->ne[1], a->ne[2], a->ne[3]);
  if (max_bias > 0.0f && mask == nullptr) {
    bad_input(kOp, fmt::format("max_bias {} without a mask", max_bias), "a mask for ALiBi");
  }
  Tensor* t = g.new_node(kOp, DType::kF32, a->ne, {a, mask});
  SoftMaxParams{scale, max_bias}.set(*t);
  return t;
}

Tensor* diag_mask_inf(Graph& g, Tensor* a, int n_past) {
  constexpr Op kOp = Op::kDiagMaskInf;
  expect(a->type == DType::kF32, kOp, *a, "an f32 input");
  detail::expect_param(n_past >= 0, kOp, "n_past", n_past, ">= 0");
  Tensor* t = g.new_node(kOp, DType::kF32, a->ne, {a});
  DiagMaskInfParams{n_past}.set(*t);
  return t;
}

Tensor* flash_attn_ext(Graph& g, Tensor* q, Tensor* k, Tensor* v, Tensor* mask, float scale,
                       float max_bias, float softcap) {
  constexpr Op kOp = Op::kFlashAttnExt;
  auto kv_type_ok = [](const Tensor& t) {
    const DTypeInfo& info = dtype_info(t.type);
    return info.has_dequantize && t.nb[0] == info.block_bytes;
  };
  expect(q->type == DType::kF32, kOp, *q, "an f32 query");
  expect(kv_type_ok(*k), kOp, *k, "keys of a type with a dequantizer, rows contiguous");
  expect(kv_type_ok(*v), kOp, *v, "values of a type with a dequantizer, rows contiguous");
  const bool shapes = k->ne[0] == q->ne[0] && v->ne[1] == k->ne[1] && v->ne[2] == k->ne[2] &&
                      v->ne[3] == k->ne[3] && k->ne[2] >= 1 && k->ne[3] >= 1 &&
                      q->ne[2] % k->ne[2] == 0 && q->ne[3] % k->ne[3] == 0;
  if (!shapes) {
    bad_input(kOp, fmt::format("q {}, k {}, v {}", q->describe(), k->describe(), v->describe()),
              "q [D, n_q, H, B], k [D, n_kv, H_kv, B_kv], v [Dv, n_kv, H_kv, B_kv] with H a "
              "multiple of H_kv and B of B_kv");
  }
  if (mask != nullptr) check_mask(kOp, *mask, k->ne[1], q->ne[1], q->ne[2], q->ne[3]);
  if (softcap < 0.0f) bad_input(kOp, fmt::format("softcap {}", softcap), "softcap >= 0");
  Tensor* t =
      g.new_node(kOp, DType::kF32, {v->ne[0], q->ne[2], q->ne[1], q->ne[3]}, {q, k, v, mask});
  FlashAttnExtParams{scale, max_bias, softcap}.set(*t);
  return t;
}

Tensor* flash_attn_ext_add_sinks(Tensor* attn, Tensor* sinks) {
  constexpr Op kOp = Op::kFlashAttnExt;
  expect(attn->op == kOp, kOp, *attn, "a FLASH_ATTN_EXT node");
  const int64_t heads = attn->src[0]->ne[2];
  expect(sinks->type == DType::kF32 && sinks->ne[0] == heads && sinks->n_elements() == heads &&
             sinks->is_contiguous(),
         kOp, *sinks, fmt::format("f32 sinks [{}], one per query head", heads));
  attn->src[4] = sinks;
  return attn;
}

}  // namespace tessera::ops
