#include <algorithm>
#include <ctime>
#include <cmath>
#include <future>
#include <optional>

#include "reasoning.h"
#include "session_file.h"
#include "tessera/core/error.h"
#include "tessera/gguf/gguf.h"
#include "tessera/serving/harmony.h"
#include "tessera/serving/serving.h"
#include "text_stream.h"

namespace tessera::serving {
namespace {

using Clock = std::chrono::steady_clock;

// This thread's CPU time: what sampling costs, whatever else shares the cores.
double thread_cpu_ms() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return 1e3 * static_cast<double>(t.tv_sec) + 1e-6 * static_cast<double>(t.tv_nsec);
}

double ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

size_t common_prefix(const std::vector<TokenId>& a, const std::vector<TokenId>& b) {
  const auto end = std::min(a.size(), b.size());
  return static_cast<size_t>(
      std::mismatch(a.begin(), a.begin() + static_cast<ptrdiff_t>(end), b.begin()).first -
      a.begin());
}

// A prompt waits for a slot decoding a shared prefix when it gains at least
// this many tokens (or its whole prompt) by waiting.
constexpr size_t kMinSharedGain = 32;

}  // namespace

std::string_view finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::kNone: return "none";
    case FinishReason::kEndOfText: return "eos";
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
    case FinishReason::kCancelled: return "cancelled";
    case FinishReason::kShutdown: return "shutdown";
    case FinishReason::kError: return "error";
  }
  return "?";
}

ModelInfo model_info(const Model& model) {
  const Hparams& hp = model.hparams();
  ModelInfo info{.n_vocab = hp.n_vocab, .n_ctx_train = hp.n_ctx_train, .n_embd = hp.n_embd};
  for (const gguf::TensorInfo& t : model.file().tensors()) {
    info.n_params += static_cast<uint64_t>(t.n_elements());
  }
  info.size_bytes = model.weight_bytes();
  return info;
}

EventSink EventQueue::sink() {
  return [state = state_](Event&& e) {
    {
      std::lock_guard lock(state->mutex);
      state->events.push_back(std::move(e));
    }
    state->cv.notify_one();
  };
}

std::optional<Event> EventQueue::pop(std::chrono::milliseconds timeout) {
  State& s = *state_;
  std::unique_lock lock(s.mutex);
  if (!s.cv.wait_for(lock, timeout, [&] { return !s.events.empty(); })) return std::nullopt;
  Event e = std::move(s.events.front());
  s.events.pop_front();
  return e;
}

struct Generator::Slot {
  enum class State { kIdle, kPrompt, kGenerating };
  int id = 0;
  State state = State::kIdle;
  std::shared_ptr<Request> request;
  std::vector<TokenId> cached;  // the tokens of this sequence in the cache, in order
  size_t prompt_next = 0;       // next prompt token to decode
  TokenId last = -1;            // sampled, not yet decoded
  std::unique_ptr<Sampler> sampler;
  TextStream text;
  std::optional<ReasoningSplitter> reasoning;
  std::optional<ToolCallParser> tool_parser;
  std::optional<HarmonyParser> harmony;  // replaces both above for gpt-oss replies
  std::vector<TokenId> preserved;  // control tokens rendered as text (tool markers)
  int64_t n_gen = 0, n_cached = 0;
  double sample_ms = 0;
  Event pending;          // what the next event sends
  int batch_index = -1;   // its batch's token asking for logits
  size_t n_decoding = 0;  // prompt tokens in its batch
  bool in_flight = false;  // in a batch submitted and not yet collected
  Clock::time_point start, first_token;

  void send(Event&& e) {
    if (request->sink_) request->sink_(std::move(e));
  }
};

