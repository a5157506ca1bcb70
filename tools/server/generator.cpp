#include "server/generator.h"

#include <algorithm>
#include <cmath>

#include "tessera/error.h"

namespace tessera::server {
namespace {

using Clock = std::chrono::steady_clock;

double ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

// Bytes at the end of `s` that start a UTF-8 character not yet complete.
size_t incomplete_utf8_tail(const std::string& s) {
  for (size_t back = 1; back <= std::min<size_t>(4, s.size()); ++back) {
    const auto c = static_cast<unsigned char>(s[s.size() - back]);
    if ((c & 0xC0) == 0x80) continue;  // continuation byte: look further back
    const size_t need = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
    return need > back ? back : 0;
  }
  return 0;
}

// Longest suffix of `s` that is a proper prefix of some stop string: text
// held back until the next token shows whether the stop string follows.
size_t partial_stop_tail(const std::string& s, const std::vector<std::string>& stops) {
  size_t hold = 0;
  for (const std::string& stop : stops) {
    for (size_t n = std::min(stop.size() - 1, s.size()); n > hold; --n) {
      if (s.compare(s.size() - n, n, stop, 0, n) == 0) {
        hold = n;
        break;
      }
    }
  }
  return hold;
}

size_t common_prefix(const std::vector<TokenId>& a, const std::vector<TokenId>& b) {
  const auto end = std::min(a.size(), b.size());
  return static_cast<size_t>(std::mismatch(a.begin(), a.begin() + static_cast<ptrdiff_t>(end), b.begin()).first -
                             a.begin());
}

}  // namespace

void Request::push(Event e) {
  {
    std::lock_guard lock(mutex_);
    events_.push_back(std::move(e));
  }
  cv_.notify_one();
}

std::optional<Event> Request::pop(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mutex_);
  if (!cv_.wait_for(lock, timeout, [&] { return !events_.empty(); })) return std::nullopt;
  Event e = std::move(events_.front());
  events_.pop_front();
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
  int64_t n_gen = 0, n_cached = 0;
  std::string text;     // generated text not yet sent (held back: partial stop / UTF-8)
  std::string emitted;  // all text sent, for stop strings spanning events
  Event pending;        // what the next push sends
  int batch_index = -1;  // this step's token asking for logits
  size_t n_decoding = 0;  // prompt tokens in this step's batch
  Clock::time_point start, first_token;
};

Generator::Generator(const Model& model, const Tokenizer& tokenizer,
                     const GeneratorOptions& options)
    : model_(model),
      tokenizer_(tokenizer),
      context_(model, {.n_ctx = options.n_ctx, .n_batch = options.n_batch}),
      slot_ctx_(context_.n_ctx() / std::max(options.n_slots, 1)) {
  if (options.n_slots < 1 || options.n_slots > kMaxSequences) {
    fail(ErrorCategory::kInvalidArgument, "[--parallel] found {} slots, expected 1..{}",
         options.n_slots, kMaxSequences);
  }
  for (int i = 0; i < options.n_slots; ++i) {
    slots_.push_back(std::make_unique<Slot>());
    slots_.back()->id = i;
  }
  metrics_.slots = options.n_slots;
  metrics_.kv_cells = context_.n_ctx();
  thread_ = std::thread([this] { loop(); });
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
  {
    std::lock_guard lock(mutex_);
    if (stopping_) fail(ErrorCategory::kUnsupported, "the server is shutting down");
    queue_.push_back(r);
    ++metrics_.requests;
  }
  cv_.notify_one();
}

void Generator::shutdown() {
  {
    std::lock_guard lock(mutex_);
    if (stopping_ && !thread_.joinable()) return;
    stopping_ = true;
  }
  cv_.notify_one();
  if (thread_.joinable()) thread_.join();
}

GeneratorMetrics Generator::metrics() const {
  std::lock_guard lock(mutex_);
  return metrics_;
}

void Generator::loop() {
  while (true) {
    bool stopping = false;
    {
      std::unique_lock lock(mutex_);
      const bool busy = std::any_of(slots_.begin(), slots_.end(),
                                    [](auto& s) { return s->state != Slot::State::kIdle; });
      if (!busy) cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      stopping = stopping_;
    }
    if (stopping) {
      for (auto& s : slots_) {
        if (s->state != Slot::State::kIdle) finish(*s, "stop");
      }
      std::deque<std::shared_ptr<Request>> left;
      {
        std::lock_guard lock(mutex_);
        left.swap(queue_);
      }
      for (auto& r : left) {
        Event e;
        e.done = true;
        e.finish_reason = "error";
        e.error = "the server is shutting down";
        r->push(std::move(e));
      }
      return;
    }
    try {
      step();
    } catch (const std::exception& e) {
      // A failed step ends the requests in it; the cache is as before it.
      for (auto& s : slots_) {
        if (s->state != Slot::State::kIdle) finish(*s, "error", e.what());
      }
    }
    update_gauges();
  }
}

