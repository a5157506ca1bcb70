#include "tessera/serving/reply.h"

#include <iterator>

namespace tessera::serving {

void Reply::add(Event&& e) {
  text += e.text;
  reasoning += e.reasoning;
  std::move(e.tool_calls.begin(), e.tool_calls.end(), std::back_inserter(tool_calls));
  std::move(e.probs.begin(), e.probs.end(), std::back_inserter(probs));
  e.text.clear();
  e.reasoning.clear();
  e.tool_calls.clear();
  e.probs.clear();
  last = std::move(e);
}

nlohmann::json tool_call_json(const ToolCall& call) {
  return {{"id", call.id},
          {"type", "function"},
          {"function", {{"name", call.name}, {"arguments", call.arguments}}}};
}

const char* openai_finish_reason(FinishReason reason, bool tool_calls) {
  if (tool_calls && (reason == FinishReason::kEndOfText || reason == FinishReason::kStop)) {
    return "tool_calls";
  }
  switch (reason) {
    case FinishReason::kLength:
      return "length";
    case FinishReason::kShutdown:  // cut short: a client can tell it from an end
    case FinishReason::kCancelled:
      return "abort";
    default:  // the end of the text, a stop string
      return "stop";
  }
}

nlohmann::json usage_json(const Event& last) {
  return {{"prompt_tokens", last.n_prompt},
          {"completion_tokens", last.n_gen},
          {"total_tokens", last.n_prompt + last.n_gen},
          {"prompt_tokens_details", {{"cached_tokens", last.n_cached}}}};
}

nlohmann::json timings_json(const Event& last) {
  const int64_t prompt_n = last.n_prompt - last.n_cached;
  const auto per_token = [](double ms, int64_t n) { return n > 0 ? ms / double(n) : 0.0; };
  const auto per_second = [](double ms, int64_t n) { return ms > 0 ? 1e3 * double(n) / ms : 0.0; };
  return {{"cache_n", last.n_cached},
          {"prompt_n", prompt_n},
          {"prompt_ms", last.prompt_ms},
          {"prompt_per_token_ms", per_token(last.prompt_ms, prompt_n)},
          {"prompt_per_second", per_second(last.prompt_ms, prompt_n)},
          {"predicted_n", last.n_gen},
          {"predicted_ms", last.gen_ms},
          {"predicted_per_token_ms", per_token(last.gen_ms, last.n_gen)},
          {"predicted_per_second", per_second(last.gen_ms, last.n_gen)}};
}

}  // namespace tessera::serving