Generator::Generator(const Model& model, const Tokenizer& tokenizer,
                     const GeneratorOptions& options)
    : model_(model),
      tokenizer_(tokenizer),
      context_(model, {.n_ctx = options.n_ctx,
                       .n_batch = options.n_batch,
                       .type_k = options.type_k,
                       .type_v = options.type_v,
                       .pipeline = options.pipeline}),
      slot_ctx_(context_.n_ctx() / std::max(options.n_slots, 1)) {
  if (options.n_slots < 1 || options.n_slots > kMaxSequences) {
    fail(ErrorCategory::kInvalidArgument, "[--parallel] found {} slots, expected 1..{}",
         options.n_slots, kMaxSequences);
  }
  for (TokenId t = 0; t < static_cast<TokenId>(tokenizer_.n_vocab()); ++t) {
    if (tokenizer_.is_eog(t)) eog_tokens_.push_back(t);
  }
  for (int i = 0; i < options.n_slots; ++i) {
    slots_.push_back(std::make_unique<Slot>());
    slots_.back()->id = i;
  }
  metrics_.slots = options.n_slots;
  metrics_.kv_cells = context_.n_ctx();
}

Generator::~Generator() { shutdown(); }

void Generator::submit(const std::shared_ptr<Request>& r) {
  const auto n = static_cast<int64_t>(r->prompt.size());
  if (n == 0) fail(ErrorCategory::kInvalidArgument, "the prompt is empty (no tokens)");
  const int64_t want = n + std::max<int64_t>(r->params.max_tokens, 1);
  if (want > slot_ctx_) {
    fail(ErrorCategory::kInvalidArgument,
         "the prompt has {} tokens and max_tokens is {}: {} in all, but a slot holds {} "
         "(context {} over {} slots)",
         n, r->params.max_tokens, want, slot_ctx_, context_.n_ctx(), slots_.size());
  }
  for (TokenId t : r->prompt) {
    if (t < 0 || t >= context_.n_vocab()) {
      fail(ErrorCategory::kInvalidArgument, "prompt token {} is outside the vocabulary [0, {})",
           t, context_.n_vocab());
    }
  }
  check_sampler_params(r->params.sampling);  // here rather than in the loop
  {
    std::lock_guard lock(mutex_);
    if (stopping_) throw Stopped("the server is shutting down");
    queue_.push_back(r);
    ++metrics_.requests;
  }
  cv_.notify_one();
}

void Generator::run(const std::atomic<bool>* interrupt) {
  while (true) {
    if (interrupt != nullptr && interrupt->load()) {
      end_all(FinishReason::kCancelled, {});
      return;
    }
    if (step()) continue;
    std::lock_guard lock(mutex_);
    const bool busy = std::any_of(slots_.begin(), slots_.end(),
                                  [](auto& s) { return s->state != Slot::State::kIdle; });
    if (!busy && queue_.empty()) return;
  }
}

void Generator::start() {
  std::lock_guard lock(mutex_);
  if (!started_) {
    started_ = true;
    thread_ = std::thread([this] { loop(); });
  }
}

void Generator::shutdown() {
  {
    std::lock_guard lock(mutex_);
    if (stopping_ && !thread_.joinable()) return;
    stopping_ = true;
  }
  cv_.notify_one();
  if (thread_.joinable()) {
    thread_.join();
  } else {
    end_all(FinishReason::kShutdown, "the server is shutting down");
  }
}

GeneratorMetrics Generator::metrics() const {
  std::lock_guard lock(mutex_);
  GeneratorMetrics m = metrics_;
  m.queued = static_cast<int>(queue_.size());
  if (m.queued > 0 || m.slots_busy > 0) {
    m.seconds_since_progress = std::chrono::duration<double>(Clock::now() - last_progress_).count();
  }
  return m;
}

void Generator::loop() {
  while (true) {
    bool stopping = false;
    {
      std::unique_lock lock(mutex_);
      const bool busy = std::any_of(slots_.begin(), slots_.end(),
                                    [](auto& s) { return s->state != Slot::State::kIdle; });
      if (!busy) cv_.wait(lock, [&] { return stopping_ || !queue_.empty() || !tasks_.empty(); });
      stopping = stopping_;
      if (!busy) last_progress_ = Clock::now();  // took up work after waiting for it
    }
    run_tasks();
    if (stopping) {
      end_all(FinishReason::kShutdown, "the server is shutting down");
      return;
    }
    step();
  }
}

