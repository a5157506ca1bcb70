// qwen2 (Qwen2, Qwen2.5): Llama's pre-norm decoder with biases on the q, k
// and v projections and NeoX RoPE (llama.cpp: LLAMA_ROPE_TYPE_NEOX). The
// output is tied to token_embd when the file has no output.weight.
#include "declare.h"
#include "layers.h"

namespace tessera {
namespace {

void read_hparams(const gguf::File&, Hparams& hp) {
  hp.rope_mode = ops::RopeMode::kNeox;
}

void declare_tensors(TensorLoader& t, const Hparams& hp, Weights& w) {
  models::declare_io(t, hp, w);
  for (int64_t il = 0; il < hp.n_layer; ++il) {
    LayerWeights& l = w.layers.emplace_back();
    models::declare_attention(t, hp, il, l);
    models::declare_qkv_biases(t, hp, il, l);
    models::declare_gated_ffn(t, hp, il, l);
  }
}

}  // namespace

extern const Architecture kQwen2Architecture{
    .name = "qwen2",
    .read_hparams = read_hparams,
    .declare_tensors = declare_tensors,
    .build_graph = layers::prenorm_decoder,
};

}  // namespace tessera
