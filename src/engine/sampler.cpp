#include "tessera/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <unordered_map>

#include "tessera/error.h"

namespace tessera {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Softmax over the candidates (sorted by logit, descending) into `probs`.
void softmax(const std::vector<float>& logits, std::vector<float>& probs) {
  probs.resize(logits.size());
  const float max = logits.empty() ? 0.0f : logits[0];
  double sum = 0.0;
  for (size_t i = 0; i < logits.size(); ++i) {
    probs[i] = std::exp(logits[i] - max);
    sum += probs[i];
  }
  for (float& p : probs) p = static_cast<float>(p / sum);
}

}  // namespace

Sampler::Sampler(const SamplerParams& params, int64_t n_ctx) : params_(params) {
  if (params_.top_p < 0 || params_.top_p > 1 || params_.min_p < 0 || params_.min_p > 1) {
    fail(ErrorCategory::kInvalidArgument, "[sampler] top-p {} and min-p {}: expected 0 to 1",
         params_.top_p, params_.min_p);
  }
  if (params_.repeat_last_n < -1) {
    fail(ErrorCategory::kInvalidArgument, "[sampler] repeat-last-n {}: expected >= -1",
         params_.repeat_last_n);
  }
  seed_ = params_.seed == 0xFFFFFFFF ? std::random_device{}() : params_.seed;
  rng_.seed(seed_);
  history_cap_ = params_.repeat_last_n < 0 ? static_cast<size_t>(n_ctx)
                                           : static_cast<size_t>(params_.repeat_last_n);
}

void Sampler::accept(int32_t token) {
  if (history_cap_ == 0) return;
  history_.push_back(token);
  if (history_.size() > history_cap_) history_.pop_front();
}

void Sampler::apply_penalties(std::vector<Candidate>& c) const {
  const bool active = params_.repeat_penalty != 1.0f || params_.presence_penalty != 0.0f ||
                      params_.frequency_penalty != 0.0f;
  if (!active || history_.empty()) return;
  std::unordered_map<int32_t, int> count;
  for (int32_t t : history_) count[t] += 1;
  for (Candidate& x : c) {
    auto it = count.find(x.id);
    if (it == count.end()) continue;
    // As llama.cpp: shrink a positive logit, grow a negative one.
    x.logit = x.logit <= 0 ? x.logit * params_.repeat_penalty : x.logit / params_.repeat_penalty;
    x.logit -= static_cast<float>(it->second) * params_.frequency_penalty +
               params_.presence_penalty;
  }
}

int32_t Sampler::sample(std::span<const float> logits) {
  if (logits.empty()) fail(ErrorCategory::kInvalidArgument, "[sampler] no logits");
  std::vector<Candidate> c(logits.size());
  for (size_t i = 0; i < logits.size(); ++i) c[i] = {static_cast<int32_t>(i), logits[i]};
  for (int32_t id : params_.banned) {
    if (id >= 0 && static_cast<size_t>(id) < c.size()) c[static_cast<size_t>(id)].logit = kNegInf;
  }
  apply_penalties(c);
  auto by_logit = [](const Candidate& a, const Candidate& b) {
    return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
  };
  // NaN logits would break the ordering: they never win.
  for (Candidate& x : c) {
    if (std::isnan(x.logit)) x.logit = kNegInf;
  }
  if (params_.temp <= 0.0f) {
    return std::min_element(c.begin(), c.end(), by_logit)->id;  // greedy
  }
  // top-k (also bounds the sort)
  size_t k = c.size();
  if (params_.top_k > 0) k = std::min(k, static_cast<size_t>(params_.top_k));
  std::partial_sort(c.begin(), c.begin() + static_cast<ptrdiff_t>(k), c.end(), by_logit);
  c.resize(k);
  std::vector<float> lg(c.size()), probs;
  for (size_t i = 0; i < c.size(); ++i) lg[i] = c[i].logit;
  // top-p: the smallest prefix whose probability reaches p
  if (params_.top_p < 1.0f) {
    softmax(lg, probs);
    double cum = 0.0;
    size_t keep = c.size();
    for (size_t i = 0; i < c.size(); ++i) {
      cum += probs[i];
      if (cum >= params_.top_p) {
        keep = i + 1;
        break;
      }
    }
    c.resize(keep);
    lg.resize(keep);
  }
  // min-p: tokens at least min_p times as likely as the best
  if (params_.min_p > 0.0f) {
    const float floor = lg[0] + std::log(params_.min_p);
    size_t keep = 1;
    while (keep < lg.size() && lg[keep] >= floor) ++keep;
    c.resize(keep);
    lg.resize(keep);
  }
  // Nothing finite left to weigh (all banned, or an infinite logit): the best one.
  if (!std::isfinite(lg[0])) return c[0].id;
  for (float& x : lg) x /= params_.temp;
  softmax(lg, probs);
  std::discrete_distribution<size_t> draw(probs.begin(), probs.end());
  return c[draw(rng_)].id;
}

}  // namespace tessera
