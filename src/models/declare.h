// Tensor declarations that architectures share, by llama.cpp's GGUF names:
// each architecture's declare_tensors combines these with its own extras.
#pragma once

#include "tessera/models/model.h"

namespace tessera::models {

// token_embd, output_norm and output; output is optional unless
// `output_required` (the model then ties it to token_embd).
void declare_io(TensorLoader& t, const Hparams& hp, Weights& w, bool output_required = false);

// attn_norm, attn_q, attn_k, attn_v and attn_output of layer il.
void declare_attention(TensorLoader& t, const Hparams& hp, int64_t il, LayerWeights& l);

// attn_q, attn_k and attn_v biases of layer il (qwen2, qwen2moe, gpt-oss).
void declare_qkv_biases(TensorLoader& t, const Hparams& hp, int64_t il, LayerWeights& l);

// Refuses a mixture-of-experts architecture's file without experts, naming the key.
void require_experts(const gguf::File& file, const Hparams& hp);

// ffn_norm, ffn_gate, ffn_up and ffn_down of layer il.
void declare_gated_ffn(TensorLoader& t, const Hparams& hp, int64_t il, LayerWeights& l);

// ffn_norm, the router ffn_gate_inp and the experts ffn_gate_exps,
// ffn_up_exps, ffn_down_exps of layer il; with hp.n_ff_shexp > 0 also the
// shared expert (ffn_gate_inp_shexp, ffn_gate_shexp, ffn_up_shexp, ffn_down_shexp).
void declare_moe_ffn(TensorLoader& t, const Hparams& hp, int64_t il, LayerWeights& l);

}  // namespace tessera::models
