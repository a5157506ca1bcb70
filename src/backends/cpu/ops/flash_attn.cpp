// FLASH_ATTN_EXT: for each query row, one pass over the keys with an online
// softmax (running max M and sum S; earlier terms rescaled by exp(M_old - M)).
// Grouped-query heads read KV head h / (H / H_kv); batches likewise. Scores:
// s = q.k * scale, then softcap * tanh(s / softcap) when softcap > 0, plus
// slope * mask. K/V rows of any type read_row can convert. Cost per query row:
// n_kv * (D + Dv) multiply-adds plus one K and one V row conversion per key.
#include <algorithm>
#include <cmath>
#include <limits>

#include "backends/cpu/ops/attention.h"
#include "backends/cpu/ops/rows.h"

namespace tessera::cpu {
namespace {

bool supports(const Tensor& node) {
  const Tensor& q = *node.src[0];
  const Tensor& k = *node.src[1];
  const Tensor& v = *node.src[2];
  const Tensor* mask = node.src[3];
  const bool types =
      writable_rows(node) && is_float_type(q.type) && readable_rows(k) && readable_rows(v);
  const bool shapes = k.ne[0] == q.ne[0] && v.ne[1] == k.ne[1] && v.ne[2] == k.ne[2] &&
                      v.ne[3] == k.ne[3] && k.ne[2] >= 1 && k.ne[3] >= 1 &&
                      q.ne[2] % k.ne[2] == 0 && q.ne[3] % k.ne[3] == 0 && node.ne[0] == v.ne[0] &&
                      node.ne[1] == q.ne[2] && node.ne[2] == q.ne[1] && node.ne[3] == q.ne[3];
  const bool mask_ok =
      mask == nullptr || (is_float_type(mask->type) && mask->ne[0] == k.ne[1] &&
                          mask->ne[1] >= q.ne[1] && mask->ne[2] >= 1 && mask->ne[3] >= 1 &&
                          q.ne[2] % mask->ne[2] == 0 && q.ne[3] % mask->ne[3] == 0);
  return types && shapes && mask_ok && node.param_f32(2) >= 0.0f;
}

constexpr int kRows = 6;  // q, k, v, mask, accumulator, output

int64_t row_len(const Tensor& node) {
  return std::max({node.src[0]->ne[0], node.src[2]->ne[0], node.src[1]->ne[1]});
}

size_t work_size(const Tensor& node, int nth) {
  return row_work_size(nth, kRows, row_len(node));
}

void compute(Tensor& node, const OpContext& ctx) {
  const Tensor& q = *node.src[0];
  const Tensor& k = *node.src[1];
  const Tensor& v = *node.src[2];
  const Tensor* mask = node.src[3];
  const float max_bias = node.param_f32(1);
  const float softcap = node.param_f32(2);
  // With a softcap the scale folds into tanh's argument: softcap * tanh(q.k * scale / softcap).
  const float scale = softcap > 0.0f ? node.param_f32(0) / softcap : node.param_f32(0);
  const int64_t d = q.ne[0], dv = v.ne[0], n_kv = k.ne[1];
  const int64_t group = q.ne[2] / k.ne[2], batch_group = q.ne[3] / k.ne[3];
  const int64_t len = row_len(node);
  float* sq = thread_row(ctx, kRows, 0, len);
  float* sk = thread_row(ctx, kRows, 1, len);
  float* sv = thread_row(ctx, kRows, 2, len);
  float* sm = thread_row(ctx, kRows, 3, len);
  float* acc = thread_row(ctx, kRows, 4, len);
  float* sd = thread_row(ctx, kRows, 5, len);
  const Range r = split_rows(node.n_rows(), ctx.ith, ctx.nth);
  for (int64_t row = r.begin; row < r.end; ++row) {
    const RowIndex o = row_index(node, row);  // (head, query, batch)
    const int64_t h = o.i1, iq = o.i2, b = o.i3;
    const int64_t hk = h / group, bk = b / batch_group;
    const float* qr = read_row(q, iq, h, b, sq);
    const float* mr = mask ? read_row(*mask, iq, h % mask->ne[2], b % mask->ne[3], sm) : nullptr;
    const float slope = alibi_slope(max_bias, h, q.ne[2]);
    float m = -std::numeric_limits<float>::infinity();
    float sum = 0.0f;
    std::fill(acc, acc + dv, 0.0f);
    for (int64_t ic = 0; ic < n_kv; ++ic) {
      const float bias = mr ? slope * mr[ic] : 0.0f;
      if (bias == -std::numeric_limits<float>::infinity()) continue;
      const float* kr = read_row(k, ic, hk, bk, sk);
      float s = 0.0f;
      for (int64_t j = 0; j < d; ++j) s += qr[j] * kr[j];
      s *= scale;
      if (softcap > 0.0f) s = softcap * std::tanh(s);
      s += bias;
      // Rescale what is accumulated when the max grows, else weight this key.
      float weight = 1.0f;
      if (s > m) {
        const float shrink = std::exp(m - s);
        for (int64_t j = 0; j < dv; ++j) acc[j] *= shrink;
        sum *= shrink;
        m = s;
      } else {
        weight = std::exp(s - m);
      }
      const float* vr = read_row(v, ic, hk, bk, sv);
      for (int64_t j = 0; j < dv; ++j) acc[j] += weight * vr[j];
      sum += weight;
    }
    const float inv = sum == 0.0f ? 0.0f : 1.0f / sum;  // every key masked: zeros
    float* out = row_out(node, o, sd);
    for (int64_t j = 0; j < dv; ++j) out[j] = acc[j] * inv;
    write_row(node, o, out);
  }
}

}  // namespace

extern const OpImpl kFlashAttnExtOp{supports, work_size, compute};

}  // namespace tessera::cpu
