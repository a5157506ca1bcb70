// bert (BERT-family encoders: bge, all-MiniLM, e5, ...): the sum of token,
// token type (row 0: "sentence A") and absolute position embeddings, then a
// LayerNorm; per block, attention over the whole sequence (no RoPE, biases on
// every projection), residual, LayerNorm, a GELU FFN with biases, residual,
// LayerNorm (post-norm). No output head: the graph gives the last hidden
// state of the rows asked for, which the serving core pools (mean, CLS, ...).
//
// nomic-bert (nomic-embed-text v1 / v1.5): the same blocks with NeoX RoPE
// instead of position embeddings, q/k/v as one fused projection, and a
// SwiGLU FFN (ffn_gate, ffn_up, ffn_down); biases where the file has them.
//
// jina-bert-v2 (jina-embeddings-v2): no positions but ALiBi (each head's
// slope times -|i - j| added to the scores, maximum bias 8), optional
// LayerNorms of q and k over the whole projection and a second attention
// LayerNorm (of its output plus the block's input again), and a GEGLU FFN:
// the gate fused into ffn_up's first n_ff rows, or apart in ffn_gate.
#include "declare.h"
#include "keys.h"
#include "layers.h"
#include "tessera/core/error.h"

namespace tessera {
namespace {

void read_hparams(const gguf::File& file, Hparams& hp) {
  models::read_cls_labels(file, hp);
  const gguf::Value* types = file.find("tokenizer.ggml.token_type_count");
  hp.n_token_types = types != nullptr && types->is_integer() ? static_cast<int64_t>(types->u32()) : 0;
  if (hp.n_token_types < 1 || hp.n_token_types > 16) {
    fail(ErrorCategory::kInvalidFile,
         "[model {}] key 'tokenizer.ggml.token_type_count' found {}, expected 1 to 16 token types",
         file.name(), types == nullptr ? std::string("nothing") : std::to_string(hp.n_token_types));
  }
}

void read_nomic_hparams(const gguf::File& file, Hparams& hp) {
  read_hparams(file, hp);
  hp.rope_mode = ops::RopeMode::kNeox;
}

// jina-bert-v2: ALiBi with llama.cpp's fixed maximum bias; its FFN is
// GEGLU with the gate fused into ffn_up (2 n_ff rows), GEGLU with a
// separate ffn_gate, or GELU, as the file's tensors say.
void read_jina_hparams(const gguf::File& file, Hparams& hp) {
  read_hparams(file, hp);
  hp.max_alibi_bias = 8.0f;
  const gguf::TensorInfo* up = file.find_tensor("blk.0.ffn_up.weight");
  hp.ffn_up_gated = up != nullptr && up->ne[1] == 2 * hp.n_ff && file.find_tensor("blk.0.ffn_gate.weight") == nullptr;
}

void declare_tensors(TensorLoader& t, const Hparams& hp, Weights& w) {
  const bool nomic = hp.architecture == "nomic-bert";
  const bool jina = hp.architecture == "jina-bert-v2";
  w.token_embd = t.take("token_embd.weight", {hp.n_embd, hp.n_vocab});
  w.token_types = t.take("token_types.weight", {hp.n_embd, hp.n_token_types}, false);
  if (!nomic && !jina) w.position_embd = t.take("position_embd.weight", {hp.n_embd, hp.n_ctx_train});
  w.token_embd_norm = t.take("token_embd_norm.weight", {hp.n_embd});
  w.token_embd_norm_b = t.take("token_embd_norm.bias", {hp.n_embd});
  // A reranker's classifier (rank pooling); embedding models have none.
  w.cls = t.take("cls.weight", {hp.n_embd, hp.n_embd}, false);
  w.cls_b = t.take("cls.bias", {hp.n_embd}, false);
  w.cls_out = t.take("cls.output.weight", {hp.n_embd, hp.n_cls_out}, false);
  w.cls_out_b = t.take("cls.output.bias", {hp.n_cls_out}, false);
  for (int64_t il = 0; il < hp.n_layer; ++il) {
    LayerWeights& l = w.layers.emplace_back();
    if (nomic) {  // one fused projection, q rows then k then v
      l.wqkv = t.layer(il, "attn_qkv", {hp.n_embd, hp.n_embd_q() + 2 * hp.n_embd_kv()});
    } else {
      l.wq = t.layer(il, "attn_q", {hp.n_embd, hp.n_embd_q()});
      l.wk = t.layer(il, "attn_k", {hp.n_embd, hp.n_embd_kv()});
      l.wv = t.layer(il, "attn_v", {hp.n_embd, hp.n_embd_kv()});
      models::declare_qkv_biases(t, hp, il, l);
    }
    if (jina) {  // LayerNorms of q and k over the whole projection
      l.attn_q_norm = t.layer(il, "attn_q_norm", {hp.n_embd_q()}, false);
      l.attn_q_norm_b = t.layer_bias(il, "attn_q_norm", {hp.n_embd_q()}, false);
      l.attn_k_norm = t.layer(il, "attn_k_norm", {hp.n_embd_kv()}, false);
      l.attn_k_norm_b = t.layer_bias(il, "attn_k_norm", {hp.n_embd_kv()}, false);
    }
    l.wo = t.layer(il, "attn_output", {hp.n_embd_q(), hp.n_embd});
    l.bo = t.layer_bias(il, "attn_output", {hp.n_embd}, false);
    l.attn_out_norm = t.layer(il, "attn_output_norm", {hp.n_embd});
    l.attn_out_norm_b = t.layer_bias(il, "attn_output_norm", {hp.n_embd});
    if (jina) {
      l.attn_norm_2 = t.layer(il, "attn_norm_2", {hp.n_embd}, false);
      l.attn_norm_2_b = t.layer_bias(il, "attn_norm_2", {hp.n_embd}, false);
    }
    if (nomic) l.ffn_gate = t.layer(il, "ffn_gate", {hp.n_embd, hp.n_ff});
    if (jina && !hp.ffn_up_gated) l.ffn_gate = t.layer(il, "ffn_gate", {hp.n_embd, hp.n_ff}, false);
    const int64_t n_up = hp.ffn_up_gated ? 2 * hp.n_ff : hp.n_ff;
    l.ffn_up = t.layer(il, "ffn_up", {hp.n_embd, n_up});
    l.ffn_up_b = t.layer_bias(il, "ffn_up", {n_up}, false);
    l.ffn_down = t.layer(il, "ffn_down", {hp.n_ff, hp.n_embd});
    l.ffn_down_b = t.layer_bias(il, "ffn_down", {hp.n_embd}, false);
    l.layer_out_norm = t.layer(il, "layer_output_norm", {hp.n_embd});
    l.layer_out_norm_b = t.layer_bias(il, "layer_output_norm", {hp.n_embd});
  }
}

// A LayerNorm over a projection's whole width ([d, heads, n] viewed as
// [d * heads, n]), back in its shape.
Tensor* whole_norm(Graph& g, Tensor* t, Tensor* w, Tensor* b, float eps) {
  Tensor* flat = ops::reshape(g, t->is_contiguous() ? t : ops::cont(g, t), {t->ne[0] * t->ne[1], t->ne[2]});
  return ops::reshape(g, layers::layer_norm(g, flat, w, b, eps), {t->ne[0], t->ne[1], t->ne[2]});
}

Tensor* build_graph(Graph& g, const Model& model, const GraphInputs& in) {
  const Hparams& hp = model.hparams();
  const Weights& w = model.weights();
  layers::require_encoder_use(model, in);
  Tensor* x = layers::embed(g, model, in);  // [n_embd, n_tokens]
  if (w.token_types != nullptr) {
    x = ops::add(g, x, ops::view(g, w.token_types, {hp.n_embd}, {}, 0));
  }
  if (w.position_embd != nullptr) x = ops::add(g, ops::get_rows(g, w.position_embd, in.positions), x);
  x = layers::layer_norm(g, x, w.token_embd_norm, w.token_embd_norm_b, hp.norm_eps);
  for (const size_t il : layers::held_layers(model)) {
    const LayerWeights& l = model.layers()[il];
    auto [q, k, v] = layers::project_qkv(g, hp, l, x);
    if (l.attn_q_norm != nullptr) q = whole_norm(g, q, l.attn_q_norm, l.attn_q_norm_b, hp.norm_eps);
    if (l.attn_k_norm != nullptr) k = whole_norm(g, k, l.attn_k_norm, l.attn_k_norm_b, hp.norm_eps);
    if (w.position_embd == nullptr && hp.max_alibi_bias <= 0.0f) {  // nomic-bert: positions by RoPE
      const ops::RopeParams rope = layers::rope_params(hp, static_cast<int64_t>(il));
      q = ops::rope(g, q, in.positions, nullptr, rope);
      k = ops::rope(g, k, in.positions, nullptr, rope);
    }
    Tensor* attn = layers::attention(g, hp, in, il, q, k, v, hp.kq_scale());
    Tensor* h = layers::layer_norm(g, ops::add(g, layers::project(g, l.wo, attn, l.bo), x), l.attn_out_norm,
                                   l.attn_out_norm_b, hp.norm_eps);
    if (l.attn_norm_2 != nullptr) {  // the block's input added again
      h = layers::layer_norm(g, ops::add(g, h, x), l.attn_norm_2, l.attn_norm_2_b, hp.norm_eps);
    }
    x = h;
    Tensor* f;
    // jina: ffn_up holds the gate's rows first where the file fused them or
    // the loader did (Model::fuse_projections, for a gate without an up bias).
    const bool up_gated = l.ffn_up->ne[1] == 2 * hp.n_ff;
    if (hp.architecture == "jina-bert-v2" && (up_gated || l.ffn_gate != nullptr)) {
      // GEGLU: gelu(gate) * up, the gate the first half of ffn_up's rows or ffn_gate's.
      Tensor* u = layers::project(g, l.ffn_up, x, l.ffn_up_b);
      Tensor* gate = nullptr;
      if (up_gated) {
        const size_t row = u->nb[1];
        gate = ops::view(g, u, {hp.n_ff, u->ne[1]}, {row}, 0);
        u = ops::view(g, u, {hp.n_ff, u->ne[1]}, {row}, static_cast<size_t>(hp.n_ff) * sizeof(float));
      } else {
        gate = layers::project(g, l.ffn_gate, x, nullptr);
      }
      f = layers::project(g, l.ffn_down, ops::geglu(g, gate, u), l.ffn_down_b);
    } else if (hp.architecture == "nomic-bert" && l.ffn_up_b == nullptr) {
      // SwiGLU; gate and up may have been fused at load (Model::fuse_projections).
      f = layers::swiglu_ffn(g, x, l.ffn_gate, l.ffn_up, l.ffn_down);
      if (l.ffn_down_b != nullptr) f = ops::add(g, f, l.ffn_down_b);
    } else if (l.ffn_gate != nullptr) {  // SwiGLU with an up bias (never fused)
      f = layers::project(g, l.ffn_down,
                  ops::swiglu(g, layers::project(g, l.ffn_gate, x, nullptr), layers::project(g, l.ffn_up, x, l.ffn_up_b)),
                  l.ffn_down_b);
    } else {
      f = layers::project(g, l.ffn_down, ops::unary(g, layers::project(g, l.ffn_up, x, l.ffn_up_b), UnaryOp::kGelu),
                  l.ffn_down_b);
    }
    x = layers::layer_norm(g, ops::add(g, f, x), l.layer_out_norm, l.layer_out_norm_b, hp.norm_eps);
  }
  return layers::encoder_output(g, in, x);
}

}  // namespace

extern const Architecture kBertArchitecture{
    .name = "bert",
    .read_hparams = read_hparams,
    .declare_tensors = declare_tensors,
    .build_graph = build_graph,
};

extern const Architecture kJinaBertV2Architecture{
    .name = "jina-bert-v2",
    .read_hparams = read_jina_hparams,
    .declare_tensors = declare_tensors,
    .build_graph = build_graph,
};

extern const Architecture kNomicBertArchitecture{
    .name = "nomic-bert",
    .read_hparams = read_nomic_hparams,
    .declare_tensors = declare_tensors,
    .build_graph = build_graph,
};

}  // namespace tessera
