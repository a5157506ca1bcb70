#include "declare.h"

#include "tessera/core/error.h"

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

void declare_qkv_biases(TensorLoader& t, const Hparams& hp, int64_t il, LayerWeights& l) {
  l.bq = t.layer_bias(il, "attn_q", {hp.n_embd_q()});
  l.bk = t.layer_bias(il, "attn_k", {hp.n_embd_kv()});
  l.bv = t.layer_bias(il, "attn_v", {hp.n_embd_kv()});
}

void require_experts(const gguf::File& file, const Hparams& hp) {
  if (hp.n_expert == 0) {
    fail(ErrorCategory::kInvalidFile, "[model {}] key '{}.expert_count' is missing or 0: a {} model has experts",
         file.name(), hp.architecture, hp.architecture);
  }
}

void declare_gated_ffn(TensorLoader& t, const Hparams& hp, int64_t il, LayerWeights& l) {
  l.ffn_norm = t.layer(il, "ffn_norm", {hp.n_embd});
  l.ffn_gate = t.layer(il, "ffn_gate", {hp.n_embd, hp.n_ff});
  l.ffn_up = t.layer(il, "ffn_up", {hp.n_embd, hp.n_ff});
  l.ffn_down = t.layer(il, "ffn_down", {hp.n_ff, hp.n_embd});
}

void declare_moe_ffn(TensorLoader& t, const Hparams& hp, int64_t il, LayerWeights& l) {
  l.ffn_norm = t.layer(il, "ffn_norm", {hp.n_embd});
  l.ffn_gate_inp = t.layer(il, "ffn_gate_inp", {hp.n_embd, hp.n_expert});
  l.ffn_gate_exps = t.layer(il, "ffn_gate_exps", {hp.n_embd, hp.n_ff_exp, hp.n_expert});
  l.ffn_up_exps = t.layer(il, "ffn_up_exps", {hp.n_embd, hp.n_ff_exp, hp.n_expert});
  l.ffn_down_exps = t.layer(il, "ffn_down_exps", {hp.n_ff_exp, hp.n_embd, hp.n_expert});
  if (hp.n_ff_shexp > 0) {
    l.ffn_gate_inp_shexp = t.layer(il, "ffn_gate_inp_shexp", {hp.n_embd});
    l.ffn_gate_shexp = t.layer(il, "ffn_gate_shexp", {hp.n_embd, hp.n_ff_shexp});
    l.ffn_up_shexp = t.layer(il, "ffn_up_shexp", {hp.n_embd, hp.n_ff_shexp});
    l.ffn_down_shexp = t.layer(il, "ffn_down_shexp", {hp.n_ff_shexp, hp.n_embd});
  }
}

}  // namespace tessera::models
