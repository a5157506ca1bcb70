#include "tessera/engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <unordered_map>

#include "tessera/core/error.h"

namespace tessera {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

bool by_logit(const TokenData& a, const TokenData& b) {
  return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
}

void sort_all(Candidates& c) {
  if (c.sorted) return;
  std::sort(c.data.begin(), c.data.end(), by_logit);
  c.sorted = true;
}

// Softmax over the candidates' logits (sorted: the first is the largest).
void softmax(const Candidates& c, std::vector<float>& probs) {
  probs.resize(c.data.size());
  const float max = c.data.empty() ? 0.0f : c.data[0].logit;
  double sum = 0.0;
  for (size_t i = 0; i < c.data.size(); ++i) {
    probs[i] = std::exp(c.data[i].logit - max);
    sum += probs[i];
  }
  for (float& p : probs) p = static_cast<float>(p / sum);
}

class LogitBias final : public SamplerStage {
 public:
  explicit LogitBias(std::vector<std::pair<int32_t, float>> bias) : bias_(std::move(bias)) {}
  std::string_view name() const override { return "logit-bias"; }
  void apply(Candidates& c) override {
    for (const auto& [id, b] : bias_) {
      if (id >= 0 && static_cast<size_t>(id) < c.data.size()) c.data[static_cast<size_t>(id)].logit += b;
    }
  }

 private:
  std::vector<std::pair<int32_t, float>> bias_;
};

// Stages before any narrowing see the candidates in id order (index = id).
class Ban final : public SamplerStage {
 public:
  explicit Ban(std::vector<int32_t> tokens) : tokens_(std::move(tokens)) {}
  std::string_view name() const override { return "ban"; }
  void apply(Candidates& c) override {
    for (int32_t id : tokens_) {
      if (id >= 0 && static_cast<size_t>(id) < c.data.size()) c.data[static_cast<size_t>(id)].logit = kNegInf;
    }
  }

 private:
  std::vector<int32_t> tokens_;
};

class Penalties final : public SamplerStage {
 public:
  Penalties(float repeat, float presence, float frequency, size_t last_n)
      : repeat_(repeat), presence_(presence), frequency_(frequency), cap_(last_n) {}
  std::string_view name() const override { return "penalties"; }
  void accept(int32_t token) override {
    if (cap_ == 0) return;
    history_.push_back(token);
    if (history_.size() > cap_) history_.pop_front();
  }
  void apply(Candidates& c) override {
    const bool active = repeat_ != 1.0f || presence_ != 0.0f || frequency_ != 0.0f;
    if (!active || history_.empty()) return;
    count_.clear();
    for (int32_t t : history_) count_[t] += 1;
    for (TokenData& x : c.data) {
      auto it = count_.find(x.id);
      if (it == count_.end()) continue;
      // As llama.cpp: shrink a positive logit, grow a negative one.
      x.logit = x.logit <= 0 ? x.logit * repeat_ : x.logit / repeat_;
      x.logit -= static_cast<float>(it->second) * frequency_ + presence_;
    }
  }

 private:
  float repeat_, presence_, frequency_;
  size_t cap_;
  std::deque<int32_t> history_;
  std::unordered_map<int32_t, int> count_;
};

class NanGuard final : public SamplerStage {
 public:
  std::string_view name() const override { return "nan-guard"; }
  void apply(Candidates& c) override {
    for (TokenData& x : c.data) {
      if (std::isnan(x.logit)) x.logit = kNegInf;
    }
  }
};

class TopK final : public SamplerStage {
 public:
  explicit TopK(int32_t k) : k_(k) {}
  std::string_view name() const override { return "top-k"; }
  void apply(Candidates& c) override {
    size_t k = c.data.size();
    if (k_ > 0) k = std::min(k, static_cast<size_t>(k_));
    if (!c.sorted) {
      std::partial_sort(c.data.begin(), c.data.begin() + static_cast<ptrdiff_t>(k), c.data.end(),
                        by_logit);
    }
    c.data.resize(k);
    c.sorted = true;
  }