void Generator::assign(Slot& slot, std::shared_ptr<Request> r) {
  const std::vector<TokenId>& prompt = r->prompt;
  // The longest cached prefix among all slots (one token is always decoded,
  // for its logits).
  auto common = [&](const Slot& s) { return std::min(common_prefix(s.cached, prompt), prompt.size() - 1); };
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
  slot.state = Slot::State::kPrompt;
  slot.prompt_next = keep;
  slot.n_cached = static_cast<int64_t>(keep);
  slot.n_gen = 0;
  slot.text.clear();
  slot.emitted.clear();
  slot.pending = Event{};
  SamplerParams sp = slot.request->params.sampling;
  if (slot.request->params.ignore_eos) {
    for (TokenId t = 0; t < static_cast<TokenId>(tokenizer_.n_vocab()); ++t) {
      if (tokenizer_.is_eog(t)) sp.banned.push_back(t);
    }
  }
  slot.sampler = std::make_unique<Sampler>(sp, slot_ctx_);
  for (TokenId t : slot.request->prompt) slot.sampler->accept(t);
  slot.start = Clock::now();
}

bool Generator::step() {
  // Clients gone: free their slots.
  for (auto& s : slots_) {
    if (s->state != Slot::State::kIdle && s->request->cancelled.load()) {
      {
        std::lock_guard lock(mutex_);
        ++metrics_.cancelled;
        metrics_.generated_tokens += static_cast<uint64_t>(s->n_gen);
      }
      s->request.reset();
      s->state = Slot::State::kIdle;
    }
  }
  // Waiting requests into idle slots, preferring the slot whose cache
  // shares the longest prefix with the prompt.
  {
    std::lock_guard lock(mutex_);
    while (!queue_.empty()) {
      Slot* best = nullptr;
      size_t best_n = 0;
      const std::vector<TokenId>& prompt = queue_.front()->prompt;
      for (auto& s : slots_) {
        if (s->state != Slot::State::kIdle) continue;
        const size_t n = common_prefix(s->cached, prompt);
        if (best == nullptr || n > best_n) best = s.get(), best_n = n;
      }
      if (best == nullptr) break;
      std::shared_ptr<Request> r = std::move(queue_.front());
      queue_.pop_front();
      if (r->cancelled.load()) continue;
      assign(*best, std::move(r));
    }
    metrics_.queued = static_cast<int>(queue_.size());
  }

  // One batch: the next token of every generating slot, then prompt chunks.
  batch_.clear();
  int64_t budget = context_.n_batch();
  for (auto& s : slots_) {
    s->batch_index = -1;
    s->n_decoding = 0;
    if (s->state != Slot::State::kGenerating) continue;
    s->batch_index = static_cast<int>(batch_.size());
    batch_.add(s->last, static_cast<int32_t>(s->cached.size()), {s->id}, true);
    --budget;
  }
  for (auto& s : slots_) {
    if (s->state != Slot::State::kPrompt || budget <= 0) continue;
    const std::vector<TokenId>& prompt = s->request->prompt;
    const size_t n = std::min<size_t>(static_cast<size_t>(budget), prompt.size() - s->prompt_next);
    for (size_t i = 0; i < n; ++i) {
      const size_t at = s->prompt_next + i;
      const bool last = at + 1 == prompt.size();
      if (last) s->batch_index = static_cast<int>(batch_.size());
      batch_.add(prompt[at], static_cast<int32_t>(at), {s->id}, last);
    }
    s->n_decoding = n;
    budget -= static_cast<int64_t>(n);
  }
  if (batch_.size() == 0) return false;
  context_.decode(batch_);

  // The batch is in the cache now.
  for (auto& s : slots_) {
    if (s->state == Slot::State::kGenerating) {
      s->cached.push_back(s->last);
    } else if (s->state == Slot::State::kPrompt && s->n_decoding > 0) {
      const std::vector<TokenId>& prompt = s->request->prompt;
      const auto from = prompt.begin() + static_cast<ptrdiff_t>(s->prompt_next);
      s->cached.insert(s->cached.end(), from, from + static_cast<ptrdiff_t>(s->n_decoding));
      s->prompt_next += s->n_decoding;
      if (s->prompt_next == prompt.size()) {
        s->state = Slot::State::kGenerating;
        s->first_token = Clock::now();
      }
    }
  }
  {
    std::lock_guard lock(mutex_);
    ++metrics_.steps;
  }
  for (auto& s : slots_) {
    if (s->batch_index >= 0 && s->state == Slot::State::kGenerating) {
      handle_token(*s, context_.logits(static_cast<size_t>(s->batch_index)));
    }
  }
  return true;
}

void Generator::update_gauges() {
  std::lock_guard lock(mutex_);
  metrics_.plans_built = context_.plans_built();
  metrics_.kv_cells_used = context_.cache().used();
  metrics_.slots_busy = static_cast<int>(std::count_if(
      slots_.begin(), slots_.end(), [](auto& s) { return s->state != Slot::State::kIdle; }));
}

