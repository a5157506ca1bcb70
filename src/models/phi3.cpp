// phi3 (Phi-3, Phi-3.5, Phi-4): a pre-norm decoder whose q, k and v come from
// one fused projection (attn_qkv: q rows, then k, then v) and whose FFN is
// one fused projection too (ffn_up of 2 n_ff rows: silu(first half) times the
// second), NeoX RoPE, and LongRoPE's frequency factors when the file has
// them (rope_factors_long/short, with rope.scaling.attn_factor). llama.cpp
// turns Phi-3's sliding window off (its converters do not describe it
// faithfully); so does this file: attention.sliding_window is not read.
#include "declare.h"
#include "layers.h"

namespace tessera {
namespace {

void read_hparams(const gguf::File&, Hparams& hp) {
  hp.rope_mode = ops::RopeMode::kNeox;
}

void declare_tensors(TensorLoader& t, const Hparams& hp, Weights& w) {
  models::declare_io(t, hp, w, /*output_required=*/true);
  w.rope_long = t.take("rope_factors_long.weight", {hp.n_rot / 2}, /*required=*/false);
  w.rope_short = t.take("rope_factors_short.weight", {hp.n_rot / 2}, /*required=*/false);
  for (int64_t il = 0; il < hp.n_layer; ++il) {
    LayerWeights& l = w.layers.emplace_back();
    l.attn_norm = t.layer(il, "attn_norm", {hp.n_embd});
    l.wqkv = t.layer(il, "attn_qkv", {hp.n_embd, hp.n_embd_q() + 2 * hp.n_embd_kv()});
    l.wo = t.layer(il, "attn_output", {hp.n_embd_q(), hp.n_embd});
    l.ffn_norm = t.layer(il, "ffn_norm", {hp.n_embd});
    l.ffn_up = t.layer(il, "ffn_up", {hp.n_embd, 2 * hp.n_ff});
    l.ffn_down = t.layer(il, "ffn_down", {hp.n_ff, hp.n_embd});
  }
}

Tensor* build_graph(Graph& g, const Model& model, const GraphInputs& in) {
  const Hparams& hp = model.hparams();
  Tensor* x = layers::input(g, model, in);  // [n_embd, n_tokens]
  for (const size_t il : layers::held_layers(model)) {
    const LayerWeights& l = model.layers()[il];
    Tensor* h = layers::rms_norm(g, x, l.attn_norm, hp.norm_rms_eps);
    x = ops::add(g, x, layers::self_attention(g, model, in, il, h));
    Tensor* f = layers::rms_norm(g, x, l.ffn_norm, hp.norm_rms_eps);
    x = ops::add(g, x, layers::swiglu_ffn(g, f, nullptr, l.ffn_up, l.ffn_down));
  }
  return layers::output(g, model, in, x);
}

}  // namespace

extern const Architecture kPhi3Architecture{
    .name = "phi3",
    .read_hparams = read_hparams,
    .declare_tensors = declare_tensors,
    .build_graph = build_graph,
};

}  // namespace tessera
