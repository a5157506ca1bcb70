// Session: one sequence's KV cache and the forward passes that fill it. A
// prompt runs in batches of n_batch tokens, generation one token at a time,
// both through the scheduler over the model's devices.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "tessera/model.h"
#include "tessera/scheduler.h"

namespace tessera {

// Per-layer K and V caches, f16 [head_dim, n_ctx, n_head_kv] on the layer's device.
struct KvCache {
  int64_t n_ctx = 0;
  Graph arena;
  std::vector<Tensor*> k, v;
  std::vector<std::unique_ptr<Buffer>> buffers;
};

struct SessionOptions {
  int64_t n_ctx = 0;      // 0: the model's training context, at most 4096
  int64_t n_batch = 512;  // prompt tokens per forward pass
};

class Session {
 public:
  Session(const Model& model, const SessionOptions& options = {});
  ~Session();

  // Runs `tokens` at positions n_past().. and returns the logits of the last
  // token (n_vocab floats), or with all_logits those of every token
  // (tokens.size() rows of n_vocab). Throws Error(kInvalidArgument) when the
  // context would overflow or a token id is out of range.
  std::span<const float> decode(std::span<const int32_t> tokens, bool all_logits = false);

  int64_t n_past() const { return n_past_; }
  int64_t n_ctx() const { return cache_.n_ctx; }
  int64_t n_batch() const { return n_batch_; }
  void reset() { n_past_ = 0; }
  const Scheduler& scheduler() const { return *scheduler_; }

 private:
  void run_batch(std::span<const int32_t> tokens, bool all_logits, float* out);

  const Model& model_;
  KvCache cache_;
  int64_t n_batch_;
  int64_t n_past_ = 0;
  std::unique_ptr<Scheduler> scheduler_;
  std::vector<float> logits_;
};

// The forward graph of a Llama model for `n_tokens` tokens at positions
// n_past..; returns the logits node [n_vocab, n_out] (n_out = n_tokens with
// all_logits, else 1). Inputs: i32 tokens and positions [n_tokens], f32
// mask [n_past + n_tokens, n_tokens], flagged kFlagInput.
struct LlamaInputs {
  Tensor* tokens;
  Tensor* positions;
  Tensor* mask;
};
Tensor* build_llama(Graph& g, const Model& model, KvCache& cache, int64_t n_past,
                    int64_t n_tokens, bool all_logits, LlamaInputs* inputs);

}  // namespace tessera