void Generator::handle_token(Slot& s, std::span<const float> logits) {
  const Request& r = *s.request;
  const TokenId tok = s.sampler->sample(logits);
  s.sampler->accept(tok);
  ++s.n_gen;
  if (r.params.top_logprobs >= 0) {
    // log-softmax over the raw logits (before sampling's penalties), as OpenAI reports them.
    const float mx = *std::max_element(logits.begin(), logits.end());
    double sum = 0;
    for (float l : logits) sum += std::exp(double(l) - mx);
    const float lse = mx + static_cast<float>(std::log(sum));
    auto prob = [&](TokenId id) {
      return TokenProb{id, tokenizer_.token_to_piece(id, false), logits[static_cast<size_t>(id)] - lse};
    };
    std::vector<TokenId> top;
    const auto k = static_cast<size_t>(std::min<int64_t>(r.params.top_logprobs, std::ssize(logits)));
    if (k > 0) {
      std::vector<TokenId> ids(logits.size());
      for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<TokenId>(i);
      std::partial_sort(ids.begin(), ids.begin() + static_cast<ptrdiff_t>(k), ids.end(),
                        [&](TokenId a, TokenId b) { return logits[size_t(a)] > logits[size_t(b)]; });
      top.assign(ids.begin(), ids.begin() + static_cast<ptrdiff_t>(k));
    }
    std::vector<TokenProb> alts;
    for (TokenId t : top) alts.push_back(prob(t));
    s.pending.probs.emplace_back(prob(tok), std::move(alts));
  }
  const bool eog = tokenizer_.is_eog(tok) && !r.params.ignore_eos;
  std::string reason;
  if (eog) {
    reason = "stop";
  } else {
    s.text += tokenizer_.token_to_piece(tok, /*render_special=*/false);
    // A stop string ends the text where it starts (it may span pieces): look
    // in the unsent text and the sent bytes a stop string could reach back to.
    size_t reach = 0;
    for (const std::string& stop : r.params.stop) reach = std::max(reach, stop.size() - 1);
    reach = std::min(reach, s.emitted.size());
    const std::string window = s.emitted.substr(s.emitted.size() - reach) + s.text;
    size_t cut = std::string::npos;
    for (const std::string& stop : r.params.stop) cut = std::min(cut, window.find(stop));
    if (cut != std::string::npos) {
      s.text = window.substr(reach, cut - std::min(cut, reach));
      reason = "stop";
    } else if (r.params.max_tokens >= 0 && s.n_gen >= r.params.max_tokens) {
      reason = "length";
    } else if (static_cast<int64_t>(s.cached.size()) + 1 >= slot_ctx_) {
      reason = "length";
    }
  }
  s.last = tok;
  if (!reason.empty()) {
    finish(s, reason);
    return;
  }
  // Send what is certain: hold back a partial stop string or UTF-8 character.
  const size_t hold = std::max(partial_stop_tail(s.text, r.params.stop), incomplete_utf8_tail(s.text));
  if (s.text.size() > hold || !s.pending.probs.empty()) {
    s.pending.text = s.text.substr(0, s.text.size() - hold);
    s.emitted += s.pending.text;
    s.text.erase(0, s.text.size() - hold);
    s.request->push(std::exchange(s.pending, Event{}));
  }
}

void Generator::finish(Slot& s, const std::string& reason, const std::string& error) {
  const Clock::time_point now = Clock::now();
  const bool started = s.state == Slot::State::kGenerating;
  Event e = std::exchange(s.pending, Event{});
  e.text = std::move(s.text);
  e.done = true;
  e.finish_reason = reason;
  e.error = error;
  e.n_prompt = static_cast<int64_t>(s.request->prompt.size());
  e.n_cached = s.n_cached;
  e.n_gen = s.n_gen;
  e.prompt_ms = ms_between(s.start, started ? s.first_token : now);
  e.gen_ms = started ? ms_between(s.first_token, now) : 0.0;
  {
    std::lock_guard lock(mutex_);
    metrics_.prompt_tokens += static_cast<uint64_t>(e.n_prompt - e.n_cached);
    metrics_.cached_tokens += static_cast<uint64_t>(e.n_cached);
    metrics_.generated_tokens += static_cast<uint64_t>(e.n_gen);
    metrics_.prompt_seconds += e.prompt_ms / 1000;
    metrics_.generation_seconds += e.gen_ms / 1000;
  }
  s.request->push(std::move(e));
  if (!error.empty()) {  // what the failed step left is not known to be whole
    context_.cache().seq_rm(s.id, 0, -1);
    s.cached.clear();
  }
  s.text.clear();
  s.request.reset();
  s.state = Slot::State::kIdle;
}

}  // namespace tessera::server
