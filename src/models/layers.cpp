#include "models/layers.h"

#include "tessera/error.h"
#include "tessera/dtype.h"

namespace tessera::layers {

ops::RopeParams rope_params(const Hparams& hp) {
  ops::RopeParams rope;
  rope.n_dims = static_cast<int32_t>(hp.n_rot);
  rope.mode = hp.rope_mode;
  rope.n_ctx_orig = static_cast<int32_t>(hp.n_ctx_train);
  rope.freq_base = hp.rope_freq_base;
  rope.freq_scale = hp.rope_freq_scale;
  return rope;
}

Tensor* rms_norm(Graph& g, Tensor* x, Tensor* w, float eps) {
  return ops::mul(g, ops::rms_norm(g, x, eps), w);
}

namespace {

// Rows [0, n_kv) of a cache [n_embd_kv, rows] (after `written`, the SET_ROWS
// that filled it) as [d, n_kv, n_head_kv].
Tensor* cache_rows(Graph& g, Tensor* written, int64_t d, int64_t n_head_kv, int64_t n_kv) {
  const size_t head = *row_bytes(written->type, d);
  return ops::view(g, written, {d, n_kv, n_head_kv}, {written->nb[1], head}, 0);
}

}  // namespace

Tensor* attention(Graph& g, const Hparams& hp, const GraphInputs& in, size_t il, Tensor* q,
                  Tensor* k, Tensor* v, float kq_scale) {
  const int64_t d = hp.head_dim;
  const int64_t n = in.n_tokens;
  Tensor* kc = in.cache_k[il];
  Tensor* vc = in.cache_v[il];
  // The rows land where kv_idx says; the graph's shape does not depend on it.
  Tensor* k_written = ops::set_rows(g, kc, ops::reshape(g, k, {hp.n_embd_kv(), n}), in.kv_idx);
  Tensor* v_written = ops::set_rows(g, vc, ops::reshape(g, v, {hp.n_embd_kv(), n}), in.kv_idx);
  Tensor* keys = cache_rows(g, k_written, d, hp.n_head_kv, in.n_kv);
  Tensor* values = cache_rows(g, v_written, d, hp.n_head_kv, in.n_kv);
  Tensor* attn = ops::flash_attn_ext(g, ops::permute(g, q, 0, 2, 1, 3), keys, values, in.mask,
                                     kq_scale);  // [d, n_head, n_tokens]
  return ops::reshape(g, attn, {hp.n_embd_q(), n});
}

Tensor* swiglu_ffn(Graph& g, Tensor* x, Tensor* gate, Tensor* up, Tensor* down) {
  return ops::mul_mat(g, down, ops::swiglu(g, ops::mul_mat(g, gate, x), ops::mul_mat(g, up, x)));
}

Tensor* logits(Graph& g, const Model& model, const GraphInputs& in, Tensor* x) {
  const Hparams& hp = model.hparams();
  // Only the rows asked for: project n_out columns, not n_tokens.
  x = ops::get_rows(g, x, in.out_ids);
  x = rms_norm(g, x, model.output_norm(), hp.norm_rms_eps);
  Tensor* out = ops::mul_mat(g, model.output(), x);
  out->flags |= kFlagOutput;
  out->name = "logits";
  g.expand(out);
  return out;
}

void k_shift(Graph& g, const Model& model, std::span<Tensor* const> cache_k, Tensor* shift,
             Tensor* all_rows) {
  const Hparams& hp = model.hparams();
  const ops::RopeParams rope = rope_params(hp);
  const int64_t d = hp.head_dim;
  for (size_t il = 0; il < cache_k.size(); ++il) {
    Tensor* kc = cache_k[il];
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
    Tensor* rotated = ops::rope(g, in, shift, model.layers()[il].rope_freqs, rope);
    g.expand(ops::cpy(g, rotated, keys));
  }
}

}  // namespace tessera::layers
