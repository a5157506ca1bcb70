// OpenAI request fields to generation parameters, each checked against its
// declared type and range (a 400 naming the field otherwise), and the
// response objects, with llama.cpp's extras (timings).
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "server/generator.h"

namespace tessera::server {

// Sampling, length and stop fields shared by completions and chat:
// max_tokens (or max_completion_tokens, n_predict), temperature, top_p,
// top_k, min_p, seed, stop, presence_penalty, frequency_penalty,
// repeat_penalty, repeat_last_n, ignore_eos, cache_prompt, n (only 1),
// logprobs / top_logprobs.
GenerationParams parse_generation(const nlohmann::json& body, bool chat);

// The usage object and llama.cpp's timings of a finished request.
nlohmann::json usage_json(const Event& last);
nlohmann::json timings_json(const Event& last);

// Log-probabilities of the tokens in `events` in the completions format
// ({tokens, token_logprobs, top_logprobs}) or the chat one ({content: [...]}).
nlohmann::json logprobs_json(const std::vector<const Event*>& events, bool chat);

}  // namespace tessera::server