 private:
  int32_t k_;
};

// The smallest prefix whose probability reaches p.
class TopP final : public SamplerStage {
 public:
  explicit TopP(float p) : p_(p) {}
  std::string_view name() const override { return "top-p"; }
  void apply(Candidates& c) override {
    if (p_ >= 1.0f || c.data.empty()) return;
    sort_all(c);
    softmax(c, probs_);
    double cum = 0.0;
    size_t keep = c.data.size();
    for (size_t i = 0; i < c.data.size(); ++i) {
      cum += probs_[i];
      if (cum >= p_) {
        keep = i + 1;
        break;
      }
    }
    c.data.resize(keep);
  }

 private:
  float p_;
  std::vector<float> probs_;
};

// Tokens at least p times as likely as the best.
class MinP final : public SamplerStage {
 public:
  explicit MinP(float p) : p_(p) {}
  std::string_view name() const override { return "min-p"; }
  void apply(Candidates& c) override {
    if (p_ <= 0.0f || c.data.empty()) return;
    sort_all(c);
    const float floor = c.data[0].logit + std::log(p_);
    size_t keep = 1;
    while (keep < c.data.size() && c.data[keep].logit >= floor) ++keep;
    c.data.resize(keep);
  }

 private:
  float p_;
};

class Temperature final : public SamplerStage {
 public:
  explicit Temperature(float t) : t_(t) {}
  std::string_view name() const override { return "temperature"; }
  void apply(Candidates& c) override {
    // Nothing finite to weigh (all banned, or an infinite logit): left as
    // it is for the draw, which then takes the best.
    if (c.data.empty()) return;
    const float best = c.sorted ? c.data[0].logit
                                : std::min_element(c.data.begin(), c.data.end(), by_logit)->logit;
    if (!std::isfinite(best)) return;
    for (TokenData& x : c.data) x.logit /= t_;
  }

 private:
  float t_;
};

class Greedy final : public SamplerStage {
 public:
  std::string_view name() const override { return "greedy"; }
  void apply(Candidates& c) override {
    if (c.data.empty()) return;
    c.selected = c.sorted ? c.data[0].id
                          : std::min_element(c.data.begin(), c.data.end(), by_logit)->id;
  }
};

class Draw final : public SamplerStage {
 public:
  explicit Draw(uint32_t seed) : rng_(seed) {}
  std::string_view name() const override { return "draw"; }
  void apply(Candidates& c) override {
    if (c.data.empty()) return;
    sort_all(c);
    if (!std::isfinite(c.data[0].logit)) {
      c.selected = c.data[0].id;
      return;
    }
    softmax(c, probs_);
    std::discrete_distribution<size_t> draw(probs_.begin(), probs_.end());
    c.selected = c.data[draw(rng_)].id;
  }

 private:
  std::mt19937 rng_;
  std::vector<float> probs_;
};

}  // namespace

namespace sampling {

std::unique_ptr<SamplerStage> logit_bias(std::vector<std::pair<int32_t, float>> bias) {
  return std::make_unique<LogitBias>(std::move(bias));
}
std::unique_ptr<SamplerStage> ban(std::vector<int32_t> tokens) {
  return std::make_unique<Ban>(std::move(tokens));
}
std::unique_ptr<SamplerStage> penalties(float repeat, float presence, float frequency,
                                        size_t last_n) {
  return std::make_unique<Penalties>(repeat, presence, frequency, last_n);
}
std::unique_ptr<SamplerStage> nan_guard() { return std::make_unique<NanGuard>(); }
std::unique_ptr<SamplerStage> top_k(int32_t k) { return std::make_unique<TopK>(k); }
std::unique_ptr<SamplerStage> top_p(float p) { return std::make_unique<TopP>(p); }
std::unique_ptr<SamplerStage> min_p(float p) { return std::make_unique<MinP>(p); }
std::unique_ptr<SamplerStage> temperature(float t) { return std::make_unique<Temperature>(t); }
std::unique_ptr<SamplerStage> greedy() { return std::make_unique<Greedy>(); }
std::unique_ptr<SamplerStage> draw(uint32_t seed) { return std::make_unique<Draw>(seed); }

}  // namespace sampling

void check_sampler_params(const SamplerParams& p) {
  if (p.top_p < 0 || p.top_p > 1 || p.min_p < 0 || p.min_p > 1) {
    fail(ErrorCategory::kInvalidArgument, "[sampler] top-p {} and min-p {}: expected 0 to 1",
         p.top_p, p.min_p);
  }
  if (p.repeat_last_n < -1) {
    fail(ErrorCategory::kInvalidArgument, "[sampler] repeat-last-n {}: expected >= -1",
         p.repeat_last_n);
  }
}