// Running requests end with `reason` and no error (their text is whole);
// queued ones with `reason` and `error`.
void Generator::end_all(FinishReason reason, const std::string& error) {
  drain();
  for (auto& s : slots_) {
    if (s->state != Slot::State::kIdle) finish(*s, reason);
  }
  std::deque<std::shared_ptr<Request>> left;
  {
    std::lock_guard lock(mutex_);
    left.swap(queue_);
    metrics_.queued = 0;
    if (reason == FinishReason::kCancelled) metrics_.cancelled += left.size();
  }
  for (auto& r : left) {
    Event e;
    e.done = true;
    e.finish = reason;
    e.error = error;
    e.n_prompt = static_cast<int64_t>(r->prompt.size());
    r->phase_.store(Request::Phase::kDone);
    if (r->sink_) r->sink_(std::move(e));
  }
  update_gauges();
}

// Whether `r` should wait: a slot decoding its prompt shares a longer
// prefix with r than any cache holds, by enough to be worth a step.
bool Generator::deferred(const Request& r) const {
  if (!r.params.cache_prompt) return false;
  const size_t limit = r.prompt.size() - 1;  // one token is always decoded, for its logits
  size_t cached = 0, pending = 0;
  for (const auto& s : slots_) {
    cached = std::max(cached, std::min(common_prefix(s->cached, r.prompt), limit));
    if (s->state == Slot::State::kPrompt) {
      pending = std::max(pending, std::min(common_prefix(s->request->prompt, r.prompt), limit));
    }
  }
  return pending > cached && pending - cached >= std::min(kMinSharedGain, limit);
}

void Generator::assign(Slot& slot, std::shared_ptr<Request> r) {
  const std::vector<TokenId>& prompt = r->prompt;
  // The longest cached prefix among all slots (one token is always decoded,
  // for its logits).
  auto common = [&](const Slot& s) {
    return std::min(common_prefix(s.cached, prompt), prompt.size() - 1);
  };
  size_t keep = r->params.cache_prompt ? common(slot) : 0;
  const Slot* source = &slot;
  if (r->params.cache_prompt) {
    for (auto& other : slots_) {
      const size_t n = common(*other);
      if (n > keep) keep = n, source = other.get();
    }
  }
  KvCache& cache = context_.cache();
  if (source == &slot) {
    cache.seq_rm(slot.id, static_cast<int32_t>(keep), -1);
    slot.cached.resize(keep);
  } else {
    cache.seq_rm(slot.id, 0, -1);
    cache.seq_cp(source->id, slot.id, 0, static_cast<int32_t>(keep));
    slot.cached.assign(prompt.begin(), prompt.begin() + static_cast<ptrdiff_t>(keep));
  }
  slot.request = std::move(r);
  slot.request->phase_.store(Request::Phase::kPrompt);
  const GenerationParams& p = slot.request->params;
  slot.state = Slot::State::kPrompt;
  slot.prompt_next = keep;
  slot.n_cached = static_cast<int64_t>(keep);
  slot.n_gen = 0;
  slot.sample_ms = 0;
  slot.text = TextStream(p.stop);
  slot.reasoning.reset();
  slot.tool_parser.reset();
  slot.harmony.reset();
  slot.preserved.clear();
  if (p.harmony) {
    slot.harmony.emplace(p.split_reasoning,
                         p.tools ? p.tools->tool_names : std::vector<std::string>{});
  } else if (p.split_reasoning) {
    slot.reasoning.emplace(p.reasoning_open);
  }
  if (p.tools && !p.harmony) {
    slot.tool_parser.emplace(p.tools->format, p.tools->forced, p.tools->tool_names);
    for (const std::string& m : tool_markers(p.tools->format)) {
      if (std::optional<TokenId> id = tokenizer_.find(m)) slot.preserved.push_back(*id);
    }
  }
  slot.pending = Event{};
  SamplerParams sp = p.sampling;
  if (p.ignore_eos) sp.banned.insert(sp.banned.end(), eog_tokens_.begin(), eog_tokens_.end());
  slot.sampler = std::make_unique<Sampler>(
      sp, slot_ctx_, p.masks ? p.masks() : std::vector<std::unique_ptr<SamplerStage>>{});
  for (TokenId t : slot.request->prompt) slot.sampler->accept(t);
  slot.start = Clock::now();
}

