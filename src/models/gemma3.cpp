// gemma3 (Gemma 3 text): embeddings scaled by sqrt(n_embd); per layer
// RMSNorm -> attention with per-head q/k RMS norms and NeoX RoPE -> RMSNorm
// (post_attention_norm) -> residual, then RMSNorm -> GELU-gated FFN ->
// RMSNorm (post_ffw_norm) -> residual. Norm weights are used as stored
// (llama.cpp's converter already wrote 1 + w). Layers alternate between a
// sliding window (attention.sliding_window; 5 local layers, then 1 global)
// with RoPE base rope.freq_base_swa, and global attention with
// rope.freq_base and the rope.scaling.* factor. The output is tied to
// token_embd when the file has no output.weight.
#include <cmath>

#include "declare.h"
#include "keys.h"
#include "layers.h"
#include "tessera/core/error.h"

namespace tessera {
namespace {

constexpr int64_t kSwaPeriod = 6;  // llama.cpp's set_swa_pattern(6) for gemma3
constexpr float kSwaFreqBase = 10000.0f;

// Which layers slide: attention.sliding_window_pattern when the file has one
// (a period, or one boolean per layer), else llama.cpp's default period:
// layer il is global when (il + 1) % 6 == 0.
void read_hparams(const gguf::File& file, Hparams& hp) {
  const models::KeyReader r(file, hp.architecture);
  hp.rope_mode = ops::RopeMode::kNeox;
  hp.n_swa = r.uint("attention.sliding_window").value_or(0);
  r.check_range("attention.sliding_window", hp.n_swa, 0, int64_t{1} << 24);
  if (hp.n_swa > 0) {
    models::read_swa_pattern(r, hp, kSwaPeriod, /*dense_first=*/false);
    hp.rope_freq_base_swa = r.real("rope.freq_base_swa").value_or(kSwaFreqBase);
    if (hp.rope_freq_base_swa <= 0) {
      r.bad("rope.freq_base_swa", fmt::format("{}", hp.rope_freq_base_swa), "> 0");
    }
    hp.rope_freq_scale_swa = 1.0f;
  }
  hp.final_logit_softcap = r.real("final_logit_softcapping").value_or(0.0f);
  if (hp.final_logit_softcap < 0) {
    r.bad("final_logit_softcapping", fmt::format("{}", hp.final_logit_softcap), ">= 0");
  }
  // Gemma 3 27B (62 layers) scales queries by n_embd / n_head, the others by
  // the head size (gemma_pytorch's query_pre_attn_scalar, as llama.cpp).
  const int64_t scalar = hp.n_layer == 62 ? hp.n_embd / hp.n_head : hp.head_dim;
  hp.attn_scale = 1.0f / std::sqrt(static_cast<float>(scalar));
}

void declare_tensors(TensorLoader& t, const Hparams& hp, Weights& w) {
  models::declare_io(t, hp, w);
  for (int64_t il = 0; il < hp.n_layer; ++il) {
    LayerWeights& l = w.layers.emplace_back();
    models::declare_attention(t, hp, il, l);
    l.attn_q_norm = t.layer(il, "attn_q_norm", {hp.head_dim});
    l.attn_k_norm = t.layer(il, "attn_k_norm", {hp.head_dim});
    l.attn_post_norm = t.layer(il, "post_attention_norm", {hp.n_embd});
    models::declare_gated_ffn(t, hp, il, l);
    l.ffn_post_norm = t.layer(il, "post_ffw_norm", {hp.n_embd});
  }
}

Tensor* build_graph(Graph& g, const Model& model, const GraphInputs& in) {
  const Hparams& hp = model.hparams();
  const float eps = hp.norm_rms_eps;
  Tensor* x = layers::input(g, model, in,
                           std::sqrt(static_cast<float>(hp.n_embd)));  // [n_embd, n_tokens]
  for (const size_t il : layers::held_layers(model)) {
    const LayerWeights& l = model.layers()[il];
    Tensor* h = layers::rms_norm(g, x, l.attn_norm, eps);
    h = layers::self_attention(g, model, in, il, h);
    x = ops::add(g, x, layers::rms_norm(g, h, l.attn_post_norm, eps));
    Tensor* f = layers::rms_norm(g, x, l.ffn_norm, eps);
    f = layers::geglu_ffn(g, f, l.ffn_gate, l.ffn_up, l.ffn_down);
    x = ops::add(g, x, layers::rms_norm(g, f, l.ffn_post_norm, eps));
  }
  return layers::output(g, model, in, x);
}

}  // namespace

extern const Architecture kGemma3Architecture{
    .name = "gemma3",
    .read_hparams = read_hparams,
    .declare_tensors = declare_tensors,
    .build_graph = build_graph,
};

}  // namespace tessera
