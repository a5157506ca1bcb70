// Attention: ROPE (normal and NeoX, partial dims, frequency factors, YaRN,
// f16, views) and FLASH_ATTN_EXT (grouped-query heads, masks, ALiBi, softcap,
// K/V in f32, f16, bf16, Q8_0 and Q4_0, permuted and cache-view inputs).
#include <cmath>
#include <limits>

#include "conformance/op_test.h"
#include "tessera/core/op_params.h"

namespace tessera::conformance {
namespace {

using Shape = std::array<int64_t, kMaxDims>;

// ---- naive references ------------------------------------------------------------------

double yarn_corr_dim(int n_dims, int n_ctx_orig, double n_rot, double base) {
  return n_dims * std::log(n_ctx_orig / (n_rot * 2.0 * M_PI)) / (2.0 * std::log(base));
}

std::vector<double> naive_rope(const Tensor& node, const HostValues& in) {
  const Tensor& a = *node.src[0];
  const Tensor& pos = *node.src[1];
  const Tensor* ff = node.src[2];
  const RopeParams p = RopeParams::get(node);
  const int64_t half = p.n_dims / 2;
  const bool neox = p.mode == ops::RopeMode::kNeox;
  const double low =
      std::max(0.0, std::floor(yarn_corr_dim(p.n_dims, p.n_ctx_orig, p.beta_fast, p.freq_base)));
  const double high = std::min<double>(
      p.n_dims - 1, std::ceil(yarn_corr_dim(p.n_dims, p.n_ctx_orig, p.beta_slow, p.freq_base)));
  std::vector<double> out;
  for_each_index({1, a.ne[1], a.ne[2], a.ne[3]}, [&](int64_t, int64_t i1, int64_t i2, int64_t i3) {
    std::vector<double> x(static_cast<size_t>(a.ne[0]));
    for (int64_t i0 = 0; i0 < a.ne[0]; ++i0) x[static_cast<size_t>(i0)] = in.at(a, i0, i1, i2, i3);
    std::vector<double> y = x;
    const double position = in.at(pos, i2, 0, 0, 0);
    for (int64_t k = 0; k < half; ++k) {
      const double factor = ff ? in.at(*ff, k, 0, 0, 0) : 1.0;
      const double extrap = position * std::pow(p.freq_base, -2.0 * k / p.n_dims) / factor;
      const double interp = p.freq_scale * extrap;
      double theta = interp, mscale = p.attn_factor;
      if (p.ext_factor != 0.0f) {
        const double ramp =
            (1.0 - std::clamp((k - low) / std::max(0.001, high - low), 0.0, 1.0)) * p.ext_factor;
        theta = interp * (1.0 - ramp) + extrap * ramp;
        mscale *= 1.0 + 0.1 * std::log(1.0 / p.freq_scale);
      }
      const size_t j0 = static_cast<size_t>(neox ? k : 2 * k);
      const size_t j1 = static_cast<size_t>(neox ? k + half : 2 * k + 1);
      const double c = std::cos(theta) * mscale, s = std::sin(theta) * mscale;
      y[j0] = x[j0] * c - x[j1] * s;
      y[j1] = x[j0] * s + x[j1] * c;
    }
    out.insert(out.end(), y.begin(), y.end());
  });
  return out;
}

// Plain softmax(q.k * scale [softcapped] + slope * mask) . v per query row, in
// double; with sinks (src[4]) head h's sink logit joins the denominator.
std::vector<double> naive_flash_attn(const Tensor& node, const HostValues& in) {
  const Tensor& q = *node.src[0];
  const Tensor& k = *node.src[1];
  const Tensor& v = *node.src[2];
  const Tensor* mask = node.src[3];
  const Tensor* sinks = node.src[4];
  const FlashAttnExtParams p = FlashAttnExtParams::get(node);
  const double scale = p.scale, max_bias = p.max_bias, softcap = p.softcap;
  const int64_t n_kv = k.ne[1], dv = v.ne[0];
  std::vector<double> out;
  // Output rows: (head, query, batch).
  for_each_index({1, node.ne[1], node.ne[2], node.ne[3]},
                 [&](int64_t, int64_t h, int64_t iq, int64_t b) {
                   const int64_t hk = h / (q.ne[2] / k.ne[2]), bk = b / (q.ne[3] / k.ne[3]);
                   std::vector<double> s(static_cast<size_t>(n_kv));
                   double max = -std::numeric_limits<double>::infinity();
                   for (int64_t ic = 0; ic < n_kv; ++ic) {
                     double dot = 0.0;
                     for (int64_t j = 0; j < q.ne[0]; ++j)
                       dot += in.at(q, j, iq, h, b) * in.at(k, j, ic, hk, bk);
                     double score = dot * scale;
                     if (softcap > 0.0) score = softcap * std::tanh(score / softcap);
                     if (mask) {
                       score += naive_alibi(max_bias, h, q.ne[2]) *
                                in.at(*mask, ic, iq, h % mask->ne[2], b % mask->ne[3]);
                     }
                     s[static_cast<size_t>(ic)] = score;
                     max = std::max(max, score);
                   }
                   const double sink = sinks ? in.at(*sinks, h, 0, 0, 0)
                                             : -std::numeric_limits<double>::infinity();
                   max = std::max(max, sink);
                   double sum = sinks ? std::exp(sink - max) : 0.0;
                   for (double& x : s) sum += (x = std::isinf(x) ? 0.0 : std::exp(x - max));
                   for (int64_t j = 0; j < dv; ++j) {
                     double acc = 0.0;
                     for (int64_t ic = 0; ic < n_kv; ++ic)
                       acc += s[static_cast<size_t>(ic)] * in.at(v, j, ic, hk, bk);
                     out.push_back(sum > 0.0 ? acc / sum : 0.0);
                   }
                 });
  return out;
}

// ---- cases ----------------------------------------------------------------------------

struct RopeCase {
  std::string name;
  DType type;
  Shape ne;  // [head_dim, heads, tokens, ne3]
  ops::RopeParams p;
  bool freq_factors;
};

std::vector<Case> rope_cases() {
  auto params = [](int n_dims, ops::RopeMode mode) {
    ops::RopeParams p;
    p.n_dims = n_dims;
    p.mode = mode;
    return p;
  };
  ops::RopeParams yarn = params(64, ops::RopeMode::kNeox);
  yarn.n_ctx_orig = 512;
  yarn.freq_scale = 0.25f;
  yarn.ext_factor = 1.0f;
  yarn.attn_factor = 0.9f;
  ops::RopeParams linear = params(32, ops::RopeMode::kNormal);
  linear.freq_base = 500000.0f;
  linear.freq_scale = 0.5f;
  const RopeCase shapes[] = {
      {"normal_full", DType::kF32, {64, 3, 5, 1}, params(64, ops::RopeMode::kNormal), false},
      {"neox_full", DType::kF32, {64, 3, 5, 1}, params(64, ops::RopeMode::kNeox), false},
      {"normal_partial", DType::kF32, {40, 2, 7, 2}, params(20, ops::RopeMode::kNormal), false},
      {"neox_partial", DType::kF32, {40, 2, 7, 1}, params(24, ops::RopeMode::kNeox), false},
      {"normal_freq_factors", DType::kF32, {32, 4, 3, 1}, params(32, ops::RopeMode::kNormal), true},
      {"neox_freq_factors_partial",
       DType::kF32,
       {48, 2, 3, 1},
       params(32, ops::RopeMode::kNeox),
       true},
      {"yarn_neox", DType::kF32, {64, 2, 6, 1}, yarn, false},
      {"linear_scaled_base", DType::kF32, {32, 3, 4, 1}, linear, false},
      {"f16_normal", DType::kF16, {32, 3, 5, 1}, params(32, ops::RopeMode::kNormal), false},
      {"f16_neox_partial", DType::kF16, {32, 3, 5, 1}, params(16, ops::RopeMode::kNeox), false},
      {"one_pair", DType::kF32, {2, 1, 1, 1}, params(2, ops::RopeMode::kNormal), false},
  };
  std::vector<Case> cases;
  for (const RopeCase& r : shapes) {
    cases.push_back({r.name, [r](CaseGraph& c) {
                       Tensor* a = c.input(r.type, {r.ne[0], r.ne[1], r.ne[2], r.ne[3]});
                       Tensor* pos = c.input(DType::kI32, {r.ne[2]}, integers(0, 300));
                       Tensor* ff = r.freq_factors ? c.input(DType::kF32, {r.p.n_dims / 2},
                                                             uniform(1.0f, 8.0f))
                                                   : nullptr;
                       return ops::rope(c.g(), a, pos, ff, r.p);
                     }});
  }
  // Q of a fused QKV projection: a view whose rows are heads of a wider row.
  cases.push_back(
      {"view_of_fused_qkv", [params](CaseGraph& c) {
         const int64_t d = 16, heads = 4, kv_heads = 2, tokens = 5;
         Tensor* qkv = c.input(DType::kF32, {d * (heads + 2 * kv_heads), tokens});
         Graph& g = c.g();
         Tensor* q = ops::view(g, qkv, {d, heads, tokens}, {d * sizeof(float), qkv->nb[1]}, 0);
         Tensor* pos = c.input(DType::kI32, {tokens}, integers(0, 300));
         return ops::rope(g, q, pos, nullptr, params(16, ops::RopeMode::kNeox));
       }});
  cases.push_back({"permuted_input", [params](CaseGraph& c) {
                     Tensor* a = permuted_input(c, DType::kF32, {32, 5, 3, 1}, {0, 2, 1, 3});
                     Tensor* pos = c.input(DType::kI32, {5}, integers(0, 300));
                     return ops::rope(c.g(), a, pos, nullptr, params(32, ops::RopeMode::kNormal));
                   }});
  return cases;
}

struct AttnCase {
  std::string name;
  int64_t d, dv, n_q, n_kv, heads, kv_heads, batch;
  DType kv_type;
  DType mask_type;                // kI32: no mask
  int64_t mask_rows, mask_heads;  // mask [n_kv, mask_rows, mask_heads, 1]
  float max_bias = 0.0f, softcap = 0.0f;
  bool sinks = false;  // a sink logit per head (gpt-oss)
};

std::vector<Case> flash_attn_cases() {
  const AttnCase shapes[] = {
      {"one_key", 16, 16, 1, 1, 1, 1, 1, DType::kF32, DType::kI32, 0, 1},
      {"gqa_f16_mask_f16", 40, 40, 7, 13, 4, 2, 1, DType::kF16, DType::kF16, 7, 1},
      {"mqa_f32_dv24_batch2", 32, 24, 5, 33, 6, 1, 2, DType::kF32, DType::kF32, 8, 1},
      {"bf16_kv", 32, 32, 3, 9, 2, 2, 1, DType::kBF16, DType::kF16, 3, 1},
      {"q8_0_kv", 64, 64, 4, 17, 4, 2, 1, DType::kQ8_0, DType::kF16, 4, 1},
      {"q4_0_kv", 32, 64, 2, 11, 2, 1, 1, DType::kQ4_0, DType::kI32, 0, 1},
      {"softcap", 24, 24, 5, 19, 2, 2, 1, DType::kF16, DType::kF16, 5, 1, 0.0f, 1.0f},
      {"alibi_6_heads", 16, 16, 4, 10, 6, 3, 1, DType::kF16, DType::kF16, 4, 1, 8.0f, 0.0f},
      {"per_head_mask", 16, 16, 3, 7, 4, 4, 2, DType::kF32, DType::kF32, 3, 4},
      {"decode_one_query", 64, 64, 1, 41, 8, 2, 1, DType::kF16, DType::kF16, 1, 1},
      // The SIMD tiers' grouped f16 path: tails in d and dv, no mask, per-head
      // f16 masks, groups of 5 (a 4-row block and a 1-row one), many keys.
      {"f16_dv24_batch2_no_mask", 20, 24, 5, 33, 6, 2, 2, DType::kF16, DType::kI32, 0, 1},
      {"f16_per_head_mask_f16", 8, 8, 3, 70, 10, 2, 1, DType::kF16, DType::kF16, 3, 10},
      {"f16_d8_long_context", 8, 8, 2, 301, 8, 4, 1, DType::kF16, DType::kF32, 2, 1},
      // Decode with one KV head: its keys split over the threads, then merged.
      {"f16_decode_split_keys", 32, 40, 1, 200, 3, 1, 1, DType::kF16, DType::kF32, 1, 1},
      {"f16_decode_split_no_mask", 16, 16, 1, 500, 2, 1, 1, DType::kF16, DType::kI32, 0, 1},
      // GQA groups of 8 (TinyLlama's 32 / 4): decode over more keys than a
      // V tile, keys split for one KV head, and 12 heads a KV head (8 + 4).
      {"f16_gqa8_decode", 64, 64, 1, 300, 16, 2, 1, DType::kF16, DType::kF32, 1, 1},
      {"f16_gqa8_decode_split_keys", 64, 64, 1, 261, 8, 1, 1, DType::kF16, DType::kF32, 1, 1},
      {"f16_gqa12_prefill", 64, 48, 5, 70, 12, 1, 1, DType::kF16, DType::kF16, 5, 1},
      // Real sizes: head dim 128, GQA 8:1, over 2048 keys (f16 and q8_0
      // caches); head dims past the GPU's tiles (256, as Gemma) and off a
      // multiple of 4.
      {"f16_d128_gqa8_decode_depth2100", 128, 128, 1, 2100, 32, 4, 1, DType::kF16, DType::kF16, 1, 1},
      {"q8_0_d128_gqa8_decode_depth2100", 128, 128, 1, 2100, 32, 4, 1, DType::kQ8_0, DType::kF16, 1, 1},
      {"f16_d256", 256, 256, 3, 40, 4, 1, 1, DType::kF16, DType::kF16, 3, 1},
      {"f16_d18", 18, 18, 3, 50, 4, 2, 1, DType::kF16, DType::kF16, 3, 1},
      // Sinks (gpt-oss: head dim 64, 8 heads a KV head): decode, decode with
      // keys split over threads, a prompt (the token path, not the tiles),
      // and f32 K/V on the reference path.
      {"sinks_f16_decode", 64, 64, 1, 90, 8, 1, 1, DType::kF16, DType::kF16, 1, 1, 0, 0, true},
      {"sinks_f16_decode_split_keys", 64, 64, 1, 400, 2, 1, 1, DType::kF16, DType::kF32, 1, 1, 0, 0, true},
      {"sinks_f16_prompt", 64, 64, 9, 40, 8, 2, 1, DType::kF16, DType::kF16, 9, 1, 0, 0, true},
      {"sinks_f32_kv", 32, 32, 3, 11, 4, 2, 1, DType::kF32, DType::kF32, 3, 1, 0, 0, true},
  };
  std::vector<Case> cases;
  for (const AttnCase& s : shapes) {
    cases.push_back(
        {s.name,
         [s](CaseGraph& c) {
           Tensor* q = c.input(DType::kF32, {s.d, s.n_q, s.heads, s.batch});
           Tensor* k = c.input(s.kv_type, {s.d, s.n_kv, s.kv_heads, 1});
           Tensor* v = c.input(s.kv_type, {s.dv, s.n_kv, s.kv_heads, 1});
           Tensor* mask = s.mask_type == DType::kI32
                              ? nullptr
                              : c.input(s.mask_type, {s.n_kv, s.mask_rows, s.mask_heads, 1},
                                        mask_values(s.n_kv));
           const float scale = 1.0f / std::sqrt(static_cast<float>(s.d));
           Tensor* attn = ops::flash_attn_ext(c.g(), q, k, v, mask, scale, s.max_bias, s.softcap);
           // Sinks around the scores' range: some rows dominated by theirs, some not.
           if (s.sinks) ops::flash_attn_ext_add_sinks(attn, c.input(DType::kF32, {s.heads}, uniform(-3.0f, 3.0f)));
           return attn;
         },
         kNmseMatMul});
  }
  // Prompts (several query tokens, f16 K/V): the SIMD tiers run blocks of
  // tokens times their GQA group in tiles of 32 keys. Blocks of 8 tokens (8
  // heads a KV head) and a short last block; a causal mask at depth with an
  // -inf tail (tiles skipped, tiles with mask 0, diagonal tiles); 21-token
  // blocks of 3-head groups (63 rows) with d / dv off the vector width and
  // random masks; 64-token blocks of one head, no mask; and two sequences'
  // tokens interleaved, each seeing only its own cells: cells interleaved too
  // (every tile seen by every token), or in two ranges (a block's tokens see
  // different tiles: the block goes token by token).
  struct Prompt {
    const char* name;
    int64_t d, dv, n_q, n_kv, heads, kv_heads;
    int64_t depth;       // causal: token i sees keys <= depth + i; -1: random mask; -2: none
    int64_t seqs;        // tokens alternate among this many sequences ...
    bool apart = false;  // ... whose keys alternate too, or (apart) lie in
                         // n_kv / seqs cells each, token i seeing its first depth + i / seqs
  };
  for (const Prompt& s :
       {Prompt{"f16_prompt_gqa8_at_depth", 64, 64, 20, 160, 16, 2, 120, 1},
        Prompt{"f16_prompt_d128_gqa8_at_depth2048", 128, 128, 24, 2100, 16, 2, 2048, 1},
        Prompt{"f16_prompt_two_sequences_interleaved", 64, 64, 12, 96, 8, 1, 70, 2},
        Prompt{"f16_prompt_two_sequences_apart", 64, 64, 12, 96, 8, 1, 30, 2, true},
        Prompt{"f16_prompt_63_rows", 40, 24, 25, 70, 6, 2, -1, 1},
        Prompt{"f16_prompt_mha_no_mask", 16, 16, 70, 45, 2, 2, -2, 1}}) {
    Gen causal = [s](std::mt19937& rng, std::span<float> v) {
      std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
      for (size_t i = 0; i < v.size(); ++i) {
        const int64_t token = static_cast<int64_t>(i) / s.n_kv,
                      key = static_cast<int64_t>(i) % s.n_kv;
        const int64_t cells = s.n_kv / s.seqs;
        const bool seen =
            s.apart ? key / cells == token % s.seqs && key % cells <= s.depth + token / s.seqs
                    : key <= s.depth + token && key % s.seqs == token % s.seqs;
        v[i] = seen ? (s.seqs == 1 ? 0.0f : dist(rng)) : -INFINITY;
      }
    };
    cases.push_back({s.name,
                     [s, causal](CaseGraph& c) {
                       Tensor* q = c.input(DType::kF32, {s.d, s.n_q, s.heads, 1});
                       Tensor* k = c.input(DType::kF16, {s.d, s.n_kv, s.kv_heads, 1});
                       Tensor* v = c.input(DType::kF16, {s.dv, s.n_kv, s.kv_heads, 1});
                       Tensor* mask = s.depth == -2
                                          ? nullptr
                                          : c.input(DType::kF32, {s.n_kv, s.n_q},
                                                    s.depth == -1 ? mask_values(s.n_kv) : causal);
                       return ops::flash_attn_ext(c.g(), q, k, v, mask,
                                                  1.0f / std::sqrt(static_cast<float>(s.d)));
                     },
                     kNmseMatMul});
  }
  // As llama calls it: q permuted from [d, heads, tokens]; K and V the first n_kv
  // rows of f16 caches [d, ctx, kv_heads]; an f32 mask [n_kv, tokens].
  cases.push_back(
      {"llama_cache_views",
       [](CaseGraph& c) {
         const int64_t d = 32, heads = 4, kv_heads = 2, tokens = 3, ctx = 20, n_kv = 9;
         Graph& g = c.g();
         Tensor* q = permuted_input(c, DType::kF32, {d, heads, tokens, 1}, {0, 2, 1, 3});
         Tensor* kc = c.input(DType::kF16, {d, ctx, kv_heads});
         Tensor* vc = c.input(DType::kF16, {d, ctx, kv_heads});
         Tensor* k = ops::view(g, kc, {d, n_kv, kv_heads}, {kc->nb[1], kc->nb[2]}, 0);
         Tensor* v = ops::view(g, vc, {d, n_kv, kv_heads}, {vc->nb[1], vc->nb[2]}, 0);
         Tensor* mask = c.input(DType::kF32, {n_kv, tokens}, mask_values(n_kv));
         return ops::flash_attn_ext(g, q, k, v, mask, 0.17f);
       },
       kNmseMatMul});
  return cases;
}

// ---- suites ---------------------------------------------------------------------------

class Rope : public OpTest {};
class FlashAttnExt : public OpTest {};

TEST_P(Rope, MatchesReference_ModesDimsYarnViews) {
  run(rope_cases(), naive_rope);
}
TEST_P(FlashAttnExt, MatchesReference_GqaMasksKvTypes) {
  run(flash_attn_cases(), naive_flash_attn);
}

INSTANTIATE_TEST_SUITE_P(Conformance, Rope, ::testing::ValuesIn(all_targets()), target_name);
INSTANTIATE_TEST_SUITE_P(Conformance, FlashAttnExt, ::testing::ValuesIn(all_targets()),
                         target_name);

}  // namespace
}  // namespace tessera::conformance