Sampler::Sampler(const SamplerParams& p, int64_t n_ctx,
                 std::vector<std::unique_ptr<SamplerStage>> masks) {
  check_sampler_params(p);
  seed_ = p.seed == 0xFFFFFFFF ? std::random_device{}() : p.seed;
  if (!p.logit_bias.empty()) add(sampling::logit_bias(p.logit_bias));
  if (!p.banned.empty()) add(sampling::ban(p.banned));
  for (auto& m : masks) add(std::move(m));
  const size_t last_n = p.repeat_last_n < 0 ? static_cast<size_t>(std::max<int64_t>(n_ctx, 0))
                                            : static_cast<size_t>(p.repeat_last_n);
  add(sampling::penalties(p.repeat_penalty, p.presence_penalty, p.frequency_penalty, last_n));
  add(sampling::nan_guard());
  const bool reordered = p.repeat_penalty != 1.0f || p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f;
  pick_limit_ = reordered ? 0 : p.temp <= 0.0f ? 1 : std::max(p.top_k, 0);
  if (p.temp <= 0.0f) {
    add(sampling::greedy());
    return;
  }
  add(sampling::top_k(p.top_k));
  if (p.top_p < 1.0f) add(sampling::top_p(p.top_p));
  if (p.min_p > 0.0f) add(sampling::min_p(p.min_p));
  add(sampling::temperature(p.temp));
  add(sampling::draw(seed_));
}

Sampler& Sampler::add(std::unique_ptr<SamplerStage> stage) {
  if (!stage) fail(ErrorCategory::kInvalidArgument, "[sampler] a stage is null");
  stages_.push_back(std::move(stage));
  return *this;
}

int32_t Sampler::sample(std::span<const float> logits, SampleLogprobs* logprobs, int n_top) {
  if (logits.empty()) fail(ErrorCategory::kInvalidArgument, "[sampler] no logits");
  Candidates& c = candidates_;
  c.data.resize(logits.size());
  for (size_t i = 0; i < logits.size(); ++i) c.data[i] = {static_cast<int32_t>(i), logits[i]};
  c.sorted = false;
  c.selected = -1;
  c.pick_limit = pick_limit_;
  for (auto& stage : stages_) {
    stage->apply(c);
    if (c.selected >= 0) break;
  }
  if (c.selected < 0) {  // no picking stage, or it had nothing: the best left
    for (TokenData& x : c.data) {
      if (std::isnan(x.logit)) x.logit = kNegInf;
    }
    if (c.data.empty()) fail(ErrorCategory::kInvalidArgument, "[sampler] every token was removed");
    c.selected = std::min_element(c.data.begin(), c.data.end(), by_logit)->id;
  }
  const int32_t token = c.selected;
  if (logprobs != nullptr) {
    // log-softmax over the raw logits, as OpenAI reports them.
    const float mx = *std::max_element(logits.begin(), logits.end());
    double sum = 0;
    for (float l : logits) sum += std::exp(double(l) - mx);
    const float lse = mx + static_cast<float>(std::log(sum));
    logprobs->chosen = {token, logits[static_cast<size_t>(token)] - lse};
    logprobs->top.clear();
    const auto k = static_cast<size_t>(std::clamp<int64_t>(n_top, 0, std::ssize(logits)));
    if (k > 0) {
      std::vector<int32_t> ids(logits.size());
      for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>(i);
      std::partial_sort(ids.begin(), ids.begin() + static_cast<ptrdiff_t>(k), ids.end(),
                        [&](int32_t a, int32_t b) { return logits[size_t(a)] > logits[size_t(b)]; });
      for (size_t i = 0; i < k; ++i) {
        logprobs->top.push_back({ids[i], logits[static_cast<size_t>(ids[i])] - lse});
      }
    }
  }
  return token;
}

void Sampler::accept(int32_t token) {
  for (auto& stage : stages_) stage->accept(token);
}

std::vector<std::string_view> Sampler::stage_names() const {
  std::vector<std::string_view> names;
  for (const auto& s : stages_) names.push_back(s->name());
  return names;
}

}  // namespace tessera
