// The serving core: one decode loop for every front end (`tessera run`,
// `chat`, the server, the Node package). A Generator holds N slots, each one
// sequence of one Context (one shared KV cache); every step decodes one batch
// holding the next token of every generating slot and chunks of the prompts
// waiting, so requests join and leave between steps (continuous batching).
// A prompt reuses the longest prefix any slot has in the cache, and waits a
// step for a slot that is decoding a longer shared prefix, so N requests for
// one prompt decode it once.
//
// Each request's output comes to its sink as Events, in order: text in whole
// UTF-8 characters, with stop strings cut (text that may start one is held
// back until the next token decides), and one last event with the finish
// reason and timings. Every request gets exactly one last event, whatever
// ends it.
//
// The CLI drives the loop on its own thread (run()); the server starts a
// thread for it (start()) and submits from HTTP threads.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "tessera/engine/engine.h"
#include "tessera/engine/sampler.h"
#include "tessera/serving/tool_calls.h"
#include "tessera/text/tokenizer.h"

namespace tessera::serving {

enum class FinishReason {
  kNone,       // not finished (every event but the last)
  kEndOfText,  // the model wrote an end-of-generation token
  kStop,       // a stop string; the text ends before it
  kLength,     // max_tokens, or the slot's context is full
  kCancelled,  // the caller cancelled (a client left, Ctrl-C)
  kShutdown,   // the generator stopped while it ran or waited
  kError,      // a decode failed; Event::error says why
};
std::string_view finish_reason_name(FinishReason r);

// submit() after shutdown().
class Stopped : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct GenerationParams {
  SamplerParams sampling;
  int32_t max_tokens = -1;  // -1: until the slot's context is full
  std::vector<std::string> stop;
  bool ignore_eos = false;
  bool cache_prompt = true;  // reuse the longest cached prefix of any slot
  int top_logprobs = -1;     // -1: no log-probabilities; 0..N: the chosen token's and N more
  // Thinking between <think> and </think> goes to Event::reasoning instead
  // of Event::text; `reasoning_open`: the prompt already opened it.
  bool split_reasoning = false;
  bool reasoning_open = false;
  // The reply is gpt-oss's harmony (harmony.h): its analysis channel is the
  // thinking (split out when split_reasoning), its calls those of `tools`.
  bool harmony = false;
  // Token masks for the sampler chain (grammars, JSON schemas): called once
  // per request, the stages go after the banned tokens.
  std::function<std::vector<std::unique_ptr<SamplerStage>>()> masks;
  // Tool calls: the answer (after any thinking) is parsed in this format,
  // calls going to Event::tool_calls and the rest to Event::text; the
  // format's marker tokens render as text. `forced`: a grammar made the
  // output a call; `tool_names` for the formats that need them.
  struct Tools {
    ToolFormat format = ToolFormat::kGeneric;
    bool forced = false;
    std::vector<std::string> tool_names;
  };
  std::optional<Tools> tools;
};

// A request's tools into its parameters, as the server and the Node package
// take them: `p.tools` set to parse the output when calls are allowed, and
// `grammar` (the request's own grammar / schema, if any) becomes the one the
// tools force when they force one. Throws Error(kInvalidArgument) when both
// would constrain the output, or a tool's schema cannot be a grammar.
void use_tools(const ToolRequest& r, GenerationParams& p, std::optional<std::string>& grammar);

struct TokenProb {
  TokenId id;
  std::string text;
  float logprob;
};

// One piece of a request's output, in order. The last has done set.
struct Event {
  std::string text;  // new text, whole UTF-8 characters
  std::string reasoning;  // new thinking, with GenerationParams::split_reasoning
  std::vector<ToolCall> tool_calls;  // calls completed, with GenerationParams::tools
  // Per generated token in this event (when top_logprobs >= 0): the chosen
  // token and the top alternatives.
  std::vector<std::pair<TokenProb, std::vector<TokenProb>>> probs;
  bool done = false;
  FinishReason finish = FinishReason::kNone;
  std::string error;  // with kError
  std::string stop;   // with kStop: the stop string that ended the text
  // On the last event: counts, timings and the seed the sampler used.
  int64_t n_prompt = 0, n_cached = 0, n_gen = 0;
  double prompt_ms = 0, gen_ms = 0;
  double sample_ms = 0;  // CPU time choosing the tokens (the sampler chain, grammar masks included)
  uint32_t seed = 0;
};

using EventSink = std::function<void(Event&&)>;

class Request {
 public:
  // `sink` is called on the generator's thread, for every event in order.
  Request(std::vector<TokenId> tokens, GenerationParams generation, EventSink sink)
      : prompt(std::move(tokens)), params(std::move(generation)), sink_(std::move(sink)) {}
  const std::vector<TokenId> prompt;
  const GenerationParams params;

  // From any thread: the request ends at the next step (FinishReason
  // kCancelled), queued or running.
  void cancel() { cancelled_.store(true); }
  bool cancelled() const { return cancelled_.load(); }

  // Where it is, for status reports (any thread): waiting for a slot,
  // decoding its prompt, generating, or ended (its last event sent or being sent).
  enum class Phase { kQueued, kPrompt, kGenerating, kDone };
  Phase phase() const { return phase_.load(); }
  // Tokens generated so far.
  int64_t generated() const { return generated_.load(); }

 private:
  friend class Generator;
  EventSink sink_;
  std::atomic<bool> cancelled_{false};
  std::atomic<Phase> phase_{Phase::kQueued};
  std::atomic<int64_t> generated_{0};
};

// Events handed from the generator's thread to another: a sink that queues.
class EventQueue {
 public:
  EventSink sink();
  // The next event, or nothing after `timeout`.
  std::optional<Event> pop(std::chrono::milliseconds timeout);

