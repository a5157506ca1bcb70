// Hyperparameters every architecture shares, from GGUF metadata under the
// architecture's prefix, with llama.cpp's defaults for absent keys, checked
// against sane ranges before anything is sized by them.
#include <cmath>

#include "tessera/error.h"
#include "tessera/model.h"

namespace tessera {
namespace {

constexpr int64_t kMaxLayers = 512;
constexpr int64_t kMaxDim = int64_t{1} << 20;

class Reader {
 public:
  Reader(const gguf::File& file, std::string arch) : file_(file), arch_(std::move(arch)) {}

  std::string key(std::string_view suffix) const { return fmt::format("{}.{}", arch_, suffix); }

  const gguf::Value* find(std::string_view suffix) const { return file_.find(key(suffix)); }

  // An unsigned value, or the largest element of a per-layer array.
  std::optional<int64_t> uint(std::string_view suffix) const {
    const gguf::Value* v = find(suffix);
    if (v == nullptr) return std::nullopt;
    if (v->type() == gguf::ValueType::kArray) {
      const gguf::ArrayView& a = v->array();
      if (a.size() == 0) bad(suffix, "an empty array", "a number");
      int64_t best = 0;
      for (uint64_t i = 0; i < a.size(); ++i) {
        const int64_t x = a.number<int64_t>(i);
        if (x != a.number<int64_t>(0)) {
          fail(ErrorCategory::kUnsupported, "[model {}] per-layer values that differ "
               "(element {} is {}, element 0 is {}) are not supported yet", key(suffix), i, x,
               a.number<int64_t>(0));
        }
        best = std::max(best, x);
      }
      return best;
    }
    return static_cast<int64_t>(v->u64());
  }

  int64_t required(std::string_view suffix) const {
    const auto v = uint(suffix);
    if (!v) {
      fail(ErrorCategory::kInvalidFile, "[model {}] key '{}' is missing", file_.name(),
           key(suffix));
    }
    return *v;
  }

  std::optional<float> real(std::string_view suffix) const {
    const gguf::Value* v = find(suffix);
    if (v == nullptr) return std::nullopt;
    const float x = v->f32();
    if (!std::isfinite(x)) bad(suffix, fmt::format("{}", x), "a finite number");
    return x;
  }

  [[noreturn]] void bad(std::string_view suffix, const std::string& found,
                        std::string_view expected) const {
    fail(ErrorCategory::kInvalidFile, "[model {}] key '{}': found {}, expected {}", file_.name(),
         key(suffix), found, expected);
  }

  void check_range(std::string_view suffix, int64_t v, int64_t lo, int64_t hi) const {
    if (v < lo || v > hi) bad(suffix, std::to_string(v), fmt::format("{} to {}", lo, hi));
  }

 private:
  const gguf::File& file_;
  std::string arch_;
};

}  // namespace

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
  const Reader r(file, hp.architecture);

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
  // Linear scaling: rope.scaling.factor with type "linear" (or the older
  // rope.scale_linear); other scaling types are not supported yet.
  float factor = r.real("rope.scale_linear").value_or(1.0f);
  if (const gguf::Value* type = r.find("rope.scaling.type")) {
    const std::string t(type->string());
    if (t != "none" && t != "linear") {
      fail(ErrorCategory::kUnsupported, "[model {}] rope scaling '{}' is not supported yet",
           file.name(), t);
    }
    if (t == "linear") factor = r.real("rope.scaling.factor").value_or(1.0f);
  }
  if (factor <= 0) r.bad("rope.scaling.factor", fmt::format("{}", factor), "> 0");
  hp.rope_freq_scale = 1.0f / factor;

  const auto eps = r.real("attention.layer_norm_rms_epsilon");
  if (!eps) {
    fail(ErrorCategory::kInvalidFile, "[model {}] key '{}' is missing", file.name(),
         r.key("attention.layer_norm_rms_epsilon"));
  }
  if (*eps <= 0 || *eps > 1) r.bad("attention.layer_norm_rms_epsilon", fmt::format("{}", *eps), "in (0, 1]");
  hp.norm_rms_eps = *eps;
  if (architecture.read_hparams != nullptr) architecture.read_hparams(file, hp);
  return hp;
}

}  // namespace tessera
