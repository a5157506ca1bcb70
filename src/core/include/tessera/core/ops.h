// Graph builders: each returns a new node computing one op, with its result
// shape and params set and its inputs checked. They compute nothing; a Stream
// does. Shapes follow ggml: ne[0] is the row (fastest) dimension. Each op's
// params and their slots are documented by its struct in tessera/op_params.h.
#pragma once

#include <array>
#include <cstdint>

#include "tessera/core/graph.h"
#include "tessera/core/op_params.h"

namespace tessera::ops {

// The params types builders take live with their decoders in op_params.h;
// these keep ops::RopeParams and friends spelled as callers know them.
using tessera::PoolOp;
using tessera::RopeMode;
using tessera::RopeParams;
using tessera::SortOrder;

// ---- layout: views of the source's bytes -------------------------------------
Tensor* reshape(Graph& g, Tensor* a, std::initializer_list<int64_t> ne);  // a contiguous
Tensor* view(Graph& g, Tensor* a, std::initializer_list<int64_t> ne,
             std::initializer_list<size_t> nb_outer, size_t offset);  // nb[1..] given
// Result dim i takes source dim... as ggml: source dim i moves to position axes[i].
Tensor* permute(Graph& g, Tensor* a, int axis0, int axis1, int axis2, int axis3);
Tensor* transpose(Graph& g, Tensor* a);  // swaps dims 0 and 1

// ---- data movement ---------------------------------------------------------------
// Rows of `a` picked by the i32 ids [n, ne2, ne3] -> [a.ne0, n, ne2, ne3] f32.
Tensor* get_rows(Graph& g, Tensor* a, Tensor* ids);
// Copies a into b's bytes (converting type); the result is a view of b.
Tensor* cpy(Graph& g, Tensor* a, Tensor* b);
// SET_ROWS (ggml_set_rows; docs/ops.md, "Ops added for the engine"):
// row (ids[i, i2 % ne2', i3 % ne3'], i2, i3) of dst = row (i, i2, i3) of values,
// converted or quantized to dst's type; dst's other rows keep their bytes.
// dst [ne0, R, ne2, ne3] f32, f16, bf16 or a type with a quantizer (blocks
// contiguous); values f32 [ne0, n, ne2, ne3]; ids i32 or i64 [n, ne2', ne3']
// with ne2, ne3 multiples of ne2', ne3' (ids broadcast). Ids must lie in
// [0, R) (else compute throws) and be distinct within each (i2, i3): rows
// named twice are written in no set order. The result is a view of dst (as
// cpy's of b): src[0] values, src[1] ids, src[2] dst.
Tensor* set_rows(Graph& g, Tensor* dst, Tensor* values, Tensor* ids);
Tensor* dup(Graph& g, Tensor* a);
Tensor* cont(Graph& g, Tensor* a);  // contiguous copy of a (permuted) view

// ---- elementwise (b broadcast over a) ----------------------------------------------
Tensor* add(Graph& g, Tensor* a, Tensor* b);
Tensor* sub(Graph& g, Tensor* a, Tensor* b);
Tensor* mul(Graph& g, Tensor* a, Tensor* b);
Tensor* div(Graph& g, Tensor* a, Tensor* b);
Tensor* scale(Graph& g, Tensor* a, float s, float bias = 0.0f);  // s * a + bias (ScaleParams)
Tensor* sqr(Graph& g, Tensor* a);
Tensor* sqrt(Graph& g, Tensor* a);
Tensor* clamp(Graph& g, Tensor* a, float min, float max);            // ClampParams
Tensor* unary(Graph& g, Tensor* a, UnaryOp op, float param = 0.0f);  // UnaryParams
inline Tensor* silu(Graph& g, Tensor* a) { return unary(g, a, UnaryOp::kSilu); }
inline Tensor* gelu(Graph& g, Tensor* a) { return unary(g, a, UnaryOp::kGelu); }
inline Tensor* relu(Graph& g, Tensor* a) { return unary(g, a, UnaryOp::kRelu); }
inline Tensor* sigmoid(Graph& g, Tensor* a) { return unary(g, a, UnaryOp::kSigmoid); }
Tensor* swiglu(Graph& g, Tensor* gate, Tensor* up);  // silu(gate) * up
// GEGLU (docs/ops.md, "Ops added for the engine"): gelu(gate) * up,
// GELU as UnaryOp::kGelu computes it (tanh approximation); shapes as swiglu's.
Tensor* geglu(Graph& g, Tensor* gate, Tensor* up);
// SWIGLU_OAI (ggml_swiglu_oai, gpt-oss's clamped SwiGLU): with x = min(gate,
// limit) and y = clamp(up, -limit, limit), x * sigmoid(alpha x) * (y + 1);
// shapes as swiglu's. Params: SwigluOaiParams.
Tensor* swiglu_oai(Graph& g, Tensor* gate, Tensor* up, float alpha, float limit);

// ---- normalization -----------------------------------------------------------
// Both take NormParams.
Tensor* norm(Graph& g, Tensor* a, float eps);      // per row: (x - mean) / sqrt(var + eps)
Tensor* rms_norm(Graph& g, Tensor* a, float eps);  // per row: x / sqrt(mean(x^2) + eps)

// a f32 [W, H, C, N]: channels (dim 2) split into n_groups groups of
// ceil(C / n_groups); each group of each sample normalized as one set.
// Params: GroupNormParams.
Tensor* group_norm(Graph& g, Tensor* a, int n_groups, float eps);

// ---- matmul ------------------------------------------------------------------------
// w [K, M, ne2, ne3] times x [K, N, ne2', ne3'] -> f32 [M, N, ne2', ne3'];
// w broadcast over dims 2 and 3 (ne2' a multiple of ne2, likewise ne3).
Tensor* mul_mat(Graph& g, Tensor* w, Tensor* x);
// MUL_MAT_ID (ggml_mul_mat_id), the expert matmul of a mixture of experts:
// experts w [K, M, n_expert] (one matrix each, rows contiguous), x f32
// [K, n_x, T] with n_used a multiple of n_x (n_x 1: every slot of token t
// reads its one row), ids i32 [n_used, T] -> f32 [M, n_used, T]:
//   dst[:, s, t] = w[:, :, ids[s, t]] times x[:, s % n_x, t].
// An id outside [0, n_expert) is an Error when the node is computed.
Tensor* mul_mat_id(Graph& g, Tensor* w, Tensor* x, Tensor* ids);
// ADD_ID (ggml_add_id): a f32 [ne0, ne1, ne2], b f32 [ne0, n] (bias rows),
// ids i32 [ne1, ne2] -> f32, a's shape: dst[:, i1, i2] = a[:, i1, i2] + b[:, ids[i1, i2]].
// An id outside [0, n) is an Error when the node is computed.
Tensor* add_id(Graph& g, Tensor* a, Tensor* b, Tensor* ids);

// ---- attention -------------------------------------------------------------------
// a [head_dim, n_head, n_tokens, ne3] f32 or f16 (any strides), pos i32
// [n_tokens]; optional freq_factors f32 [>= n_dims / 2] divide the per-pair
// frequencies. Normal mode rotates pairs (2i, 2i+1), NeoX pairs (i, i + n_dims/2);
// dims from n_dims on are copied. Result: a's type and shape. Params: p
// (RopeParams), read back with RopeParams::get.
Tensor* rope(Graph& g, Tensor* a, Tensor* pos, Tensor* freq_factors, const RopeParams& p);
// Per row: softmax(a * scale + slope * mask); a f32, mask (f32 or f16, nullable)
// [ne0, >= ne1] broadcast over dims 2 and 3 (row i1 of a takes mask row i1);
// slope from ALiBi over heads = dim 2 when max_bias > 0 (needs a mask), else 1.
// Result f32, a's shape. Params: SoftMaxParams.
Tensor* soft_max(Graph& g, Tensor* a, Tensor* mask, float scale, float max_bias);
// Sets a[i, j] = -inf where i > n_past + j (causal mask in place of a copy).
// a f32; result f32, a's shape. Params: DiagMaskInfParams.
Tensor* diag_mask_inf(Graph& g, Tensor* a, int n_past);
// Fused attention with online softmax. q [D, n_q, H, B] f32; k [D, n_kv, H_kv, B_kv]
// and v [Dv, n_kv, H_kv, B_kv] f32, f16, bf16 or a quantized type (H a multiple of
// H_kv: grouped-query; B a multiple of B_kv); mask f16/f32 [n_kv, >= n_q, m2, m3]
// (nullable, broadcast over dims 2 and 3) times the ALiBi slope, added to the
// scaled scores; softcap > 0 applies softcap * tanh(s / softcap) before the mask.
// Result f32 [Dv, H, n_q, B] (heads before queries, as ggml's).
// Params: FlashAttnExtParams.
Tensor* flash_attn_ext(Graph& g, Tensor* q, Tensor* k, Tensor* v, Tensor* mask, float scale,
                       float max_bias = 0.0f, float softcap = 0.0f);
// Attention sinks (ggml_flash_attn_ext_add_sinks, gpt-oss): one learned logit
// per query head, sinks f32 [H], joins each row's softmax denominator and no
// value: out = sum_j e^(s_j - m) v_j / (sum_j e^(s_j - m) + e^(sink_h - m)).
// Sets src[4] of a FLASH_ATTN_EXT node; returns it.
Tensor* flash_attn_ext_add_sinks(Tensor* attn, Tensor* sinks);

// ---- the rest of the op set --------------------------------------------------------
// a and b of one plain type, equal except in `dim`: joined along it. Params: ConcatParams.
Tensor* concat(Graph& g, Tensor* a, Tensor* b, int dim);
Tensor* repeat(Graph& g, Tensor* a, Tensor* shape_of);  // tile a to shape_of's shape
// a with b added into the view (nb1, nb2, nb3 bytes, offset bytes) of a; result
// a's shape. a contiguous f32, b f32; the view's rows must lie inside a and not
// overlap (each stride fits in i32). Params: AccParams.
Tensor* acc(Graph& g, Tensor* a, Tensor* b, size_t nb1, size_t nb2, size_t nb3, size_t offset);
// Zeros at the end of each dim; any plain type. Params: PadParams (after only).
Tensor* pad(Graph& g, Tensor* a, int p0, int p1, int p2, int p3);
// f32 [ceil((stop - start) / step)]: start + i * step. Params: ArangeParams.
Tensor* arange(Graph& g, float start, float stop, float step);
// timesteps f32 [N] -> f32 [dim + dim % 2, N]: cos(t f_j) then sin(t f_j),
// f_j = max_period^(-j / (dim / 2)); a last odd column is 0.
// Params: TimestepEmbeddingParams.
Tensor* timestep_embedding(Graph& g, Tensor* timesteps, int dim, int max_period);
Tensor* sum_rows(Graph& g, Tensor* a);  // f32 [1, ne1, ne2, ne3]
// i32 indices per row of a f32 a, a's shape; ties keep index order. Params: ArgsortParams.
Tensor* argsort(Graph& g, Tensor* a, SortOrder order);
// im2col of a [IW, IH, IC, N] for kernel k [KW, KH, IC, OC] (1-D when !is_2d:
// a [IW, IC, N], k [KW, IC, OC]); a f32 or f16, out_type f32 or f16. Result
// [IC*KH*KW, OW, OH, N] (1-D: [IC*KW, OW, N]), zeros where the window leaves a.
// Params: Im2ColParams.
Tensor* im2col(Graph& g, Tensor* k, Tensor* a, int s0, int s1, int p0, int p1, int d0, int d1,
               bool is_2d, DType out_type);
// a [W, H, C, N] (f32, f16 or bf16) -> f32 [OW, OH, C, N] with
// OW = (W + 2 p0 - k0) / s0 + 1, OH likewise; padding is skipped by max and
// counted as zeros by avg (which divides by k0 * k1).
// Params: Pool2dParams.
Tensor* pool_2d(Graph& g, Tensor* a, PoolOp op, int k0, int k1, int s0, int s1, int p0, int p1);
// Nearest: dst[i] = a[floor(i / (ne / a.ne))] per dim (the ratio in f32, as
// ggml); a's type (f32, f16 or bf16). Params: UpscaleParams (nearest).
Tensor* upscale(Graph& g, Tensor* a, int ne0, int ne1, int ne2, int ne3);

}  // namespace tessera::ops
