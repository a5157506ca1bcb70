#include "layers.h"

#include <cmath>

#include "tessera/core/dtype.h"
#include "tessera/core/error.h"

namespace tessera::layers {

ops::RopeParams rope_params(const Hparams& hp, int64_t il) {
  const bool swa = hp.is_swa(il);
  ops::RopeParams rope;
  rope.n_dims = static_cast<int32_t>(hp.n_rot);
  rope.mode = hp.rope_mode;
  rope.n_ctx_orig = static_cast<int32_t>(hp.n_ctx_orig > 0 ? hp.n_ctx_orig : hp.n_ctx_train);
  rope.freq_base = swa ? hp.rope_freq_base_swa : hp.rope_freq_base;
  rope.freq_scale = swa ? hp.rope_freq_scale_swa : hp.rope_freq_scale;
  rope.ext_factor = hp.rope_ext_factor;
  rope.attn_factor = hp.rope_attn_factor;
  rope.beta_fast = hp.rope_beta_fast;
  rope.beta_slow = hp.rope_beta_slow;
  return rope;
}

Tensor* rope_factors(const Hparams& hp, const LayerWeights& l, int64_t n_ctx) {
  if (l.rope_freqs != nullptr) return l.rope_freqs;
  const int64_t orig = hp.n_ctx_orig > 0 ? hp.n_ctx_orig : hp.n_ctx_train;
  return n_ctx > orig ? l.rope_long : l.rope_short;
}

Tensor* embed(Graph& g, const Model& model, const GraphInputs& in) {
  return ops::get_rows(g, model.token_embd(), in.tokens);
}

Tensor* input(Graph& g, const Model& model, const GraphInputs& in, float embd_scale) {
  if (!model.holds_input()) {
    TESSERA_CHECK(in.hidden != nullptr, "a pipeline stage after the first needs in.hidden");
    return in.hidden;
  }
  Tensor* x = embed(g, model, in);
  return embd_scale != 1.0f ? ops::scale(g, x, embd_scale) : x;
}

Tensor* output(Graph& g, const Model& model, const GraphInputs& in, Tensor* x) {
  if (model.holds_output()) return logits(g, model, in, x);
  x->flags |= kFlagOutput;
  x->name = "hidden_out";
  g.expand(x);
  return x;
}

Tensor* rms_norm(Graph& g, Tensor* x, Tensor* w, float eps) {
  return ops::mul(g, ops::rms_norm(g, x, eps), w);
}

void require_encoder_use(const Model& model, const GraphInputs& in) {
  const Hparams& hp = model.hparams();
  if (!in.embeddings) {
    fail(ErrorCategory::kUnsupported,
         "[model {}] {} is an encoder: it gives embeddings, not next-token logits (use `tessera "
         "embed`, the server's /v1/embeddings, or the Node package's embedding())",
         hp.name.empty() ? hp.architecture : hp.name, hp.architecture);
  }
  if (model.is_stage()) {
    fail(ErrorCategory::kUnsupported, "[model {}] an encoder cannot be split across ranks", hp.architecture);
  }
}

Tensor* encoder_output(Graph& g, const GraphInputs& in, Tensor* x) {
  Tensor* out = ops::get_rows(g, x, in.out_ids);  // [n_embd, n_out]
  out->flags |= kFlagOutput;
  out->name = "embeddings";
  g.expand(out);
  return out;
}

Tensor* layer_norm(Graph& g, Tensor* x, Tensor* w, Tensor* b, float eps) {
  Tensor* y = ops::mul(g, ops::norm(g, x, eps), w);
  return b != nullptr ? ops::add(g, y, b) : y;
}

Tensor* project(Graph& g, Tensor* w, Tensor* x, Tensor* b) {
  Tensor* y = ops::mul_mat(g, w, x);
  return b != nullptr ? ops::add(g, y, b) : y;
}

Qkv project_qkv(Graph& g, const Hparams& hp, const LayerWeights& l, Tensor* h) {
  const int64_t d = hp.head_dim, n = h->ne[1];
  if (l.wqkv != nullptr) {
    Tensor* qkv = ops::mul_mat(g, l.wqkv, h);  // [n_embd_q + 2 n_embd_kv, n]
    const size_t f = sizeof(float), row = qkv->nb[1];
    return {ops::view(g, qkv, {d, hp.n_head, n}, {d * f, row}, 0),
            ops::view(g, qkv, {d, hp.n_head_kv, n}, {d * f, row}, hp.n_embd_q() * f),
            ops::view(g, qkv, {d, hp.n_head_kv, n}, {d * f, row}, (hp.n_embd_q() + hp.n_embd_kv()) * f)};
  }
  return {ops::reshape(g, project(g, l.wq, h, l.bq), {d, hp.n_head, n}),
          ops::reshape(g, project(g, l.wk, h, l.bk), {d, hp.n_head_kv, n}),
          ops::reshape(g, project(g, l.wv, h, l.bv), {d, hp.n_head_kv, n})};
}

namespace {

// Rows [0, n_kv) of a cache [n_embd_kv, rows] (after `written`, the SET_ROWS
// that filled it) as [d, n_kv, n_head_kv].
Tensor* cache_rows(Graph& g, Tensor* written, int64_t d, int64_t n_head_kv, int64_t n_kv) {
  const size_t head = *row_bytes(written->type, d);
  return ops::view(g, written, {d, n_kv, n_head_kv}, {written->nb[1], head}, 0);
}

}  // namespace

Tensor* self_attention(Graph& g, const Model& model, const GraphInputs& in, size_t il, Tensor* h) {
  const Hparams& hp = model.hparams();
  const LayerWeights& l = model.layers()[il];
  const int64_t d = hp.head_dim;
  const int64_t n = in.n_tokens;
  auto [q, k, v] = project_qkv(g, hp, l, h);
  // q / k RMS norms per head ([head_dim] weights: qwen3) or over the whole
  // projection ([n_embd_q] / [n_embd_kv]: OLMoE), before RoPE.
  const auto norm_qk = [&](Tensor* x, Tensor* w, int64_t heads) {
    if (w == nullptr) return x;
    if (w->ne[0] == d) return rms_norm(g, x, w, hp.norm_rms_eps);
    Tensor* flat = ops::reshape(g, x->is_contiguous() ? x : ops::cont(g, x), {d * heads, n});
    return ops::reshape(g, rms_norm(g, flat, w, hp.norm_rms_eps), {d, heads, n});
  };
  q = norm_qk(q, l.attn_q_norm, hp.n_head);
  k = norm_qk(k, l.attn_k_norm, hp.n_head_kv);
  const ops::RopeParams rope = rope_params(hp, static_cast<int64_t>(il));
  Tensor* factors = rope_factors(hp, l, in.n_ctx);
  q = ops::rope(g, q, in.positions, factors, rope);
  k = ops::rope(g, k, in.positions, factors, rope);
  Tensor* attn = attention(g, hp, in, il, q, k, v, hp.kq_scale(), l.attn_sinks);
  return project(g, l.wo, attn, l.bo);
}

Tensor* attention(Graph& g, const Hparams& hp, const GraphInputs& in, size_t il, Tensor* q,
                  Tensor* k, Tensor* v, float kq_scale, Tensor* sinks) {
  const int64_t d = hp.head_dim;
  const int64_t n = in.n_tokens;
  Tensor* kc = in.cache_k[il];
  Tensor* vc = in.cache_v[il];
  if (!v->is_contiguous()) v = ops::cont(g, v);  // a view of a fused projection
  // The rows land where kv_idx says; the graph's shape does not depend on it.
  Tensor* k_written = ops::set_rows(g, kc, ops::reshape(g, k, {hp.n_embd_kv(), n}), in.kv_idx);
  Tensor* v_written = ops::set_rows(g, vc, ops::reshape(g, v, {hp.n_embd_kv(), n}), in.kv_idx);
  Tensor* keys = cache_rows(g, k_written, d, hp.n_head_kv, in.n_kv);
  Tensor* values = cache_rows(g, v_written, d, hp.n_head_kv, in.n_kv);
  const bool swa = hp.is_swa(static_cast<int64_t>(il));
  TESSERA_CHECK(!swa || in.mask_swa != nullptr, "layer {} is sliding-window but no mask_swa", il);
  Tensor* attn = ops::flash_attn_ext(g, ops::permute(g, q, 0, 2, 1, 3), keys, values,
                                     swa ? in.mask_swa : in.mask, kq_scale,
                                     hp.max_alibi_bias);  // [d, n_head, n_tokens]
  if (sinks != nullptr) ops::flash_attn_ext_add_sinks(attn, sinks);
  return ops::reshape(g, attn, {hp.n_embd_q(), n});
}

namespace {

using GluFn = Tensor* (*)(Graph&, Tensor*, Tensor*);

// down(act(g) * u): g = gate x and u = up x, or [g; u] = up x when gate is
// null (up holds the gate's rows, then its own).
Tensor* glu_ffn(Graph& g, Tensor* x, Tensor* gate, Tensor* up, Tensor* down, GluFn glu) {
  if (gate != nullptr) {
    return ops::mul_mat(g, down, glu(g, ops::mul_mat(g, gate, x), ops::mul_mat(g, up, x)));
  }
  Tensor* both = ops::mul_mat(g, up, x);  // [2 n_ff, n_tokens]
  const int64_t n_ff = both->ne[0] / 2;
  const size_t row = both->nb[1];
  Tensor* gv = ops::view(g, both, {n_ff, both->ne[1]}, {row}, 0);
  Tensor* uv = ops::view(g, both, {n_ff, both->ne[1]}, {row}, n_ff * sizeof(float));
  return ops::mul_mat(g, down, glu(g, gv, uv));
}

}  // namespace

Tensor* swiglu_ffn(Graph& g, Tensor* x, Tensor* gate, Tensor* up, Tensor* down) {
  return glu_ffn(g, x, gate, up, down, ops::swiglu);
}

Tensor* geglu_ffn(Graph& g, Tensor* x, Tensor* gate, Tensor* up, Tensor* down) {
  return glu_ffn(g, x, gate, up, down, ops::geglu);
}

Tensor* moe_ffn(Graph& g, const Hparams& hp, const LayerWeights& l, Tensor* x) {
  const int64_t n_tokens = x->ne[1], n_used = hp.n_expert_used;
  // The router: a probability per expert and token, the top n_used picked.
  Tensor* logits = ops::mul_mat(g, l.ffn_gate_inp, x);  // [n_expert, n_tokens]
  if (l.ffn_gate_inp_b != nullptr) logits = ops::add(g, logits, l.ffn_gate_inp_b);
  Tensor* probs = logits;
  if (hp.expert_gating == Hparams::ExpertGating::kSoftmax) {
    probs = ops::soft_max(g, logits, nullptr, 1.0f, 0.0f);
  } else if (hp.expert_gating == Hparams::ExpertGating::kSigmoid) {
    probs = ops::sigmoid(g, logits);
  }
  Tensor* order = ops::argsort(g, probs, ops::SortOrder::kDescending);
  Tensor* picked = ops::view(g, order, {n_used, n_tokens}, {order->nb[1]}, 0);  // [n_used, n_tokens]
  Tensor* weights = ops::get_rows(g, ops::reshape(g, probs, {1, hp.n_expert, n_tokens}), picked);
  if (hp.expert_gating == Hparams::ExpertGating::kSoftmaxWeight) {
    weights = ops::reshape(g, ops::soft_max(g, ops::reshape(g, weights, {n_used, n_tokens}), nullptr, 1.0f, 0.0f),
                           {1, n_used, n_tokens});
  }
  if (hp.expert_weights_norm) {
    // Divided by their sum, floored at f16's smallest normal (as llama.cpp).
    Tensor* w2 = ops::reshape(g, weights, {n_used, n_tokens});
    Tensor* sum = ops::clamp(g, ops::sum_rows(g, w2), 6.103515625e-5f, INFINITY);
    weights = ops::reshape(g, ops::div(g, w2, sum), {1, n_used, n_tokens});
  }
  if (hp.expert_weights_scale != 1.0f) weights = ops::scale(g, weights, hp.expert_weights_scale);

  // The picked experts' FFNs, weighted and summed.
  Tensor* x3 = ops::reshape(g, x, {hp.n_embd, 1, n_tokens});
  // An expert's bias row (gpt-oss) is picked by the same ids (ADD_ID).
  const auto biased = [&](Tensor* y, Tensor* b) { return b != nullptr ? ops::add_id(g, y, b, picked) : y; };
  Tensor* up = biased(ops::mul_mat_id(g, l.ffn_up_exps, x3, picked), l.ffn_up_exps_b);  // [n_ff_exp, n_used, n_tokens]
  Tensor* gate = biased(ops::mul_mat_id(g, l.ffn_gate_exps, x3, picked), l.ffn_gate_exps_b);
  Tensor* act = hp.expert_activation == Hparams::ExpertActivation::kSwigluOai
                    ? ops::swiglu_oai(g, gate, up, 1.702f, 7.0f)
                    : ops::swiglu(g, gate, up);
  Tensor* experts = biased(ops::mul_mat_id(g, l.ffn_down_exps, act, picked), l.ffn_down_exps_b);
  experts = ops::mul(g, experts, weights);  // [n_embd, n_used, n_tokens]
  Tensor* out = nullptr;
  for (int64_t i = 0; i < n_used; ++i) {
    Tensor* e = ops::view(g, experts, {hp.n_embd, n_tokens}, {experts->nb[2]}, static_cast<size_t>(i) * experts->nb[1]);
    out = out == nullptr ? e : ops::add(g, out, e);
  }
  if (n_used == 1) out = ops::cont(g, out);

  if (l.ffn_up_shexp != nullptr) {  // the shared expert, gated by a sigmoid per token
    Tensor* shared = swiglu_ffn(g, x, l.ffn_gate_shexp, l.ffn_up_shexp, l.ffn_down_shexp);
    if (l.ffn_gate_inp_shexp != nullptr) {
      shared = ops::mul(g, shared, ops::sigmoid(g, ops::mul_mat(g, l.ffn_gate_inp_shexp, x)));
    }
    out = ops::add(g, out, shared);
  }
  return out;
}

Tensor* ffn(Graph& g, const Hparams& hp, const LayerWeights& l, Tensor* x) {
  if (l.ffn_gate_inp != nullptr) return moe_ffn(g, hp, l, x);
  return swiglu_ffn(g, x, l.ffn_gate, l.ffn_up, l.ffn_down);
}

Tensor* logits(Graph& g, const Model& model, const GraphInputs& in, Tensor* x) {
  const Hparams& hp = model.hparams();
  // Only the rows asked for: project n_out columns, not n_tokens.
  x = ops::get_rows(g, x, in.out_ids);
  x = rms_norm(g, x, model.output_norm(), hp.norm_rms_eps);
  Tensor* out = in.embeddings ? x : ops::mul_mat(g, model.output(), x);
  if (const float c = hp.final_logit_softcap; c > 0.0f && !in.embeddings) {
    out = ops::scale(g, ops::unary(g, ops::scale(g, out, 1.0f / c), UnaryOp::kTanh), c);
  }
  out->flags |= kFlagOutput;
  out->name = "logits";
  g.expand(out);
  return out;
}

Tensor* prenorm_decoder(Graph& g, const Model& model, const GraphInputs& in) {
  const Hparams& hp = model.hparams();
  Tensor* x = input(g, model, in);  // [n_embd, n_tokens]
  for (const size_t il : held_layers(model)) {
    const LayerWeights& l = model.layers()[il];
    Tensor* h = rms_norm(g, x, l.attn_norm, hp.norm_rms_eps);
    x = ops::add(g, x, self_attention(g, model, in, il, h));
    Tensor* f = rms_norm(g, x, l.ffn_norm, hp.norm_rms_eps);
    x = ops::add(g, x, ffn(g, hp, l, f));
  }
  return output(g, model, in, x);
}

void k_shift(Graph& g, const Model& model, std::span<Tensor* const> cache_k, Tensor* shift,
             Tensor* all_rows, int64_t n_ctx) {
  const Hparams& hp = model.hparams();
  const int64_t d = hp.head_dim;
  for (size_t il = 0; il < cache_k.size(); ++il) {
    Tensor* kc = cache_k[il];
    if (kc == nullptr) continue;  // another pipeline stage's layer
    const int64_t rows = kc->ne[1];
    const size_t head = *row_bytes(kc->type, d);
    // [d, n_head_kv, rows]: RoPE's (head dim, heads, tokens) over the cache.
    Tensor* keys = ops::view(g, kc, {d, hp.n_head_kv, rows}, {head, kc->nb[1]}, 0);
    Tensor* in = keys;
    if (kc->type != DType::kF32 && kc->type != DType::kF16) {
      // RoPE reads f32 or f16: other types are gathered into f32 rows first,
      // a node whose memory is reused once the layer is done.
      in = ops::reshape(g, ops::get_rows(g, kc, all_rows), {d, hp.n_head_kv, rows});
    }
    const LayerWeights& l = model.layers()[il];
    // A pure rotation: the keys already carry the magnitude (attn_factor,
    // YaRN's 1 + 0.1 ln s) that RoPE gave them, so this one cancels it.
    ops::RopeParams rope = rope_params(hp, static_cast<int64_t>(il));
    rope.attn_factor =
        rope.ext_factor != 0.0f ? 1.0f / (1.0f + 0.1f * std::log(1.0f / rope.freq_scale)) : 1.0f;
    Tensor* rotated = ops::rope(g, in, shift, rope_factors(hp, l, n_ctx), rope);
    g.expand(ops::cpy(g, rotated, keys));
  }
}

}  // namespace tessera::layers