// Cancelled requests end; waiting ones go into idle slots, each to the slot
// whose cache shares the longest prefix with its prompt.
void Generator::admit() {
  for (auto& s : slots_) {
    // A slot in flight ends once its batch is back.
    if (s->state != Slot::State::kIdle && !s->in_flight && s->request->cancelled()) {
      finish(*s, FinishReason::kCancelled);
    }
  }
  std::vector<std::shared_ptr<Request>> gone;
  {
    std::lock_guard lock(mutex_);
    for (auto it = queue_.begin(); it != queue_.end();) {
      if ((*it)->cancelled()) {
        gone.push_back(std::move(*it));
        it = queue_.erase(it);
        ++metrics_.cancelled;
        continue;
      }
      Slot* best = nullptr;
      size_t best_n = 0;
      for (auto& s : slots_) {
        if (s->state != Slot::State::kIdle) continue;
        const size_t n = common_prefix(s->cached, (*it)->prompt);
        if (best == nullptr || n > best_n) best = s.get(), best_n = n;
      }
      if (best == nullptr) break;
      if (deferred(**it)) {
        ++it;
        continue;
      }
      assign(*best, std::move(*it));
      it = queue_.erase(it);
      ++metrics_.slots_busy;  // now, not after the step (a stall shows while it runs)
    }
    metrics_.queued = static_cast<int>(queue_.size());
  }
  for (auto& r : gone) {
    Event e;
    e.done = true;
    e.finish = FinishReason::kCancelled;
    e.n_prompt = static_cast<int64_t>(r->prompt.size());
    r->phase_.store(Request::Phase::kDone);
    if (r->sink_) r->sink_(std::move(e));
  }
}

// One step: a batch of the slots that are not in flight, submitted; then,
// once as many batches are in flight as the context has ranks (one without
// a pipeline), the oldest collected and its tokens sampled. Each batch holds
// the next token of its generating slots, then prompt chunks. On a pipeline
// of S ranks a batch takes about 1/S of the busy slots, so that rank 0
// computes one group's next batch while the other ranks run the others.
bool Generator::step() {
  admit();
  const auto depth = static_cast<size_t>(context_.pipeline_depth());
  size_t busy = 0;
  for (auto& s : slots_) busy += s->state != Slot::State::kIdle ? 1 : 0;
  size_t cap = (busy + depth - 1) / depth;  // slots in this batch
  batch_.clear();
  std::vector<Slot*> in_batch;
  int64_t budget = context_.n_batch();
  for (auto& s : slots_) {
    if (s->state != Slot::State::kGenerating || s->in_flight || in_batch.size() >= cap) continue;
    s->batch_index = static_cast<int>(batch_.size());
    s->n_decoding = 0;
    batch_.add(s->last, static_cast<int32_t>(s->cached.size()), {s->id}, true);
    in_batch.push_back(s.get());
    --budget;
  }
  for (auto& s : slots_) {
    if (s->state != Slot::State::kPrompt || s->in_flight || budget <= 0 || in_batch.size() >= cap) {
      continue;
    }
    const std::vector<TokenId>& prompt = s->request->prompt;
    const size_t n = std::min<size_t>(static_cast<size_t>(budget), prompt.size() - s->prompt_next);
    s->batch_index = -1;
    for (size_t i = 0; i < n; ++i) {
      const size_t at = s->prompt_next + i;
      const bool last = at + 1 == prompt.size();
      if (last) s->batch_index = static_cast<int>(batch_.size());
      batch_.add(prompt[at], static_cast<int32_t>(at), {s->id}, last);
    }
    s->n_decoding = n;
    in_batch.push_back(s.get());
    budget -= static_cast<int64_t>(n);
  }
  bool submitted = false;
  if (batch_.size() > 0) {
    try {
      context_.submit(batch_);
      // Tokens are handled in slot order, as with one batch a step.
      std::sort(in_batch.begin(), in_batch.end(), [](const Slot* a, const Slot* b) { return a->id < b->id; });
      for (Slot* s : in_batch) s->in_flight = true;
      flights_.push_back(std::move(in_batch));
      submitted = true;
    } catch (const std::exception& e) {
      fail_all(e.what());
      return true;
    }
  }
  if (flights_.empty()) {
    update_gauges();
    return false;
  }
  if (flights_.size() >= depth || !submitted) collect(/*sample=*/true);
  update_gauges();
  return true;
}

