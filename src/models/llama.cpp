// The Llama forward graph: embeddings, n_layer blocks of RMSNorm -> GQA
// attention with RoPE and an f16 KV cache -> RMSNorm -> SwiGLU FFN, each with
// a residual, then the output norm and head.
#include <cmath>

#include "tessera/engine.h"
#include "tessera/ops.h"

namespace tessera {

Tensor* build_llama(Graph& g, const Model& model, KvCache& cache, int64_t n_past,
                    int64_t n_tokens, bool all_logits, LlamaInputs* inputs) {
  const LlamaHparams& hp = model.hparams();
  const int64_t d = hp.head_dim;
  const int64_t n_kv = n_past + n_tokens;
  const size_t f16 = sizeof(uint16_t);

  Tensor* tokens = g.new_tensor(DType::kI32, {n_tokens}, "tokens");
  Tensor* pos = g.new_tensor(DType::kI32, {n_tokens}, "positions");
  Tensor* mask = g.new_tensor(DType::kF32, {n_kv, n_tokens}, "mask");
  for (Tensor* t : {tokens, pos, mask}) t->flags |= kFlagInput;
  *inputs = {tokens, pos, mask};

  ops::RopeParams rope;
  rope.n_dims = static_cast<int32_t>(hp.n_rot);
  rope.mode = ops::RopeMode::kNormal;  // llama's converter lays q/k out for adjacent pairs
  rope.n_ctx_orig = static_cast<int32_t>(hp.n_ctx_train);
  rope.freq_base = hp.rope_freq_base;
  rope.freq_scale = hp.rope_freq_scale;
  const float kq_scale = 1.0f / std::sqrt(static_cast<float>(d));

  Tensor* x = ops::get_rows(g, model.token_embd(), tokens);  // [n_embd, n_tokens]
  for (size_t il = 0; il < model.layers().size(); ++il) {
    const LayerWeights& l = model.layers()[il];
    Tensor* h = ops::mul(g, ops::rms_norm(g, x, hp.norm_rms_eps), l.attn_norm);

    Tensor* q = ops::reshape(g, ops::mul_mat(g, l.wq, h), {d, hp.n_head, n_tokens});
    Tensor* k = ops::reshape(g, ops::mul_mat(g, l.wk, h), {d, hp.n_head_kv, n_tokens});
    Tensor* v = ops::reshape(g, ops::mul_mat(g, l.wv, h), {d, hp.n_head_kv, n_tokens});
    q = ops::rope(g, q, pos, model.rope_freqs(), rope);
    k = ops::rope(g, k, pos, model.rope_freqs(), rope);

    // Write this batch's K and V at positions n_past.. of the cache, before
    // the attention below reads it (expanded first, so it runs first).
    Tensor* kc = cache.k[il];
    Tensor* vc = cache.v[il];
    const size_t row = static_cast<size_t>(d) * f16;
    const size_t head = static_cast<size_t>(cache.n_ctx) * row;
    const size_t at = static_cast<size_t>(n_past) * row;
    g.expand(ops::cpy(g, ops::permute(g, k, 0, 2, 1, 3),
                      ops::view(g, kc, {d, n_tokens, hp.n_head_kv}, {row, head}, at)));
    g.expand(ops::cpy(g, ops::permute(g, v, 0, 2, 1, 3),
                      ops::view(g, vc, {d, n_tokens, hp.n_head_kv}, {row, head}, at)));

    Tensor* keys = ops::view(g, kc, {d, n_kv, hp.n_head_kv}, {row, head}, 0);
    Tensor* values = ops::view(g, vc, {d, n_kv, hp.n_head_kv}, {row, head}, 0);
    Tensor* attn = ops::flash_attn_ext(g, ops::permute(g, q, 0, 2, 1, 3), keys, values, mask,
                                       kq_scale);  // [d, n_head, n_tokens]
    attn = ops::reshape(g, attn, {hp.n_embd_q(), n_tokens});
    x = ops::add(g, x, ops::mul_mat(g, l.wo, attn));

    Tensor* f = ops::mul(g, ops::rms_norm(g, x, hp.norm_rms_eps), l.ffn_norm);
    Tensor* ff = ops::swiglu(g, ops::mul_mat(g, l.ffn_gate, f), ops::mul_mat(g, l.ffn_up, f));
    x = ops::add(g, x, ops::mul_mat(g, l.ffn_down, ff));
  }
  if (!all_logits && n_tokens > 1) {
    // Only the last token's logits: project one column, not n_tokens.
    x = ops::view(g, x, {hp.n_embd}, {}, static_cast<size_t>(n_tokens - 1) * x->nb[1]);
  }
  x = ops::mul(g, ops::rms_norm(g, x, hp.norm_rms_eps), model.output_norm());
  Tensor* logits = ops::mul_mat(g, model.output(), x);
  logits->flags |= kFlagOutput;
  logits->name = "logits";
  g.expand(logits);
  return logits;
}

}  // namespace tessera
