// Graph builders: each returns a new node computing one op, with its result
// shape and params set and its inputs checked. They compute nothing; a Stream
// does. Shapes follow ggml: ne[0] is the row (fastest) dimension.
#pragma once

#include <array>
#include <cstdint>

#include "tessera/graph.h"

namespace tessera::ops {

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
Tensor* dup(Graph& g, Tensor* a);
Tensor* cont(Graph& g, Tensor* a);  // contiguous copy of a (permuted) view

// ---- elementwise (b broadcast over a) ----------------------------------------------
Tensor* add(Graph& g, Tensor* a, Tensor* b);
Tensor* sub(Graph& g, Tensor* a, Tensor* b);
Tensor* mul(Graph& g, Tensor* a, Tensor* b);
Tensor* div(Graph& g, Tensor* a, Tensor* b);
Tensor* scale(Graph& g, Tensor* a, float s, float bias = 0.0f);  // s * a + bias
Tensor* sqr(Graph& g, Tensor* a);
Tensor* sqrt(Graph& g, Tensor* a);
Tensor* clamp(Graph& g, Tensor* a, float min, float max);
Tensor* unary(Graph& g, Tensor* a, UnaryOp op, float param = 0.0f);  // param: leaky slope
inline Tensor* silu(Graph& g, Tensor* a) { return unary(g, a, UnaryOp::kSilu); }
inline Tensor* gelu(Graph& g, Tensor* a) { return unary(g, a, UnaryOp::kGelu); }
inline Tensor* relu(Graph& g, Tensor* a) { return unary(g, a, UnaryOp::kRelu); }
Tensor* swiglu(Graph& g, Tensor* gate, Tensor* up);  // silu(gate) * up

// ---- normalization -----------------------------------------------------------
Tensor* norm(Graph& g, Tensor* a, float eps);      // per row: (x - mean) / sqrt(var + eps)
Tensor* rms_norm(Graph& g, Tensor* a, float eps);  // per row: x / sqrt(mean(x^2) + eps)

// ---- matmul ------------------------------------------------------------------------
// w [K, M, ne2, ne3] times x [K, N, ne2', ne3'] -> f32 [M, N, ne2', ne3'];
// w broadcast over dims 2 and 3 (ne2' a multiple of ne2, likewise ne3).
Tensor* mul_mat(Graph& g, Tensor* w, Tensor* x);

}  // namespace tessera::ops
