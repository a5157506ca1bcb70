// Building blocks that architectures share: norms, attention over the shared
// KV cache, feed-forward variants, and the logits head. Each is a few graph
// ops; an architecture's file strings them together.
#pragma once

#include "tessera/model.h"
#include "tessera/ops.h"

namespace tessera::layers {

// RoPE parameters from the hyperparameters (mode, base, scaling).
ops::RopeParams rope_params(const Hparams& hp);

// x / rms(x) * w (w broadcast over rows).
Tensor* rms_norm(Graph& g, Tensor* x, Tensor* w, float eps);

// Self-attention of layer `il` over the cache: q [d, n_head, n_tokens] and
// k, v [d, n_head_kv, n_tokens] (already roped). Writes k and v into cache
// rows in.kv_idx (SET_ROWS), then attends over the first in.n_kv rows under
// in.mask. Returns [n_head * d, n_tokens].
Tensor* attention(Graph& g, const Hparams& hp, const GraphInputs& in, size_t il, Tensor* q,
                  Tensor* k, Tensor* v, float kq_scale);

// down(silu(gate x) * up x)
Tensor* swiglu_ffn(Graph& g, Tensor* x, Tensor* gate, Tensor* up, Tensor* down);

// The rows in.out_ids names of the final hidden state x [n_embd, n_tokens],
// normed and projected: logits [n_vocab, n_out], flagged as the output.
Tensor* logits(Graph& g, const Model& model, const GraphInputs& in, Tensor* x);

}  // namespace tessera::layers

namespace tessera::layers {

// Re-rotates every row of the cached keys by shift (i32 [rows]: the change
// of each row's position), for a sequence whose positions moved (seq_add).
// all_rows (i32 [rows], 0..rows-1) gathers quantized keys into f32 first.
// Expands the writes back into the cache onto `g`.
void k_shift(Graph& g, const Model& model, std::span<Tensor* const> cache_k, Tensor* shift,
             Tensor* all_rows);

}  // namespace tessera::layers
