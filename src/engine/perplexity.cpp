#include "tessera/engine/perplexity.h"

#include <cmath>

#include "tessera/core/error.h"
#include "tessera/engine/engine.h"

namespace tessera {

PerplexityResult perplexity(const Model& model, std::span<const int32_t> tokens,
                            const PerplexityOptions& options) {
  const int64_t n_ctx = options.n_ctx;
  const int64_t n_tokens = static_cast<int64_t>(tokens.size());
  if (n_ctx < 4) {
    fail(ErrorCategory::kInvalidArgument, "[perplexity] context {}, expected at least 4", n_ctx);
  }
  if (n_tokens < 2 * n_ctx) {
    fail(ErrorCategory::kInvalidArgument,
         "[perplexity] the text has {} tokens, expected at least 2 * n_ctx = {}", n_tokens,
         2 * n_ctx);
  }
  const int64_t n_vocab = model.hparams().n_vocab;
  PerplexityResult result;
  result.n_chunks = n_tokens / n_ctx;
  const int64_t first = n_ctx / 2;  // the first half is context only
  Session session(model, {.n_ctx = n_ctx,
                          .n_batch = options.n_batch,
                          .type_k = options.type_k,
                          .type_v = options.type_v,
                          .pipeline = options.pipeline});
  double nll = 0.0, nll2 = 0.0;
  for (int64_t c = 0; c < result.n_chunks; ++c) {
    std::vector<int32_t> chunk(tokens.begin() + c * n_ctx, tokens.begin() + (c + 1) * n_ctx);
    if (options.bos) chunk[0] = *options.bos;
    session.reset();
    const std::span<const float> logits = session.decode(chunk, /*all_logits=*/true);
    // Position i predicts chunk token i + 1 (the original, not BOS).
    for (int64_t i = first; i < n_ctx - 1; ++i) {
      const float* row = logits.data() + i * n_vocab;
      float max = row[0];
      for (int64_t v = 1; v < n_vocab; ++v) max = std::max(max, row[v]);
      double sum = 0.0;
      for (int64_t v = 0; v < n_vocab; ++v) sum += std::exp(double(row[v]) - max);
      const int32_t next = tokens[static_cast<size_t>(c * n_ctx + i + 1)];
      const double token_nll = -(double(row[next]) - max - std::log(sum));
      nll += token_nll;
      nll2 += token_nll * token_nll;
      result.scored += 1;
    }
    result.running.push_back(std::exp(nll / double(result.scored)));
    if (options.on_chunk) options.on_chunk(c, result.running.back());
  }
  const double n = double(result.scored);
  const double mean = nll / n;
  result.ppl = std::exp(mean);
  // The standard error of the mean NLL, carried through exp() to first order.
  const double var = nll2 / n - mean * mean;
  result.uncertainty = var > 0 && n > 1 ? std::sqrt(var / (n - 1)) * result.ppl : 0.0;
  return result;
}

}  // namespace tessera
