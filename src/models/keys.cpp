#include "keys.h"

#include <cmath>

#include "tessera/core/error.h"
#include "tessera/models/model.h"

namespace tessera::models {

std::string KeyReader::key(std::string_view suffix) const {
  return fmt::format("{}.{}", arch_, suffix);
}

const gguf::Value* KeyReader::find(std::string_view suffix) const {
  return file_.find(key(suffix));
}

std::optional<int64_t> KeyReader::uint(std::string_view suffix) const {
  const gguf::Value* v = find(suffix);
  if (v == nullptr) return std::nullopt;
  if (v->type() == gguf::ValueType::kArray) {
    const gguf::ArrayView& a = v->array();
    if (a.size() == 0) bad(suffix, "an empty array", "a number");
    int64_t best = 0;
    for (uint64_t i = 0; i < a.size(); ++i) {
      const int64_t x = a.number<int64_t>(i);
      if (x != a.number<int64_t>(0)) {
        fail(ErrorCategory::kUnsupported,
             "[model {}] per-layer values that differ "
             "(element {} is {}, element 0 is {}) are not supported yet",
             key(suffix), i, x, a.number<int64_t>(0));
      }
      best = std::max(best, x);
    }
    return best;
  }
  return static_cast<int64_t>(v->u64());
}

int64_t KeyReader::required(std::string_view suffix) const {
  const auto v = uint(suffix);
  if (!v) {
    fail(ErrorCategory::kInvalidFile, "[model {}] key '{}' is missing", file_.name(), key(suffix));
  }
  return *v;
}

std::optional<float> KeyReader::real(std::string_view suffix) const {
  const gguf::Value* v = find(suffix);
  if (v == nullptr) return std::nullopt;
  const float x = v->f32();
  if (!std::isfinite(x)) bad(suffix, fmt::format("{}", x), "a finite number");
  return x;
}

std::optional<std::string> KeyReader::string(std::string_view suffix) const {
  const gguf::Value* v = find(suffix);
  if (v == nullptr) return std::nullopt;
  return std::string(v->string());
}

void KeyReader::bad(std::string_view suffix, const std::string& found,
                    std::string_view expected) const {
  fail(ErrorCategory::kInvalidFile, "[model {}] key '{}': found {}, expected {}", file_.name(),
       key(suffix), found, expected);
}

void KeyReader::check_range(std::string_view suffix, int64_t v, int64_t lo, int64_t hi) const {
  if (v < lo || v > hi) bad(suffix, std::to_string(v), fmt::format("{} to {}", lo, hi));
}

void read_cls_labels(const gguf::File& file, Hparams& hp) {
  const std::string labels = hp.architecture + ".classifier.output_labels";
  if (const gguf::Value* v = file.find(labels)) {
    hp.n_cls_out = v->type() == gguf::ValueType::kArray ? static_cast<int64_t>(v->array().size()) : 0;
    if (hp.n_cls_out < 1 || hp.n_cls_out > 4096) {
      fail(ErrorCategory::kInvalidFile, "[model {}] key '{}' found {} labels, expected 1 to 4096",
           file.name(), labels, hp.n_cls_out);
    }
  }
}

void read_swa_pattern(const KeyReader& r, Hparams& hp, int64_t period, bool dense_first) {
  hp.swa_layers.assign(static_cast<size_t>(hp.n_layer), 0);
  const gguf::Value* pattern = r.find("attention.sliding_window_pattern");
  if (pattern != nullptr && pattern->type() == gguf::ValueType::kArray) {
    const gguf::ArrayView& a = pattern->array();
    if (static_cast<int64_t>(a.size()) != hp.n_layer) {
      r.bad("attention.sliding_window_pattern", fmt::format("{} elements", a.size()),
            fmt::format("one per layer ({})", hp.n_layer));
    }
    for (uint64_t il = 0; il < a.size(); ++il) hp.swa_layers[il] = a.number<int64_t>(il) != 0;
    return;
  }
  if (pattern != nullptr) {
    period = static_cast<int64_t>(pattern->u64());
    r.check_range("attention.sliding_window_pattern", period, 1, hp.n_layer + 1);
  }
  for (int64_t il = 0; il < hp.n_layer; ++il) {
    hp.swa_layers[static_cast<size_t>(il)] = dense_first ? il % period != 0 : (il % period) < period - 1;
  }
}

}  // namespace tessera::models