// The oldest batch in flight: its tokens are in the cache now; with
// `sample`, the slots whose token asked get their next token.
void Generator::collect(bool sample) {
  const std::vector<Slot*> slots = std::move(flights_.front());
  flights_.pop_front();
  for (Slot* s : slots) s->in_flight = false;
  try {
    context_.collect();
    for (Slot* s : slots) {
      if (s->state == Slot::State::kGenerating) {
        s->cached.push_back(s->last);
      } else if (s->state == Slot::State::kPrompt && s->n_decoding > 0) {
        const std::vector<TokenId>& prompt = s->request->prompt;
        const auto from = prompt.begin() + static_cast<ptrdiff_t>(s->prompt_next);
        s->cached.insert(s->cached.end(), from, from + static_cast<ptrdiff_t>(s->n_decoding));
        s->prompt_next += s->n_decoding;
        if (s->prompt_next == prompt.size()) {
          s->state = Slot::State::kGenerating;
          s->request->phase_.store(Request::Phase::kGenerating);
          s->first_token = Clock::now();
        }
      }
    }
    {
      std::lock_guard lock(mutex_);
      ++metrics_.steps;
      last_progress_ = Clock::now();
    }
    if (!sample) return;
    for (Slot* s : slots) {
      if (s->batch_index >= 0 && s->state == Slot::State::kGenerating) {
        handle_token(*s, context_.logits(static_cast<size_t>(s->batch_index)));
      }
    }
  } catch (const std::exception& e) {
    fail_all(e.what());
  }
}

// Every batch in flight collected (tokens into the cache, none sampled):
// before the cache is read or changed outside a step, and at the end.
void Generator::drain() {
  while (!flights_.empty()) collect(/*sample=*/false);
}

// A failed batch ends every request running (the cache is as before the
// batches that failed); the batches still in flight are read first.
void Generator::fail_all(const std::string& error) {
  while (!flights_.empty()) {
    for (Slot* s : flights_.front()) s->in_flight = false;
    flights_.pop_front();
    try {
      context_.collect();
    } catch (const std::exception&) {
      // The first error is the one reported.
    }
  }
  for (auto& s : slots_) {
    if (s->state != Slot::State::kIdle) finish(*s, FinishReason::kError, error);
  }
}

void Generator::update_gauges() {
  std::lock_guard lock(mutex_);
  metrics_.plans_built = context_.plans_built();
  metrics_.kv_cells_used = context_.cache().used();
  metrics_.slots_busy = static_cast<int>(std::count_if(
      slots_.begin(), slots_.end(), [](auto& s) { return s->state != Slot::State::kIdle; }));
}

void Generator::handle_token(Slot& s, std::span<const float> logits) {
  const GenerationParams& p = s.request->params;
  if (p.max_tokens == 0) {  // the prompt only (its cache, its timings)
    finish(s, FinishReason::kLength);
    return;
  }
  SampleLogprobs lp;
  const double t0 = thread_cpu_ms();
  const TokenId tok = s.sampler->sample(logits, p.top_logprobs >= 0 ? &lp : nullptr,
                                        std::max(p.top_logprobs, 0));
  s.sampler->accept(tok);
  s.sample_ms += thread_cpu_ms() - t0;
  ++s.n_gen;
  s.request->generated_.store(s.n_gen);
  if (p.top_logprobs >= 0) {
    auto prob = [&](TokenLogprob t) {
      return TokenProb{t.id, tokenizer_.token_to_piece(t.id, false), t.logprob};
    };
    std::vector<TokenProb> alts;
    for (const TokenLogprob& t : lp.top) alts.push_back(prob(t));
    s.pending.probs.emplace_back(prob(lp.chosen), std::move(alts));
  }
  s.last = tok;
  FinishReason reason = FinishReason::kNone;
  if (tokenizer_.is_eog(tok) && !p.ignore_eos) {
    reason = FinishReason::kEndOfText;
  } else if (s.text.add(tokenizer_.token_to_piece(
                 tok, /*render_special=*/std::find(s.preserved.begin(), s.preserved.end(), tok) !=
                          s.preserved.end()))) {
    reason = FinishReason::kStop;
  } else if (p.max_tokens >= 0 && s.n_gen >= p.max_tokens) {
    reason = FinishReason::kLength;
  } else if (static_cast<int64_t>(s.cached.size()) + 1 >= slot_ctx_) {
    reason = FinishReason::kLength;
  }
  if (reason != FinishReason::kNone) {
    finish(s, reason);
    return;
  }
  // Send what is certain: a partial stop string or UTF-8 character waits.
  put_text(s, s.text.take_ready(), false);
  if (!s.pending.text.empty() || !s.pending.reasoning.empty() || !s.pending.probs.empty() ||
      !s.pending.tool_calls.empty()) {
    s.send(std::exchange(s.pending, Event{}));
  }
}

