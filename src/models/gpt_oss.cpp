// gpt-oss (gpt-oss-20b, gpt-oss-120b; llama.cpp's OPENAI_MOE): a pre-norm
// decoder whose attention has biases on q, k, v and the output, a learned
// sink logit per head in the softmax (attn_sinks), NeoX RoPE with YaRN, and
// every other layer (0, 2, ...) attending over a sliding window of
// attention.sliding_window keys; the FFN norm is post_attention_norm. Every
// FFN is a mixture of experts: router logits with a bias, the top
// expert_used_count, a softmax over the picked logits alone, experts with
// biases (ADD_ID) and the clamped SwiGLU (SWIGLU_OAI, alpha 1.702, limit 7).
#include "declare.h"
#include "keys.h"
#include "layers.h"
#include "tessera/core/error.h"

namespace tessera {
namespace {

constexpr int64_t kSwaPeriod = 2;  // llama.cpp's set_swa_pattern(2): layers 0, 2, 4, ... slide

void read_hparams(const gguf::File& file, Hparams& hp) {
  const models::KeyReader r(file, hp.architecture);
  hp.rope_mode = ops::RopeMode::kNeox;
  models::require_experts(file, hp);
  hp.expert_gating = Hparams::ExpertGating::kSoftmaxWeight;
  hp.expert_weights_norm = false;
  hp.expert_activation = Hparams::ExpertActivation::kSwigluOai;
  hp.n_swa = r.uint("attention.sliding_window").value_or(0);
  r.check_range("attention.sliding_window", hp.n_swa, 0, int64_t{1} << 24);
  hp.swa_layers.assign(static_cast<size_t>(hp.n_layer), 0);
  if (hp.n_swa > 0) {
    for (int64_t il = 0; il < hp.n_layer; ++il) {
      hp.swa_layers[static_cast<size_t>(il)] = (il % kSwaPeriod) < kSwaPeriod - 1;
    }
  }
  // Sliding layers rotate as the others do (llama.cpp's defaults for them).
  hp.rope_freq_base_swa = hp.rope_freq_base;
  hp.rope_freq_scale_swa = hp.rope_freq_scale;
}

void declare_tensors(TensorLoader& t, const Hparams& hp, Weights& w) {
  models::declare_io(t, hp, w);
  for (int64_t il = 0; il < hp.n_layer; ++il) {
    LayerWeights& l = w.layers.emplace_back();
    models::declare_attention(t, hp, il, l);
    models::declare_qkv_biases(t, hp, il, l);
    l.bo = t.layer_bias(il, "attn_output", {hp.n_embd});
    l.attn_sinks = t.layer(il, "attn_sinks", {hp.n_head});
    l.ffn_norm = t.layer(il, "post_attention_norm", {hp.n_embd});
    l.ffn_gate_inp = t.layer(il, "ffn_gate_inp", {hp.n_embd, hp.n_expert});
    l.ffn_gate_inp_b = t.layer_bias(il, "ffn_gate_inp", {hp.n_expert});
    l.ffn_gate_exps = t.layer(il, "ffn_gate_exps", {hp.n_embd, hp.n_ff_exp, hp.n_expert});
    l.ffn_up_exps = t.layer(il, "ffn_up_exps", {hp.n_embd, hp.n_ff_exp, hp.n_expert});
    l.ffn_down_exps = t.layer(il, "ffn_down_exps", {hp.n_ff_exp, hp.n_embd, hp.n_expert});
    l.ffn_gate_exps_b = t.layer_bias(il, "ffn_gate_exps", {hp.n_ff_exp, hp.n_expert});
    l.ffn_up_exps_b = t.layer_bias(il, "ffn_up_exps", {hp.n_ff_exp, hp.n_expert});
    l.ffn_down_exps_b = t.layer_bias(il, "ffn_down_exps", {hp.n_embd, hp.n_expert});
  }
}

}  // namespace

extern const Architecture kGptOssArchitecture{
    .name = "gpt-oss",
    .read_hparams = read_hparams,
    .declare_tensors = declare_tensors,
    .build_graph = layers::prenorm_decoder,
};

}  // namespace tessera
