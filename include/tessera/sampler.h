// Sampler: picks the next token from logits with llama.cpp's flags, defaults
// and order: penalties -> top-k -> top-p -> min-p -> temperature -> draw.
// Temperature <= 0 is greedy (after penalties). Same seed, same tokens.
#pragma once

#include <cstdint>
#include <deque>
#include <random>
#include <span>
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
};

class Sampler {
 public:
  explicit Sampler(const SamplerParams& params, int64_t n_ctx = 4096);

  // The next token for `logits` (n_vocab values). Does not record it.
  int32_t sample(std::span<const float> logits);
  // Records a token (prompt or generated) for the repetition penalties.
  void accept(int32_t token);
  uint32_t seed() const { return seed_; }

 private:
  struct Candidate {
    int32_t id;
    float logit;
  };
  void apply_penalties(std::vector<Candidate>& c) const;

  SamplerParams params_;
  uint32_t seed_;
  std::mt19937 rng_;
  std::deque<int32_t> history_;
  size_t history_cap_;
};

}  // namespace tessera
