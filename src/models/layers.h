// Building blocks that architectures share: embeddings, norms, attention over
// the shared KV cache, feed-forward variants, and the logits head. Each is a
// few graph ops; an architecture's file strings them together.
#pragma once

#include <cstddef>

#include "tessera/core/ops.h"
#include "tessera/models/model.h"

namespace tessera::layers {

// RoPE parameters of layer il (mode, base, scaling; sliding-window layers
// take their own base and scale).
ops::RopeParams rope_params(const Hparams& hp, int64_t il);

// The frequency factors layer l's RoPE reads (nullable): rope_freqs, else
// LongRoPE's long factors when the context exceeds n_ctx_orig (as llama.cpp
// picks them), else its short ones.
Tensor* rope_factors(const Hparams& hp, const LayerWeights& l, int64_t n_ctx);

// Token embeddings of in.tokens: [n_embd, n_tokens] f32.
Tensor* embed(Graph& g, const Model& model, const GraphInputs& in);

// The layers the model holds, for a builder's loop: every layer, or on a
// pipeline stage its layer_range().
// (A plain index range: clang 14, which the fuzz build uses, cannot
// instantiate libstdc++ 12's std::views::iota.)
struct IndexRange {
  struct iterator {
    size_t i;
    size_t operator*() const { return i; }
    iterator& operator++() {
      ++i;
      return *this;
    }
    bool operator!=(const iterator& o) const { return i != o.i; }
  };
  size_t first, last;
  iterator begin() const { return {first}; }
  iterator end() const { return {last}; }
};

inline IndexRange held_layers(const Model& model) {
  const LayerRange& r = model.layer_range();
  return {static_cast<size_t>(r.begin), static_cast<size_t>(r.end)};
}

// A graph's first hidden state [n_embd, n_tokens]: the token embeddings
// (scaled by embd_scale unless it is 1), or on a pipeline stage after the
// first the previous stage's output, in.hidden.
Tensor* input(Graph& g, const Model& model, const GraphInputs& in, float embd_scale = 1.0f);

// A graph's output: logits() on a whole model or the last stage; before the
// last stage, x itself ([n_embd, n_tokens], every row) flagged as the output.
Tensor* output(Graph& g, const Model& model, const GraphInputs& in, Tensor* x);

// An encoder's graph gives embeddings only, on one rank: anything else is
// Error(kUnsupported) saying so.
void require_encoder_use(const Model& model, const GraphInputs& in);
// An encoder's output: the rows asked for of its last states, flagged.
Tensor* encoder_output(Graph& g, const GraphInputs& in, Tensor* x);

// x / rms(x) * w (w broadcast over rows).
Tensor* rms_norm(Graph& g, Tensor* x, Tensor* w, float eps);
// LayerNorm: (x - mean(x)) / sqrt(var(x) + eps) * w + b, per row (b nullable).
Tensor* layer_norm(Graph& g, Tensor* x, Tensor* w, Tensor* b, float eps);

// w x, plus b when there is one.
Tensor* project(Graph& g, Tensor* w, Tensor* x, Tensor* b);

// q [d, n_head, n_tokens] and k, v [d, n_head_kv, n_tokens] of layer l from
// h: separate projections (with biases when present) or views of the fused
// wqkv's rows (q, then k, then v).
struct Qkv {
  Tensor *q, *k, *v;
};
Qkv project_qkv(Graph& g, const Hparams& hp, const LayerWeights& l, Tensor* h);

// Self-attention of layer `il` on the normed input h [n_embd, n_tokens]:
// q, k, v from separate (wq, wk, wv, with biases when present) or fused
// (wqkv) projections, per-head RMS norms of q and k when the layer has them,
// RoPE, attention over the cache (below) and the output projection wo.
// Returns [n_embd, n_tokens].
Tensor* self_attention(Graph& g, const Model& model, const GraphInputs& in, size_t il, Tensor* h);

// Attention of layer `il` over the cache: q [d, n_head, n_tokens] and
// k, v [d, n_head_kv, n_tokens] (already roped; v may be a strided view).
// Writes k and v into cache rows in.kv_idx (SET_ROWS), then attends over the
// first in.n_kv rows under in.mask (in.mask_swa on sliding-window layers).
// Returns [n_head * d, n_tokens].
// With sinks (f32 [n_head], gpt-oss) each head's sink logit joins the softmax.
Tensor* attention(Graph& g, const Hparams& hp, const GraphInputs& in, size_t il, Tensor* q,
                  Tensor* k, Tensor* v, float kq_scale, Tensor* sinks = nullptr);

// down(silu(gate x) * up x). With gate null, up is one projection of 2 n_ff
// rows, the gate's first (Phi-3's ffn_up, or fused at load:
// Model::fuse_projections): down(silu(g) * u) where [g; u] = up x.
Tensor* swiglu_ffn(Graph& g, Tensor* x, Tensor* gate, Tensor* up, Tensor* down);
// down(gelu(gate x) * up x), GELU in its tanh form; gate null as above.
Tensor* geglu_ffn(Graph& g, Tensor* x, Tensor* gate, Tensor* up, Tensor* down);

// The mixture-of-experts FFN of layer l on x [n_embd, n_tokens] (llama.cpp's
// build_moe_ffn): router logits ffn_gate_inp x, gated per hp.expert_gating,
// the top n_expert_used experts per token (ARGSORT), their weights gathered
// (GET_ROWS), normalised and scaled as hp says; then per token the SwiGLU FFN
// of each picked expert (MUL_MAT_ID), weighted and summed, plus the shared
// expert times sigmoid(ffn_gate_inp_shexp x) when the layer has one.
Tensor* moe_ffn(Graph& g, const Hparams& hp, const LayerWeights& l, Tensor* x);
// moe_ffn for a layer with a router, else swiglu_ffn of its dense FFN.
Tensor* ffn(Graph& g, const Hparams& hp, const LayerWeights& l, Tensor* x);

// The rows in.out_ids names of the final hidden state x [n_embd, n_tokens],
// normed and projected (then soft-capped when the model says so): logits
// [n_vocab, n_out], flagged as the output.
Tensor* logits(Graph& g, const Model& model, const GraphInputs& in, Tensor* x);

// The pre-norm decoder that Llama, Qwen2 and Qwen3 share: embeddings, then
// per layer x += self_attention(rms_norm(x)), x += ffn(rms_norm(x)),
// then the logits head. What differs between them (biases, q/k norms, RoPE
// mode) is in the weights and hyperparameters.
Tensor* prenorm_decoder(Graph& g, const Model& model, const GraphInputs& in);

// Re-rotates every row of the cached keys by shift (i32 [rows]: the change
// of each row's position), for a sequence whose positions moved (seq_add).
// all_rows (i32 [rows], 0..rows-1) gathers quantized keys into f32 first;
// n_ctx is the context's cells (LongRoPE's choice of factors). Expands the
// writes back into the cache onto `g`.
void k_shift(Graph& g, const Model& model, std::span<Tensor* const> cache_k, Tensor* shift,
             Tensor* all_rows, int64_t n_ctx);

}  // namespace tessera::layers
