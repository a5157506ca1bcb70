// llama (Llama 1-3, Mistral, TinyLlama, ...): embeddings, n_layer blocks of
// RMSNorm -> grouped-query attention with RoPE over the shared KV cache ->
// RMSNorm -> SwiGLU FFN, each with a residual, then the output norm and head.
// Llama 3's rope scaling comes as the rope_freqs tensor; linear and YaRN
// scaling as rope.scaling.* keys (read for every architecture, hparams.cpp).
#include "declare.h"
#include "layers.h"

namespace tessera {
namespace {

void declare_tensors(TensorLoader& t, const Hparams& hp, Weights& w) {
  models::declare_io(t, hp, w);
  w.rope_freqs = t.take("rope_freqs.weight", {hp.n_rot / 2}, /*required=*/false);
  for (int64_t il = 0; il < hp.n_layer; ++il) {
    LayerWeights& l = w.layers.emplace_back();
    models::declare_attention(t, hp, il, l);
    models::declare_gated_ffn(t, hp, il, l);
  }
}

}  // namespace

extern const Architecture kLlamaArchitecture{
    .name = "llama",
    .read_hparams = nullptr,  // llama's converter lays q/k out for adjacent-pair (normal) RoPE
    .declare_tensors = declare_tensors,
    .build_graph = layers::prenorm_decoder,
};

}  // namespace tessera
