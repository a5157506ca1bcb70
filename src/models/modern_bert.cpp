// modern-bert (ModernBERT, granite-embedding R2, gte-modernbert): an encoder
// of pre-norm blocks. The token embeddings LayerNormed (no bias); per block
// a LayerNorm (none in block 0), q/k/v as one projection without biases,
// NeoX RoPE, attention over the whole sequence in global blocks and over a
// window of n_swa / 2 positions either side in local ones (every block but
// 0, 3, 6, ...: llama.cpp's symmetric window, dense first, period 3), each
// kind with its own RoPE base; the input added back, a LayerNorm, a GEGLU
// FFN (the gate the first n_ff rows of ffn_up) or SwiGLU where
// `hidden_activation` says silu, added back; a final LayerNorm.
#include "declare.h"
#include "keys.h"
#include "layers.h"
#include "tessera/core/error.h"

namespace tessera {
namespace {

constexpr int64_t kSwaPeriod = 3;  // llama.cpp's default sliding_window_pattern for it

void read_hparams(const gguf::File& file, Hparams& hp) {
  const models::KeyReader r(file, hp.architecture);
  hp.rope_mode = ops::RopeMode::kNeox;
  hp.n_swa = r.uint("attention.sliding_window").value_or(0);
  r.check_range("attention.sliding_window", hp.n_swa, 0, int64_t{1} << 24);
  if (hp.n_swa > 0) {
    hp.swa_symmetric = true;
    models::read_swa_pattern(r, hp, kSwaPeriod, /*dense_first=*/true);
    hp.rope_freq_base_swa = r.real("rope.freq_base_swa").value_or(hp.rope_freq_base);
    if (hp.rope_freq_base_swa <= 0) {
      r.bad("rope.freq_base_swa", fmt::format("{}", hp.rope_freq_base_swa), "> 0");
    }
    hp.rope_freq_scale_swa = 1.0f;
  }
  // As llama.cpp: silu, swish or swiglu gate with SiLU (Granite Embedding
  // R2); relu and reglu (ReGLU) are not built here; anything else is GEGLU.
  const std::string act = r.string("hidden_activation").value_or("gelu");
  if (act == "relu" || act == "reglu") {
    fail(ErrorCategory::kUnsupported, "[model {}] key '{}' found '{}': ReGLU feed-forwards are not supported",
         r.file_name(), r.key("hidden_activation"), act);
  }
  hp.ffn_silu = act == "silu" || act == "swish" || act == "swiglu";
}

void declare_tensors(TensorLoader& t, const Hparams& hp, Weights& w) {
  w.token_embd = t.take("token_embd.weight", {hp.n_embd, hp.n_vocab});
  w.token_embd_norm = t.take("token_embd_norm.weight", {hp.n_embd});
  w.output_norm = t.take("output_norm.weight", {hp.n_embd});
  for (int64_t il = 0; il < hp.n_layer; ++il) {
    LayerWeights& l = w.layers.emplace_back();
    l.attn_norm = t.layer(il, "attn_norm", {hp.n_embd}, il != 0);  // block 0: none
    l.wqkv = t.layer(il, "attn_qkv", {hp.n_embd, hp.n_embd_q() + 2 * hp.n_embd_kv()});
    l.wo = t.layer(il, "attn_output", {hp.n_embd_q(), hp.n_embd});
    l.ffn_norm = t.layer(il, "ffn_norm", {hp.n_embd});
    l.ffn_up = t.layer(il, "ffn_up", {hp.n_embd, 2 * hp.n_ff});
    l.ffn_down = t.layer(il, "ffn_down", {hp.n_ff, hp.n_embd});
  }
}

Tensor* build_graph(Graph& g, const Model& model, const GraphInputs& in) {
  const Hparams& hp = model.hparams();
  const Weights& w = model.weights();
  layers::require_encoder_use(model, in);
  Tensor* x = layers::layer_norm(g, layers::embed(g, model, in), w.token_embd_norm, nullptr, hp.norm_eps);
  for (const size_t il : layers::held_layers(model)) {
    const LayerWeights& l = model.layers()[il];
    Tensor* h = l.attn_norm != nullptr ? layers::layer_norm(g, x, l.attn_norm, nullptr, hp.norm_eps) : x;
    auto [q, k, v] = layers::project_qkv(g, hp, l, h);
    const ops::RopeParams rope = layers::rope_params(hp, static_cast<int64_t>(il));
    q = ops::rope(g, q, in.positions, nullptr, rope);
    k = ops::rope(g, k, in.positions, nullptr, rope);
    Tensor* attn = layers::attention(g, hp, in, il, q, k, v, hp.kq_scale());
    Tensor* ffn_in = ops::add(g, layers::project(g, l.wo, attn, nullptr), x);
    Tensor* n = layers::layer_norm(g, ffn_in, l.ffn_norm, nullptr, hp.norm_eps);
    Tensor* f = hp.ffn_silu ? layers::swiglu_ffn(g, n, nullptr, l.ffn_up, l.ffn_down)
                            : layers::geglu_ffn(g, n, nullptr, l.ffn_up, l.ffn_down);
    x = ops::add(g, f, ffn_in);
  }
  x = layers::layer_norm(g, x, w.output_norm, nullptr, hp.norm_eps);
  return layers::encoder_output(g, in, x);
}

}  // namespace

extern const Architecture kModernBertArchitecture{
    .name = "modern-bert",
    .read_hparams = read_hparams,
    .declare_tensors = declare_tensors,
    .build_graph = build_graph,
};

}  // namespace tessera
