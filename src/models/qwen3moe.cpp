// qwen3moe (Qwen3-30B-A3B, Qwen3-235B-A22B, Qwen3-Coder's MoE): qwen3's
// attention (per-head q/k RMS norms, NeoX RoPE, key_length heads) with a
// mixture of experts in every block: a softmax router over expert_count
// experts, the top expert_used_count per token with their weights divided by
// their sum (llama.cpp normalises them for this architecture whatever the
// keys say), each expert a SwiGLU FFN of expert_feed_forward_length rows.
#include "declare.h"
#include "layers.h"
#include "tessera/core/error.h"

namespace tessera {
namespace {

void read_hparams(const gguf::File& file, Hparams& hp) {
  hp.rope_mode = ops::RopeMode::kNeox;
  models::require_experts(file, hp);
  hp.expert_gating = Hparams::ExpertGating::kSoftmax;
  hp.expert_weights_norm = true;
  if (hp.n_ff_exp == 0) hp.n_ff_exp = hp.n_ff / hp.n_expert_used;  // llama.cpp's default
}

void declare_tensors(TensorLoader& t, const Hparams& hp, Weights& w) {
  models::declare_io(t, hp, w);
  for (int64_t il = 0; il < hp.n_layer; ++il) {
    LayerWeights& l = w.layers.emplace_back();
    models::declare_attention(t, hp, il, l);
    l.attn_q_norm = t.layer(il, "attn_q_norm", {hp.head_dim});
    l.attn_k_norm = t.layer(il, "attn_k_norm", {hp.head_dim});
    models::declare_moe_ffn(t, hp, il, l);
  }
}

}  // namespace

extern const Architecture kQwen3MoeArchitecture{
    .name = "qwen3moe",
    .read_hparams = read_hparams,
    .declare_tensors = declare_tensors,
    .build_graph = layers::prenorm_decoder,
};

}  // namespace tessera
