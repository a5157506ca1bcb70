// llama (Llama 1-3, Mistral, TinyLlama, ...): embeddings, n_layer blocks of
// RMSNorm -> grouped-query attention with RoPE over the shared KV cache ->
// RMSNorm -> SwiGLU FFN, each with a residual, then the output norm and head.
// With expert_count > 0 (Mixtral) every FFN is a mixture of experts: a
// softmax router, the top expert_used_count, their weights divided by their
// sum, experts of feed_forward_length rows (llama.cpp reads no expert length
// for llama).
// Llama 3's rope scaling comes as the rope_freqs tensor; linear and YaRN
// scaling as rope.scaling.* keys (read for every architecture, hparams.cpp).
#include "declare.h"
#include "layers.h"

namespace tessera {
namespace {

void read_hparams(const gguf::File&, Hparams& hp) {
  // llama's converter lays q/k out for adjacent-pair (normal) RoPE: the default mode.
  hp.expert_gating = Hparams::ExpertGating::kSoftmax;
  hp.expert_weights_norm = true;  // as llama.cpp's llama graph asks of its MoE FFN
  hp.n_ff_exp = hp.n_ff;          // llama.cpp sizes llama's experts by feed_forward_length alone
}

void declare_tensors(TensorLoader& t, const Hparams& hp, Weights& w) {
  models::declare_io(t, hp, w);
  w.rope_freqs = t.take("rope_freqs.weight", {hp.n_rot / 2}, /*required=*/false);
  for (int64_t il = 0; il < hp.n_layer; ++il) {
    LayerWeights& l = w.layers.emplace_back();
    models::declare_attention(t, hp, il, l);
    if (hp.n_expert > 0) {
      models::declare_moe_ffn(t, hp, il, l);
    } else {
      models::declare_gated_ffn(t, hp, il, l);
    }
  }
}

}  // namespace

extern const Architecture kLlamaArchitecture{
    .name = "llama",
    .read_hparams = read_hparams,
    .declare_tensors = declare_tensors,
    .build_graph = layers::prenorm_decoder,
};

}  // namespace tessera
