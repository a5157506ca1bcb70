#include "declare.h"

namespace tessera::models {

void declare_io(TensorLoader& t, const Hparams& hp, Weights& w, bool output_required) {
  w.token_embd = t.take("token_embd.weight", {hp.n_embd, hp.n_vocab});
  w.output_norm = t.take("output_norm.weight", {hp.n_embd});
  w.output = t.take("output.weight", {hp.n_embd, hp.n_vocab}, output_required);
}

void declare_attention(TensorLoader& t, const Hparams& hp, int64_t il, LayerWeights& l) {
  l.attn_norm = t.layer(il, "attn_norm", {hp.n_embd});
  l.wq = t.layer(il, "attn_q", {hp.n_embd, hp.n_embd_q()});
  l.wk = t.layer(il, "attn_k", {hp.n_embd, hp.n_embd_kv()});
  l.wv = t.layer(il, "attn_v", {hp.n_embd, hp.n_embd_kv()});
  l.wo = t.layer(il, "attn_output", {hp.n_embd_q(), hp.n_embd});
}

void declare_gated_ffn(TensorLoader& t, const Hparams& hp, int64_t il, LayerWeights& l) {
  l.ffn_norm = t.layer(il, "ffn_norm", {hp.n_embd});
  l.ffn_gate = t.layer(il, "ffn_gate", {hp.n_embd, hp.n_ff});
  l.ffn_up = t.layer(il, "ffn_up", {hp.n_embd, hp.n_ff});
  l.ffn_down = t.layer(il, "ffn_down", {hp.n_ff, hp.n_embd});
}

}  // namespace tessera::models
