// Hyperparameters every architecture shares, from GGUF metadata under the
// architecture's prefix, with llama.cpp's defaults for absent keys, checked
// against sane ranges before anything is sized by them.
#include <cmath>

#include "keys.h"
#include "tessera/core/error.h"
#include "tessera/models/model.h"

namespace tessera {
namespace {

using models::KeyReader;

constexpr int64_t kMaxLayers = 512;
constexpr int64_t kMaxDim = int64_t{1} << 20;
constexpr int64_t kMaxExperts = 4096;

// RoPE scaling as llama.cpp's loader and context derive it: the factor
// (rope.scaling.factor, or the older rope.scale_linear) applies to every type
// but "none"; "yarn" mixes in extrapolation (ext_factor 1) with its
// attention factor chosen so that ggml's own YaRN magnitude correction is
// the only one; "longrope" (Phi-3) scales through its factor tensors.
void read_rope_scaling(const KeyReader& r, Hparams& hp) {
  float factor = 0.0f;  // llama.cpp: 0 means no key
  if (const auto f = r.real("rope.scaling.factor")) {
    factor = *f;
  } else if (const auto old = r.real("rope.scale_linear")) {
    factor = *old;
  }
  if (factor < 0) r.bad("rope.scaling.factor", fmt::format("{}", factor), "> 0");
  hp.rope_freq_scale = factor == 0.0f ? 1.0f : 1.0f / factor;

  const std::string type = r.string("rope.scaling.type").value_or("linear");
  if (type == "none") {
    hp.rope_freq_scale = 1.0f;
  } else if (type == "yarn") {
    hp.rope_ext_factor = 1.0f;
    const float f = 1.0f / hp.rope_freq_scale;
    const float mscale = f <= 1.0f ? 1.0f : 1.0f + 0.1f * std::log(f);
    hp.rope_attn_factor = mscale / (1.0f + 0.1f * std::log(f));
  } else if (type != "linear" && type != "longrope") {
    fail(ErrorCategory::kUnsupported,
         "[model {}] key '{}': found \"{}\", expected one of none, linear, yarn, longrope",
         r.file_name(), r.key("rope.scaling.type"), type);
  }
  if (const auto a = r.real("rope.scaling.attn_factor")) {
    if (*a <= 0) r.bad("rope.scaling.attn_factor", fmt::format("{}", *a), "> 0");
    hp.rope_attn_factor *= *a;
  }
  hp.n_ctx_orig = r.uint("rope.scaling.original_context_length").value_or(hp.n_ctx_train);
  r.check_range("rope.scaling.original_context_length", hp.n_ctx_orig, 1, int64_t{1} << 24);
}

// The expert keys of a mixture of experts (llama.cpp's names); the
// architecture may set its own gating and normalisation after.
void read_experts(const KeyReader& r, Hparams& hp) {
  hp.n_expert = r.uint("expert_count").value_or(0);
  hp.n_expert_used = r.uint("expert_used_count").value_or(0);
  r.check_range("expert_count", hp.n_expert, 0, kMaxExperts);
  if (hp.n_expert == 0) {
    if (hp.n_expert_used != 0) r.bad("expert_used_count", std::to_string(hp.n_expert_used), "0 with no experts");
    return;
  }
  r.check_range("expert_used_count", hp.n_expert_used, 1, hp.n_expert);
  hp.n_ff_exp = r.uint("expert_feed_forward_length").value_or(0);  // 0: the architecture's default
  r.check_range("expert_feed_forward_length", hp.n_ff_exp, 0, 4 * kMaxDim);
  hp.n_ff_shexp = r.uint("expert_shared_feed_forward_length").value_or(0);
  r.check_range("expert_shared_feed_forward_length", hp.n_ff_shexp, 0, 4 * kMaxDim);
  if (const gguf::Value* v = r.find("expert_weights_norm")) hp.expert_weights_norm = v->boolean();
  if (const auto s = r.real("expert_weights_scale"); s && *s != 0.0f) hp.expert_weights_scale = *s;
  if (const auto f = r.uint("expert_gating_func")) {
    switch (*f) {  // llama_expert_gating_func_type
      case 1: hp.expert_gating = Hparams::ExpertGating::kSoftmax; break;
      case 2: hp.expert_gating = Hparams::ExpertGating::kSigmoid; break;
      case 3: hp.expert_gating = Hparams::ExpertGating::kSoftmaxWeight; break;
      default: r.bad("expert_gating_func", std::to_string(*f), "1 (softmax), 2 (sigmoid) or 3 (softmax over the top)");
    }
  }
}

}  // namespace

float Hparams::kq_scale() const {
  return attn_scale > 0.0f ? attn_scale : 1.0f / std::sqrt(static_cast<float>(head_dim));
}

Hparams read_hparams(const gguf::File& file) {
  Hparams hp;
  const gguf::Value* arch = file.find("general.architecture");
  if (arch == nullptr) {
    fail(ErrorCategory::kInvalidFile, "[model {}] key 'general.architecture' is missing",
         file.name());
  }
  hp.architecture = std::string(arch->string());
  const Architecture& architecture = find_architecture(hp.architecture, file.name());
  if (const gguf::Value* name = file.find("general.name")) hp.name = std::string(name->string());
  const KeyReader r(file, hp.architecture);

  hp.n_ctx_train = r.required("context_length");
  hp.n_embd = r.required("embedding_length");
  hp.n_layer = r.required("block_count");
  hp.n_ff = r.required("feed_forward_length");
  hp.n_head = r.required("attention.head_count");
  hp.n_head_kv = r.uint("attention.head_count_kv").value_or(hp.n_head);
  r.check_range("context_length", hp.n_ctx_train, 1, int64_t{1} << 24);
  r.check_range("embedding_length", hp.n_embd, 1, kMaxDim);
  r.check_range("block_count", hp.n_layer, 1, kMaxLayers);
  r.check_range("feed_forward_length", hp.n_ff, 1, 4 * kMaxDim);
  r.check_range("attention.head_count", hp.n_head, 1, 4096);
  r.check_range("attention.head_count_kv", hp.n_head_kv, 1, hp.n_head);
  if (hp.n_head % hp.n_head_kv != 0) {
    r.bad("attention.head_count_kv", std::to_string(hp.n_head_kv),
          fmt::format("a divisor of head_count {}", hp.n_head));
  }
  if (const auto kl = r.uint("attention.key_length")) {
    hp.head_dim = *kl;
    const auto vl = r.uint("attention.value_length").value_or(*kl);
    if (vl != *kl) r.bad("attention.value_length", std::to_string(vl), "the key length");
  } else {
    if (hp.n_embd % hp.n_head != 0) {
      r.bad("attention.head_count", std::to_string(hp.n_head),
            fmt::format("a divisor of embedding_length {}", hp.n_embd));
    }
    hp.head_dim = hp.n_embd / hp.n_head;
  }
  r.check_range("attention.key_length", hp.head_dim, 1, 1024);
  hp.n_rot = r.uint("rope.dimension_count").value_or(hp.head_dim);
  if (hp.n_rot % 2 != 0 || hp.n_rot > hp.head_dim || hp.n_rot < 2) {
    r.bad("rope.dimension_count", std::to_string(hp.n_rot),
          fmt::format("an even number from 2 to the head size {}", hp.head_dim));
  }

  if (auto vocab = r.uint("vocab_size")) hp.n_vocab = *vocab;
  if (const gguf::Value* tokens = file.find("tokenizer.ggml.tokens")) {
    hp.n_vocab = static_cast<int64_t>(tokens->array().size());
  }

  hp.rope_freq_base = r.real("rope.freq_base").value_or(10000.0f);
  if (hp.rope_freq_base <= 0) r.bad("rope.freq_base", fmt::format("{}", hp.rope_freq_base), "> 0");
  read_rope_scaling(r, hp);

  // RMS norms' epsilon, or LayerNorm's (encoders): one of them is required.
  const auto rms_eps = r.real("attention.layer_norm_rms_epsilon");
  const auto ln_eps = r.real("attention.layer_norm_epsilon");
  if (!rms_eps && !ln_eps) {
    fail(ErrorCategory::kInvalidFile, "[model {}] key '{}' is missing", file.name(),
         r.key("attention.layer_norm_rms_epsilon"));
  }
  for (const auto& [key, eps] : {std::pair{"attention.layer_norm_rms_epsilon", rms_eps},
                                 std::pair{"attention.layer_norm_epsilon", ln_eps}}) {
    if (eps && (*eps <= 0 || *eps > 1)) r.bad(key, fmt::format("{}", *eps), "in (0, 1]");
  }
  hp.norm_rms_eps = rms_eps ? *rms_eps : *ln_eps;  // (value_or would read the other one eagerly)
  hp.norm_eps = ln_eps ? *ln_eps : *rms_eps;
  if (const gguf::Value* v = r.find("attention.causal")) hp.causal = v->boolean();
  read_experts(r, hp);
  if (architecture.read_hparams != nullptr) architecture.read_hparams(file, hp);
  if (hp.n_expert > 0 && hp.n_ff_exp == 0) hp.n_ff_exp = hp.n_ff;  // Mixtral's experts are n_ff rows
  return hp;
}

}  // namespace tessera