namespace {

// `text` through a splitter of thinking and answer (`add` its feeding
// call), and at the end what it held back: its Parts.
template <class Splitter, class Add>
auto split_parts(Splitter& splitter, Add add, std::string_view text, bool last) {
  auto parts = (splitter.*add)(text);
  if (last) {
    auto rest = splitter.finish();
    parts.reasoning += rest.reasoning;
    parts.content += rest.content;
  }
  return parts;
}

}  // namespace

// New text into the next event: as it is, or split into thinking and
// answer, and the answer into content and tool calls.
void Generator::put_text(Slot& s, std::string&& text, bool last) {
  std::string content;
  if (s.harmony) {
    HarmonyParser::Parts parts = split_parts(*s.harmony, &HarmonyParser::feed, text, last);
    s.pending.reasoning += parts.reasoning;
    s.pending.text += parts.content;
    for (ToolCall& c : s.harmony->take_calls()) s.pending.tool_calls.push_back(std::move(c));
    return;
  }
  if (s.reasoning) {
    ReasoningSplitter::Parts parts = split_parts(*s.reasoning, &ReasoningSplitter::add, text, last);
    s.pending.reasoning += parts.reasoning;
    content = std::move(parts.content);
  } else {
    content = std::move(text);
  }
  if (s.tool_parser) {
    content = s.tool_parser->feed(content);
    if (last) content += s.tool_parser->finish();
    for (ToolCall& c : s.tool_parser->take_calls()) s.pending.tool_calls.push_back(std::move(c));
  }
  s.pending.text += content;
}

void Generator::finish(Slot& s, FinishReason reason, const std::string& error) {
  const Clock::time_point now = Clock::now();
  const bool started = s.state == Slot::State::kGenerating;
  put_text(s, s.text.take_rest(), true);
  Event e = std::exchange(s.pending, Event{});
  e.done = true;
  e.finish = reason;
  e.error = error;
  if (reason == FinishReason::kStop) e.stop = s.text.stopped_by();
  e.n_prompt = static_cast<int64_t>(s.request->prompt.size());
  e.n_cached = s.n_cached;
  e.n_gen = s.n_gen;
  e.prompt_ms = ms_between(s.start, started ? s.first_token : now);
  e.gen_ms = started ? ms_between(s.first_token, now) : 0.0;
  e.seed = s.sampler->seed();
  e.sample_ms = s.sample_ms;
  {
    std::lock_guard lock(mutex_);
    metrics_.prompt_tokens += static_cast<uint64_t>(
        static_cast<int64_t>(s.prompt_next) - std::min<int64_t>(s.n_cached, static_cast<int64_t>(s.prompt_next)));
    metrics_.cached_tokens += static_cast<uint64_t>(e.n_cached);
    metrics_.generated_tokens += static_cast<uint64_t>(e.n_gen);
    metrics_.prompt_seconds += e.prompt_ms / 1000;
    metrics_.generation_seconds += e.gen_ms / 1000;
    if (reason == FinishReason::kCancelled) ++metrics_.cancelled;
  }
  if (!error.empty()) {  // what the failed step left is not known to be whole
    context_.cache().seq_rm(s.id, 0, -1);
    s.cached.clear();
  }
  // The slot is free before the sink hears of the end (a status read then
  // shows it free).
  const std::shared_ptr<Request> r = std::move(s.request);
  s.state = Slot::State::kIdle;
  last_slot_ = s.id;
  update_gauges();
  r->phase_.store(Request::Phase::kDone);
  if (r->sink_) r->sink_(std::move(e));
}