 private:
  struct State {
    std::mutex mutex;
    std::condition_variable cv;
    std::deque<Event> events;
  };
  std::shared_ptr<State> state_ = std::make_shared<State>();
};

struct GeneratorOptions {
  int n_slots = 1;
  int64_t n_ctx = 0;  // cells in all; each slot may use n_ctx / n_slots
  int64_t n_batch = 512;
  DType type_k = DType::kF16;
  DType type_v = DType::kF16;
  // A model split across processes: the pipeline it is a stage of (see
  // ContextOptions::pipeline; LoadedModel::pipeline), else null.
  Pipeline* pipeline = nullptr;
};

struct GeneratorMetrics {
  uint64_t requests = 0, prompt_tokens = 0, generated_tokens = 0, cached_tokens = 0;
  uint64_t cancelled = 0;  // requests cancelled before their end
  double prompt_seconds = 0, generation_seconds = 0;
  int slots_busy = 0, slots = 0, queued = 0;
  int64_t kv_cells_used = 0, kv_cells = 0;
  uint64_t steps = 0;
  uint64_t plans_built = 0;  // graphs built and planned (one per batch shape)
  // While requests wait or run: seconds since the generator thread last
  // finished a step or took up work (0 when it has none). A stuck thread
  // shows here; a long prompt's batch does too, for its length.
  double seconds_since_progress = 0;
};

// What /v1/models and the Node package's model info report.
struct ModelInfo {
  int64_t n_vocab = 0, n_ctx_train = 0, n_embd = 0;
  uint64_t n_params = 0;    // elements of every tensor in the file
  uint64_t size_bytes = 0;  // the weights' bytes
};
ModelInfo model_info(const Model& model);

class Generator {
 public:
  Generator(const Model& model, const Tokenizer& tokenizer, const GeneratorOptions& options);
  ~Generator();
  Generator(const Generator&) = delete;
  Generator& operator=(const Generator&) = delete;

  // Cells one slot may use.
  int64_t slot_ctx() const { return slot_ctx_; }
  int n_slots() const { return static_cast<int>(slots_.size()); }
  const Tokenizer& tokenizer() const { return tokenizer_; }
  const Model& model() const { return model_; }

  // Queues a request (from any thread). Throws Error(kInvalidArgument) when
  // it cannot fit a slot (prompt plus max_tokens past slot_ctx(), an empty
  // prompt, a token outside the vocabulary, bad sampling parameters) and
  // Stopped once shut down.
  void submit(const std::shared_ptr<Request>& request);

  // Steps on the calling thread until every request submitted has ended.
  // When `interrupt` becomes true, the requests running or queued end with
  // kCancelled. Not with start().
  void run(const std::atomic<bool>* interrupt = nullptr);
  // One step: cancellations, queued requests into slots, one batch decoded.
  // False when there was nothing to do. Not with start().
  bool step();

  // Steps on a thread of the generator's own from now on.
  void start();
  // Ends every running request (kShutdown: their text so far is whole) and
  // every queued one (kShutdown with an error), and stops the thread.
  void shutdown();

  GeneratorMetrics metrics() const;

  // Sessions (the Node package's saveSession / loadSession): the sequence of
  // the slot whose request ended last, its tokens and every layer's cache
  // rows, written to `path` with the model's identity and the cache types;
  // returns the tokens saved. load_session puts such a file into an idle
  // slot, so a prompt that starts with its tokens decodes only the rest; it
  // returns the tokens. Throws Error(kInvalidFile) naming the file for one
  // that is truncated, not a session, or of another model or cache type,
  // and Error(kInvalidArgument) when no slot is idle or the tokens do not
  // fit one. Both run between steps (on the generator's thread once started).
  size_t save_session(const std::filesystem::path& path);
  std::vector<TokenId> load_session(const std::filesystem::path& path);
  // Forgets the cached prefixes of every idle slot.
  void clear_cache();

 private:
  struct Slot;
  void loop();
  void end_all(FinishReason reason, const std::string& error);
  void admit();
  void update_gauges();
  void assign(Slot& slot, std::shared_ptr<Request> request);
  bool deferred(const Request& r) const;
  void check_sessions(const std::filesystem::path& path) const;
  void collect(bool sample);
  void drain();
  void fail_all(const std::string& error);
  void handle_token(Slot& slot, std::span<const float> logits);
  void put_text(Slot& slot, std::string&& text, bool last);
  void finish(Slot& slot, FinishReason reason, const std::string& error = {});
  // Runs `task` between two steps: on the generator's thread once started
  // (waiting for it), else here. Its exceptions reach the caller.
  void between_steps(const std::function<void()>& task);
  void run_tasks();

  const Model& model_;
  const Tokenizer& tokenizer_;
  Context context_;
  int64_t slot_ctx_;
  std::vector<TokenId> eog_tokens_;
  std::vector<std::unique_ptr<Slot>> slots_;
  Batch batch_;
  std::deque<std::vector<Slot*>> flights_;  // the slots of each batch in flight, oldest first

  mutable std::mutex mutex_;  // queue_, stopping_, metrics_
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Request>> queue_;
  std::deque<std::function<void()>> tasks_;  // for between_steps
  bool stopping_ = false;
  bool started_ = false;  // start() ran (mutex_)
  int last_slot_ = 0;  // the slot whose request ended last
  GeneratorMetrics metrics_;
  std::chrono::steady_clock::time_point last_progress_ = std::chrono::steady_clock::now();  // mutex_
  std::thread thread_;
};

}  // namespace tessera::serving
