// olmoe (OLMoE-1B-7B): llama's block with RMS norms of q and k over the
// whole projection (weights of n_embd_q and n_embd_kv, before the heads are
// split and RoPE'd, NeoX style), and a mixture of experts in every block: a
// softmax router over expert_count experts, the top expert_used_count per
// token weighted by their probabilities as they are (not renormalised), each
// expert a SwiGLU FFN of feed_forward_length rows (llama.cpp reads no
// expert_feed_forward_length for it).
#include "declare.h"
#include "layers.h"

namespace tessera {
namespace {

void read_hparams(const gguf::File& file, Hparams& hp) {
  hp.rope_mode = ops::RopeMode::kNeox;
  models::require_experts(file, hp);
  hp.expert_gating = Hparams::ExpertGating::kSoftmax;
  hp.expert_weights_norm = false;
  hp.n_ff_exp = hp.n_ff;
}

void declare_tensors(TensorLoader& t, const Hparams& hp, Weights& w) {
  models::declare_io(t, hp, w);
  for (int64_t il = 0; il < hp.n_layer; ++il) {
    LayerWeights& l = w.layers.emplace_back();
    models::declare_attention(t, hp, il, l);
    l.attn_q_norm = t.layer(il, "attn_q_norm", {hp.n_embd_q()});
    l.attn_k_norm = t.layer(il, "attn_k_norm", {hp.n_embd_kv()});
    models::declare_moe_ffn(t, hp, il, l);
  }
}

}  // namespace

extern const Architecture kOlmoeArchitecture{
    .name = "olmoe",
    .read_hparams = read_hparams,
    .declare_tensors = declare_tensors,
    .build_graph = layers::prenorm_decoder,
};

}  // namespace tessera
