// Embeddings (the server's /v1/embeddings, the Node package's embedding()):
// a text's vector from the model's final hidden states (after the output
// norm), pooled over its tokens and L2-normalized as OpenAI's are. Runs on its own Context (made on first use), one input at a
// time, beside the generator's slots.
#pragma once

#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "tessera/engine/engine.h"

namespace tessera::serving {

enum class Pooling { kMean, kLast, kCls };

// "mean", "last", "cls"; the error names the flag and the choices.
Pooling pooling_from_name(const std::string& name);
// The model's {arch}.pooling_type (llama.cpp's numbering: 1 mean, 2 cls,
// 3 last), or mean when it has none.
Pooling model_pooling(const Model& model);
const char* pooling_name(Pooling p);

// llama.cpp's embd_normalize: -1 none, 0 the largest magnitude scaled to
// 32760 (int16's range), 1 taxicab, 2 Euclidean (the default), p > 2 the
// p-norm. A zero vector stays zero.
std::vector<float> normalize_embedding(std::span<const double> v, int mode);

class Embedder {
 public:
  Embedder(const Model& model, Pooling pooling, int64_t max_tokens);
  // One vector of n_embd floats, normalized as normalize_embedding does with
  // `normalize` (default L2). Throws Error(kInvalidArgument) for an empty
  // input or one longer than max_tokens().
  std::vector<float> embed(const std::vector<int32_t>& tokens, int normalize = 2);
  int64_t max_tokens() const { return max_tokens_; }
  Pooling pooling() const { return pooling_; }

 private:
  const Model& model_;
  Pooling pooling_;
  int64_t max_tokens_;
  std::mutex mutex_;
  std::unique_ptr<Context> context_;
  Batch batch_;
};

}  // namespace tessera::serving
