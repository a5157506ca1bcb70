// qwen3 (dense Qwen3): Llama's pre-norm decoder with per-head RMS norms of q
// and k before RoPE (attn_q_norm, attn_k_norm), no projection biases, NeoX
// RoPE, and a head size from attention.key_length that need not be
// n_embd / n_head. The output is tied to token_embd when absent.
// Qwen3-Reranker files (pooling_type 4, rank) carry cls.output: the
// lm_head rows of their labels ("yes", "no"), scored on the last token.
#include "declare.h"
#include "keys.h"
#include "layers.h"

namespace tessera {
namespace {

void read_hparams(const gguf::File& file, Hparams& hp) {
  hp.rope_mode = ops::RopeMode::kNeox;
  models::read_cls_labels(file, hp);
}

void declare_tensors(TensorLoader& t, const Hparams& hp, Weights& w) {
  models::declare_io(t, hp, w);
  w.cls_out = t.take("cls.output.weight", {hp.n_embd, hp.n_cls_out}, false);
  w.cls_out_b = t.take("cls.output.bias", {hp.n_cls_out}, false);
  for (int64_t il = 0; il < hp.n_layer; ++il) {
    LayerWeights& l = w.layers.emplace_back();
    models::declare_attention(t, hp, il, l);
    l.attn_q_norm = t.layer(il, "attn_q_norm", {hp.head_dim});
    l.attn_k_norm = t.layer(il, "attn_k_norm", {hp.head_dim});
    models::declare_gated_ffn(t, hp, il, l);
  }
}

}  // namespace

extern const Architecture kQwen3Architecture{
    .name = "qwen3",
    .read_hparams = read_hparams,
    .declare_tensors = declare_tensors,
    .build_graph = layers::prenorm_decoder,
};

}  // namespace tessera
