// qwen2moe (Qwen1.5-MoE-A2.7B, Qwen2-57B-A14B): qwen2's attention (q, k, v
// biases, NeoX RoPE) with a mixture of experts in every block: a softmax
// router over expert_count experts, the top expert_used_count per token with
// their softmax weights as they are (not renormalised), experts of
// expert_feed_forward_length rows; beside them a shared expert of
// expert_shared_feed_forward_length rows (else feed_forward_length) whose
// output is gated per token by sigmoid(ffn_gate_inp_shexp x).
#include "declare.h"
#include "layers.h"
#include "tessera/core/error.h"

namespace tessera {
namespace {

void read_hparams(const gguf::File& file, Hparams& hp) {
  hp.rope_mode = ops::RopeMode::kNeox;
  models::require_experts(file, hp);
  hp.expert_gating = Hparams::ExpertGating::kSoftmax;
  hp.expert_weights_norm = false;
  if (hp.n_ff_exp == 0) hp.n_ff_exp = hp.n_ff / hp.n_expert_used;  // llama.cpp's defaults
  if (hp.n_ff_shexp == 0) hp.n_ff_shexp = hp.n_ff;
}

void declare_tensors(TensorLoader& t, const Hparams& hp, Weights& w) {
  models::declare_io(t, hp, w);
  for (int64_t il = 0; il < hp.n_layer; ++il) {
    LayerWeights& l = w.layers.emplace_back();
    models::declare_attention(t, hp, il, l);
    models::declare_qkv_biases(t, hp, il, l);
    models::declare_moe_ffn(t, hp, il, l);
  }
}

}  // namespace

extern const Architecture kQwen2MoeArchitecture{
    .name = "qwen2moe",
    .read_hparams = read_hparams,
    .declare_tensors = declare_tensors,
    .build_graph = layers::prenorm_decoder,
};

}  // namespace tessera
