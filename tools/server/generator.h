// Continuous batching for the server: N slots, each one sequence of one
// Context (one shared KV cache). A single thread steps the engine: every
// step decodes one batch holding the next token of every generating slot
// and chunks of the prompts waiting; a new request joins at the next step.
// HTTP threads submit Requests and read their Events as they come.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "tessera/engine.h"
#include "tessera/sampler.h"
#include "tessera/tokenizer.h"

namespace tessera::server {

struct GenerationParams {
  SamplerParams sampling;
  int32_t max_tokens = -1;  // -1: until the slot's context is full
  std::vector<std::string> stop;
  bool ignore_eos = false;
  bool cache_prompt = true;  // reuse the longest cached prefix of any slot
  int top_logprobs = -1;     // -1: no log-probabilities; 0..20: the chosen token's and N more
};

struct TokenProb {
  TokenId id;
  std::string text;
  float logprob;
};

// One piece of a request's output, in order. The last has done set.
struct Event {
  std::string text;  // new text, whole UTF-8 characters
  // Per generated token in this event (when top_logprobs >= 0): the chosen
  // token and the top alternatives.
  std::vector<std::pair<TokenProb, std::vector<TokenProb>>> probs;
  bool done = false;
  std::string finish_reason;  // "stop", "length"; "error" with `error` set
  std::string error;
  int64_t n_prompt = 0, n_cached = 0, n_gen = 0;
  double prompt_ms = 0, gen_ms = 0;
};

class Request {
 public:
  Request(std::vector<TokenId> tokens, GenerationParams generation)
      : prompt(std::move(tokens)), params(std::move(generation)) {}
  const std::vector<TokenId> prompt;
  const GenerationParams params;
  // Set by the HTTP side when the client went away: the slot is freed at the
  // next step and no more events come.
  std::atomic<bool> cancelled{false};

  void push(Event e);
  // The next event, or nothing after `timeout`.
  std::optional<Event> pop(std::chrono::milliseconds timeout);

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<Event> events_;
};

struct GeneratorOptions {
  int n_slots = 1;
  int64_t n_ctx = 0;  // cells in all; each slot may use n_ctx / n_slots
  int64_t n_batch = 512;
};

struct GeneratorMetrics {
  uint64_t requests = 0, prompt_tokens = 0, generated_tokens = 0, cached_tokens = 0;
  uint64_t cancelled = 0;  // clients that left before the end
  double prompt_seconds = 0, generation_seconds = 0;
  int slots_busy = 0, slots = 0, queued = 0;
  int64_t kv_cells_used = 0, kv_cells = 0;
  uint64_t steps = 0;
  uint64_t plans_built = 0;  // graphs built and planned (one per batch shape)
};

class Generator {
 public:
  Generator(const Model& model, const Tokenizer& tokenizer, const GeneratorOptions& options);
  ~Generator();
  Generator(const Generator&) = delete;
  Generator& operator=(const Generator&) = delete;

  // Cells one slot may use.
  int64_t slot_ctx() const { return slot_ctx_; }
  int n_slots() const { return static_cast<int>(slots_.size()); }
  // Queues a request. Throws Error(kInvalidArgument) when it cannot fit a
  // slot (prompt plus max_tokens past slot_ctx(), or an empty prompt) and
  // Error(kUnsupported) once shutting down.
  void submit(const std::shared_ptr<Request>& request);
  // Ends every queued and running request (finish_reason "stop" for those
  // running: their text so far is whole) and stops the thread.
  void shutdown();
  GeneratorMetrics metrics() const;

 private:
  struct Slot;
  void loop();
  bool step();  // false when there was nothing to do
  void update_gauges();
  void assign(Slot& slot, std::shared_ptr<Request> request);
  void handle_token(Slot& slot, std::span<const float> logits);
  void finish(Slot& slot, const std::string& reason, const std::string& error = {});

  const Model& model_;
  const Tokenizer& tokenizer_;
  Context context_;
  int64_t slot_ctx_;
  std::vector<std::unique_ptr<Slot>> slots_;
  Batch batch_;

  mutable std::mutex mutex_;  // queue_, stopping_, metrics_
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Request>> queue_;
  bool stopping_ = false;
  GeneratorMetrics metrics_;
  std::thread thread_;
};

}  // namespace tessera::server
