// A generation's events folded into one reply: the one fold every front end
// builds its answer from (the server's OpenAI objects, the Node package's
// result), and the JSON pieces they share.
#pragma once

#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "tessera/serving/serving.h"
#include "tessera/serving/tool_calls.h"

namespace tessera::serving {

struct Reply {
  std::string text;       // the answer (without the thinking when it was split off)
  std::string reasoning;  // the thinking, with GenerationParams::split_reasoning
  std::vector<ToolCall> tool_calls;  // in the order they completed
  // Per generated token (when top_logprobs >= 0): the chosen token and the
  // top alternatives.
  std::vector<std::pair<TokenProb, std::vector<TokenProb>>> probs;
  // The last event's own fields: done, finish, error, stop, counts, timings
  // and seed (its text, thinking, calls and probabilities are in the above).
  Event last;

  // Appends e's pieces and takes its finish and counts; events in order.
  void add(Event&& e);
  bool done() const { return last.done; }
};

// A tool call in OpenAI's shape: {"id", "type": "function", "function": {"name", "arguments"}}.
nlohmann::json tool_call_json(const ToolCall& call);

// OpenAI's finish_reason: "tool_calls" when the text ended with calls made,
// "length", "abort" when cut short (cancelled, shut down), else "stop".
const char* openai_finish_reason(FinishReason reason, bool tool_calls);

// OpenAI's usage object of a finished generation (from its last event).
nlohmann::json usage_json(const Event& last);

// llama-server's timings object: cache_n, prompt_n, prompt_ms,
// prompt_per_token_ms, prompt_per_second and the same for predicted_*.
nlohmann::json timings_json(const Event& last);

}  // namespace tessera::serving
