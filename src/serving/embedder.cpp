#include "tessera/serving/embedder.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "tessera/core/error.h"
#include "tessera/gguf/gguf.h"

namespace tessera::serving {

Pooling pooling_from_name(const std::string& name) {
  if (name == "mean") return Pooling::kMean;
  if (name == "last") return Pooling::kLast;
  if (name == "cls") return Pooling::kCls;
  fail(ErrorCategory::kInvalidArgument, "[--pooling] found '{}', expected mean, last or cls", name);
}

Pooling model_pooling(const Model& model) {
  const std::string key = fmt::format("{}.pooling_type", model.hparams().architecture);
  if (const gguf::Value* v = model.file().find(key); v != nullptr && v->is_integer()) {
    switch (v->u32()) {
      case 2: return Pooling::kCls;
      case 3: return Pooling::kLast;
      default: return Pooling::kMean;
    }
  }
  return Pooling::kMean;
}

const char* pooling_name(Pooling p) {
  switch (p) {
    case Pooling::kMean: return "mean";
    case Pooling::kLast: return "last";
    case Pooling::kCls: return "cls";
  }
  return "?";
}

Embedder::Embedder(const Model& model, Pooling pooling, int64_t max_tokens)
    : model_(model), pooling_(pooling), max_tokens_(max_tokens) {}

std::vector<float> Embedder::embed(const std::vector<int32_t>& tokens, int normalize) {
  const auto n = static_cast<int64_t>(tokens.size());
  // The pipeline's messages go one at a time, from the thread that decodes;
  // embeddings come from the HTTP threads.
  if (model_.is_stage()) {
    fail(ErrorCategory::kUnsupported,
         "embeddings are not available while the model is split across MPI ranks (this rank "
         "holds layers [{}, {}) of {})",
         model_.layer_range().begin, model_.layer_range().end, model_.hparams().n_layer);
  }
  if (n == 0) fail(ErrorCategory::kInvalidArgument, "an embeddings input has no tokens");
  if (n > max_tokens_) {
    fail(ErrorCategory::kInvalidArgument, "an embeddings input has {} tokens, at most {} fit",
         n, max_tokens_);
  }
  std::lock_guard lock(mutex_);
  if (!context_) {
    context_ = std::make_unique<Context>(
        model_, ContextOptions{.n_ctx = max_tokens_, .n_batch = max_tokens_, .embeddings = true});
  }
  context_->cache().clear();
  batch_.clear();
  for (int64_t i = 0; i < n; ++i) {
    const bool out = pooling_ == Pooling::kMean || (pooling_ == Pooling::kLast && i + 1 == n) ||
                     (pooling_ == Pooling::kCls && i == 0);
    batch_.add(tokens[static_cast<size_t>(i)], static_cast<int32_t>(i), {0}, out);
  }
  context_->decode(batch_);
  const auto width = static_cast<size_t>(context_->output_width());
  std::vector<double> sum(width, 0.0);
  int64_t rows = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (batch_.want_logits[static_cast<size_t>(i)] == 0) continue;
    const std::span<const float> h = context_->logits(static_cast<size_t>(i));
    for (size_t j = 0; j < width; ++j) sum[j] += h[j];
    ++rows;
  }
  for (double& v : sum) v /= double(rows);
  return normalize_embedding(sum, normalize);
}

std::vector<float> normalize_embedding(std::span<const double> v, int mode) {
  double norm = 1.0;
  if (mode == 0) {  // the largest magnitude to 32760, as int16 would hold it
    double max_abs = 0;
    for (double x : v) max_abs = std::max(max_abs, std::abs(x));
    norm = max_abs / 32760.0;
  } else if (mode > 0) {  // the p-norm: taxicab (1), Euclidean (2), ...
    double sum = 0;
    for (double x : v) sum += mode == 2 ? x * x : std::pow(std::abs(x), mode);
    norm = mode == 1 ? sum : mode == 2 ? std::sqrt(sum) : std::pow(sum, 1.0 / mode);
  }
  std::vector<float> out(v.size());
  for (size_t j = 0; j < v.size(); ++j) out[j] = norm > 0 ? static_cast<float>(v[j] / norm) : 0.0f;
  return out;
}

}  // namespace tessera::serving
