// llama (Llama 1-3, Mistral, TinyLlama, ...): embeddings, n_layer blocks of
// RMSNorm -> grouped-query attention with RoPE over the shared KV cache ->
// RMSNorm -> SwiGLU FFN, each with a residual, then the output norm and head.
#include <cmath>

#include "models/layers.h"

namespace tessera {
namespace {

void declare_tensors(TensorLoader& t, const Hparams& hp, Weights& w) {
  w.token_embd = t.take("token_embd.weight", {hp.n_embd, hp.n_vocab});
  w.output_norm = t.take("output_norm.weight", {hp.n_embd});
  w.output = t.take("output.weight", {hp.n_embd, hp.n_vocab}, /*required=*/false);
  w.rope_freqs = t.take("rope_freqs.weight", {hp.n_rot / 2}, /*required=*/false);
  for (int64_t i = 0; i < hp.n_layer; ++i) {
    LayerWeights l{};
    l.attn_norm = t.layer(i, "attn_norm", {hp.n_embd});
    l.wq = t.layer(i, "attn_q", {hp.n_embd, hp.n_embd_q()});
    l.wk = t.layer(i, "attn_k", {hp.n_embd, hp.n_embd_kv()});
    l.wv = t.layer(i, "attn_v", {hp.n_embd, hp.n_embd_kv()});
    l.wo = t.layer(i, "attn_output", {hp.n_embd_q(), hp.n_embd});
    l.ffn_norm = t.layer(i, "ffn_norm", {hp.n_embd});
    l.ffn_gate = t.layer(i, "ffn_gate", {hp.n_embd, hp.n_ff});
    l.ffn_up = t.layer(i, "ffn_up", {hp.n_embd, hp.n_ff});
    l.ffn_down = t.layer(i, "ffn_down", {hp.n_ff, hp.n_embd});
    w.layers.push_back(l);
  }
}

Tensor* build_graph(Graph& g, const Model& model, const GraphInputs& in) {
  const Hparams& hp = model.hparams();
  const int64_t d = hp.head_dim;
  const int64_t n = in.n_tokens;
  const ops::RopeParams rope = layers::rope_params(hp);
  const float kq_scale = 1.0f / std::sqrt(static_cast<float>(d));

  Tensor* x = ops::get_rows(g, model.token_embd(), in.tokens);  // [n_embd, n_tokens]
  for (size_t il = 0; il < model.layers().size(); ++il) {
    const LayerWeights& l = model.layers()[il];
    Tensor* h = layers::rms_norm(g, x, l.attn_norm, hp.norm_rms_eps);
    Tensor* q = ops::reshape(g, ops::mul_mat(g, l.wq, h), {d, hp.n_head, n});
    Tensor* k = ops::reshape(g, ops::mul_mat(g, l.wk, h), {d, hp.n_head_kv, n});
    Tensor* v = ops::reshape(g, ops::mul_mat(g, l.wv, h), {d, hp.n_head_kv, n});
    q = ops::rope(g, q, in.positions, l.rope_freqs, rope);
    k = ops::rope(g, k, in.positions, l.rope_freqs, rope);
    Tensor* attn = layers::attention(g, hp, in, il, q, k, v, kq_scale);
    x = ops::add(g, x, ops::mul_mat(g, l.wo, attn));

    Tensor* f = layers::rms_norm(g, x, l.ffn_norm, hp.norm_rms_eps);
    x = ops::add(g, x, layers::swiglu_ffn(g, f, l.ffn_gate, l.ffn_up, l.ffn_down));
  }
  return layers::logits(g, model, in, x);
}

}  // namespace

extern const Architecture kLlamaArchitecture{
    .name = "llama",
    .read_hparams = nullptr,  // llama's converter lays q/k out for adjacent-pair (normal) RoPE
    .declare_tensors = declare_tensors,
    .build_graph = build_graph,
};

}  // namespace tessera
