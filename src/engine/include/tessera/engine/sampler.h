// Sampler: picks the next token from logits through a chain of small stages.
// Each stage narrows or reweighs the candidates (every token of the
// vocabulary at first); the last one picks. Sampler(params) builds
// llama.cpp's chain with its flags and defaults:
//   logit bias -> banned tokens -> token masks -> penalties -> NaN guard
//   -> top-k -> top-p -> min-p -> temperature -> draw
// and temperature <= 0 ends after the NaN guard with a greedy pick. Token
// masks are where constraints plug in (grammars, JSON schemas): any
// SamplerStage that sets the logits of forbidden tokens to -inf.
// Log-probabilities are an output of the chain, over the raw logits as
// OpenAI reports them. Same seed, same tokens.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <random>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

namespace tessera {

struct SamplerParams {
  float temp = 0.8f;
  int32_t top_k = 40;  // <= 0: off
  float top_p = 0.95f;  // 1: off
  float min_p = 0.05f;  // 0: off
  float repeat_penalty = 1.0f;  // 1: off
  int32_t repeat_last_n = 64;   // 0: off, -1: the whole context
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  uint32_t seed = 0xFFFFFFFF;  // 0xFFFFFFFF: a random seed
  std::vector<int32_t> banned;  // tokens never sampled (e.g. EOS with --ignore-eos)
  std::vector<std::pair<int32_t, float>> logit_bias;  // added to a token's logit first
};

// Throws Error(kInvalidArgument) for top-p / min-p outside [0, 1] or
// repeat-last-n < -1 (what Sampler(params) refuses).
void check_sampler_params(const SamplerParams& params);

struct TokenData {
  int32_t id;
  float logit;
};

// The working set the stages narrow: every token, in id order, at first.
struct Candidates {
  std::vector<TokenData> data;
  bool sorted = false;   // data is by logit, descending (ties: lower id first)
  int32_t selected = -1;  // set by the picking stage
  // A hint for mask stages: only the best `pick_limit` tokens by logit
  // (ties: lower id first) that survive the masks can be picked, so a mask
  // may rule out everything below them without looking (0: no such bound).
  // The standard chain sets it from top-k (1 when greedy) when no penalty
  // reorders the logits after the masks.
  int32_t pick_limit = 0;
};

// One step of a chain. Stages are called per token sampled (never per
// element of anything larger than the candidates).
class SamplerStage {
 public:
  virtual ~SamplerStage() = default;
  virtual std::string_view name() const = 0;
  virtual void apply(Candidates& c) = 0;
  // A token was accepted (prompt or generated): stages with history see it.
  virtual void accept(int32_t /*token*/) {}
};

// The chosen token's log-probability and the top alternatives', all over the
// raw logits (before any stage).
struct TokenLogprob {
  int32_t id;
  float logprob;
};
struct SampleLogprobs {
  TokenLogprob chosen{};
  std::vector<TokenLogprob> top;  // most likely first
};

class Sampler {
 public:
  // An empty chain: add() stages; without a picking stage it picks greedily.
  Sampler() = default;
  // llama.cpp's chain for `params`; `masks` go after the banned tokens.
  // Throws as check_sampler_params.
  explicit Sampler(const SamplerParams& params, int64_t n_ctx = 4096,
                   std::vector<std::unique_ptr<SamplerStage>> masks = {});

  Sampler& add(std::unique_ptr<SamplerStage> stage);

  // The next token for `logits` (n_vocab values). Does not record it. With
  // `logprobs`, also the chosen token's log-probability and the `n_top`
  // most likely tokens'.
  int32_t sample(std::span<const float> logits, SampleLogprobs* logprobs = nullptr,
                 int n_top = 0);
  // Records a token (prompt or generated) for the stages with history.
  void accept(int32_t token);
  // The seed the draws use (a random one when the params asked for that).
  uint32_t seed() const { return seed_; }
  std::vector<std::string_view> stage_names() const;

 private:
  std::vector<std::unique_ptr<SamplerStage>> stages_;
  Candidates candidates_;
  uint32_t seed_ = 0;
  int32_t pick_limit_ = 0;  // Candidates::pick_limit
};

// The stages of the standard chain, for chains built by hand.
namespace sampling {

std::unique_ptr<SamplerStage> logit_bias(std::vector<std::pair<int32_t, float>> bias);
std::unique_ptr<SamplerStage> ban(std::vector<int32_t> tokens);
// Repetition, presence and frequency penalties over the last `last_n`
// accepted tokens (llama.cpp's formulas).
std::unique_ptr<SamplerStage> penalties(float repeat, float presence, float frequency,
                                        size_t last_n);
std::unique_ptr<SamplerStage> nan_guard();  // NaN logits never win
std::unique_ptr<SamplerStage> top_k(int32_t k);  // <= 0: sorts all
std::unique_ptr<SamplerStage> top_p(float p);
std::unique_ptr<SamplerStage> min_p(float p);
std::unique_ptr<SamplerStage> temperature(float t);
std::unique_ptr<SamplerStage> greedy();
std::unique_ptr<SamplerStage> draw(uint32_t seed);

}  // namespace sampling

}  // namespace tessera
