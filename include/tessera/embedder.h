// Embeddings (the server's /v1/embeddings, the Node package's embedding()):
// a text's vector from the model's final hidden states (after the output
// norm), pooled over its tokens and L2-normalized as OpenAI's are. Runs on its own Context (made on first use), one input at a
// time, beside the generator's slots.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "tessera/engine.h"

namespace tessera::serving {

enum class Pooling { kMean, kLast, kCls };

// "mean", "last", "cls"; the error names the flag and the choices.
Pooling pooling_from_name(const std::string& name);
// The model's {arch}.pooling_type (llama.cpp's numbering: 1 mean, 2 cls,
// 3 last), or mean when it has none.
Pooling model_pooling(const Model& model);
const char* pooling_name(Pooling p);

class Embedder {
 public:
  Embedder(const Model& model, Pooling pooling, int64_t max_tokens);
  // One vector of n_embd floats. Throws Error(kInvalidArgument) for an empty
  // input or one longer than max_tokens().
  std::vector<float> embed(const std::vector<int32_t>& tokens);
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
