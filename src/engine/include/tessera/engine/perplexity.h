// Perplexity as llama-perplexity computes it: the tokens are cut into chunks
// of n_ctx; each chunk starts with BOS (when the model adds one) and is
// evaluated from an empty cache; the second half of each chunk is scored
// (each token's negative log-likelihood given all before it in the chunk).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <vector>

#include "tessera/models/model.h"

namespace tessera {

class Pipeline;

struct PerplexityResult {
  std::vector<double> running;  // perplexity after each chunk
  double ppl = 0.0;             // exp(mean NLL)
  double uncertainty = 0.0;     // ± as llama-perplexity prints it
  int64_t scored = 0;           // tokens scored
  int64_t n_chunks = 0;
};

struct PerplexityOptions {
  int64_t n_ctx = 512;
  int64_t n_batch = 512;
  DType type_k = DType::kF16, type_v = DType::kF16;  // the KV cache's types
  std::optional<int32_t> bos;  // replaces each chunk's first token when set
  Pipeline* pipeline = nullptr;  // a model split across processes: its pipeline (engine.h)
  // Called after each chunk with (chunk index, running perplexity).
  std::function<void(int64_t, double)> on_chunk;
};

// Throws Error(kInvalidArgument) when there are fewer than 2 * n_ctx tokens.
PerplexityResult perplexity(const Model& model, std::span<const int32_t> tokens,
                            const PerplexityOptions& options);

}  // namespace tessera