void Generator::between_steps(const std::function<void()>& task) {
  auto done = std::make_shared<std::promise<void>>();
  std::future<void> result = done->get_future();
  {
    std::unique_lock lock(mutex_);
    if (stopping_) throw Stopped("the generator has shut down");
    // Not started (the CLI steps on its own thread), or called from a sink
    // on the loop's thread: it is between steps here already.
    if (!started_ || std::this_thread::get_id() == thread_.get_id()) {
      lock.unlock();
      task();
      return;
    }
    tasks_.push_back([&task, done] {
      try {
        task();
        done->set_value();
      } catch (...) {
        done->set_exception(std::current_exception());
      }
    });
  }
  cv_.notify_one();
  result.get();
}

void Generator::run_tasks() {
  std::deque<std::function<void()>> tasks;
  {
    std::lock_guard lock(mutex_);
    tasks.swap(tasks_);
  }
  // The batches in flight come back first (sampled: their requests go on).
  if (!tasks.empty()) {
    while (!flights_.empty()) collect(/*sample=*/true);
  }
  for (auto& t : tasks) t();
}

// Sessions hold every layer's cache rows; on a pipeline rank 0 has its own.
void Generator::check_sessions(const std::filesystem::path& path) const {
  if (context_.pipeline_depth() > 1) {
    fail(ErrorCategory::kUnsupported, "[session {}] sessions are not available while the model "
         "is split across {} MPI ranks", path.string(), context_.pipeline_depth());
  }
}

size_t Generator::save_session(const std::filesystem::path& path) {
  check_sessions(path);
  size_t saved = 0;
  between_steps([&] {
    const Slot& s = *slots_[static_cast<size_t>(last_slot_)];
    if (s.state != Slot::State::kIdle) {
      fail(ErrorCategory::kInvalidArgument, "[session {}] the last completion's slot runs another "
           "request now; save when it is idle", path.string());
    }
    const std::vector<int64_t> cells = context_.cache().seq_cells(s.id);
    // The file stores no positions: they must be 0..n-1 (distinct, so a
    // largest of n-1 says so).
    TESSERA_CHECK(cells.size() == s.cached.size());
    TESSERA_CHECK(context_.cache().seq_pos_max(s.id) + 1 == static_cast<int32_t>(cells.size()));
    write_session(path, model_, context_.cache(), s.cached, cells);
    saved = s.cached.size();
  });
  return saved;
}

std::vector<TokenId> Generator::load_session(const std::filesystem::path& path) {
  check_sessions(path);
  std::vector<TokenId> tokens;
  between_steps([&] {
    Slot* slot = nullptr;
    for (auto& s : slots_) {
      if (s->state == Slot::State::kIdle && (slot == nullptr || s->id == last_slot_)) slot = s.get();
    }
    if (slot == nullptr) {
      fail(ErrorCategory::kInvalidArgument, "[session {}] every slot is busy; load it when one "
           "is idle", path.string());
    }
    KvCache& cache = context_.cache();
    cache.seq_rm(slot->id, 0, -1);
    slot->cached.clear();
    auto claim = [&](std::span<const TokenId> saved) {
      const auto n = static_cast<int64_t>(saved.size());
      if (n >= slot_ctx_) {
        fail(ErrorCategory::kInvalidArgument, "[session {}] holds {} tokens, a slot {} (and one "
             "more to generate)", path.string(), n, slot_ctx_);
      }
      Batch b;
      for (int64_t i = 0; i < n; ++i) {
        b.add(saved[static_cast<size_t>(i)], static_cast<int32_t>(i), {slot->id}, false);
      }
      std::vector<int64_t> cells(static_cast<size_t>(n));
      cache.find_slot(b, 0, static_cast<size_t>(n), cells);
      return cells;
    };
    tokens = read_session(path, model_, cache, claim,
                          [&](std::span<const int64_t> cells) { cache.release(cells); });
    slot->cached = tokens;
    last_slot_ = slot->id;
    update_gauges();
  });
  return tokens;
}

void Generator::clear_cache() {
  between_steps([&] {
    for (auto& s : slots_) {
      if (s->state != Slot::State::kIdle) continue;
      context_.cache().seq_rm(s->id, 0, -1);
      s->cached.clear();
    }
    update_gauges();
  });
}

}  // namespace tessera::serving
