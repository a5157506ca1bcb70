#include "server/oai.h"

#include <cmath>
#include <limits>

#include "server/http_error.h"

namespace tessera::server {

std::string HttpError::type() const {
  switch (status_) {
    case 401: return "authentication_error";
    case 404: return "not_found_error";
    case 413: return "invalid_request_error";
    case 503: return "unavailable_error";
    default: return status_ >= 500 ? "server_error" : "invalid_request_error";
  }
}

namespace {

using nlohmann::json;

// body[key] as a number in [lo, hi], or `fallback` when absent or null.
double number(const json& body, const char* key, double lo, double hi, double fallback) {
  const auto it = body.find(key);
  if (it == body.end() || it->is_null()) return fallback;
  if (!it->is_number()) bad_request("'{}' must be a number, found {}", key, it->type_name());
  const double v = it->get<double>();
  if (!std::isfinite(v) || v < lo || v > hi) {
    bad_request("'{}' must be in [{}, {}], found {}", key, lo, hi, it->dump());
  }
  return v;
}

int64_t integer(const json& body, const char* key, int64_t lo, int64_t hi, int64_t fallback) {
  const auto it = body.find(key);
  if (it == body.end() || it->is_null()) return fallback;
  if (!it->is_number_integer()) bad_request("'{}' must be an integer, found {}", key, it->dump());
  const auto v = it->get<int64_t>();
  if (v < lo || v > hi) bad_request("'{}' must be in [{}, {}], found {}", key, lo, hi, v);
  return v;
}

bool boolean(const json& body, const char* key, bool fallback) {
  const auto it = body.find(key);
  if (it == body.end() || it->is_null()) return fallback;
  if (!it->is_boolean()) bad_request("'{}' must be true or false, found {}", key, it->dump());
  return it->get<bool>();
}

}  // namespace

GenerationParams parse_generation(const json& body, bool chat) {
  GenerationParams p;
  constexpr int64_t kMaxTokens = int64_t{1} << 24;
  int64_t max_tokens = integer(body, "n_predict", -1, kMaxTokens, -1);
  max_tokens = integer(body, "max_tokens", -1, kMaxTokens, max_tokens);
  max_tokens = integer(body, "max_completion_tokens", -1, kMaxTokens, max_tokens);
  // OpenAI's completions default is 16 tokens; chat runs to the end.
  if (!chat && !body.contains("max_tokens") && !body.contains("n_predict") &&
      !body.contains("max_completion_tokens")) {
    max_tokens = 16;
  }
  p.max_tokens = static_cast<int32_t>(max_tokens);
  SamplerParams& s = p.sampling;
  s.temp = static_cast<float>(number(body, "temperature", 0.0, 10.0, 0.8));
  s.top_p = static_cast<float>(number(body, "top_p", 0.0, 1.0, 0.95));
  s.top_k = static_cast<int32_t>(integer(body, "top_k", 0, 1 << 20, 40));
  s.min_p = static_cast<float>(number(body, "min_p", 0.0, 1.0, 0.05));
  s.presence_penalty = static_cast<float>(number(body, "presence_penalty", -2.0, 2.0, 0.0));
  s.frequency_penalty = static_cast<float>(number(body, "frequency_penalty", -2.0, 2.0, 0.0));
  s.repeat_penalty = static_cast<float>(number(body, "repeat_penalty", 0.0, 10.0, 1.0));
  s.repeat_last_n = static_cast<int32_t>(integer(body, "repeat_last_n", -1, 1 << 20, 64));
  s.seed = static_cast<uint32_t>(integer(body, "seed", -1, std::numeric_limits<uint32_t>::max(), -1));
  p.ignore_eos = boolean(body, "ignore_eos", false);
  p.cache_prompt = boolean(body, "cache_prompt", true);
  if (integer(body, "n", 1, 1, 1) != 1) bad_request("'n' must be 1");
  if (const auto it = body.find("stop"); it != body.end() && !it->is_null()) {
    if (it->is_string()) {
      p.stop.push_back(it->get<std::string>());
    } else if (it->is_array() && it->size() <= 16) {
      for (const json& v : *it) {
        if (!v.is_string()) bad_request("'stop' must be a string or an array of strings");
        p.stop.push_back(v.get<std::string>());
      }
    } else {
      bad_request("'stop' must be a string or an array of at most 16 strings");
    }
    for (const std::string& x : p.stop) {
      if (x.empty() || x.size() > 1024) bad_request("each 'stop' string must have 1..1024 bytes");
    }
  }
  // Completions: logprobs is a count (0..20); chat: a flag plus top_logprobs.
  if (chat) {
    if (boolean(body, "logprobs", false)) {
      p.top_logprobs = static_cast<int>(integer(body, "top_logprobs", 0, 20, 0));
    } else if (body.contains("top_logprobs") && !body["top_logprobs"].is_null()) {
      bad_request("'top_logprobs' needs 'logprobs': true");
    }
  } else {
    p.top_logprobs = static_cast<int>(integer(body, "logprobs", 0, 20, -1));
  }
  return p;
}

nlohmann::json usage_json(const Event& e) {
  return {{"prompt_tokens", e.n_prompt},
          {"completion_tokens", e.n_gen},
          {"total_tokens", e.n_prompt + e.n_gen},
          {"prompt_tokens_details", {{"cached_tokens", e.n_cached}}}};
}

nlohmann::json timings_json(const Event& e) {
  const int64_t prompt_n = e.n_prompt - e.n_cached;
  return {{"cache_n", e.n_cached},
          {"prompt_n", prompt_n},
          {"prompt_ms", e.prompt_ms},
          {"prompt_per_second", e.prompt_ms > 0 ? 1000.0 * double(prompt_n) / e.prompt_ms : 0.0},
          {"predicted_n", e.n_gen},
          {"predicted_ms", e.gen_ms},
          {"predicted_per_second", e.gen_ms > 0 ? 1000.0 * double(e.n_gen) / e.gen_ms : 0.0}};
}

nlohmann::json logprobs_json(const std::vector<const Event*>& events, bool chat) {
  if (chat) {
    json content = json::array();
    for (const Event* e : events) {
      for (const auto& [chosen, top] : e->probs) {
        json alts = json::array();
        for (const TokenProb& t : top) alts.push_back({{"token", t.text}, {"logprob", t.logprob}});
        content.push_back({{"id", chosen.id},
                           {"token", chosen.text},
                           {"logprob", chosen.logprob},
                           {"top_logprobs", alts}});
      }
    }
    return {{"content", content}};
  }
  json tokens = json::array(), lps = json::array(), tops = json::array();
  for (const Event* e : events) {
    for (const auto& [chosen, top] : e->probs) {
      tokens.push_back(chosen.text);
      lps.push_back(chosen.logprob);
      json m = json::object();
      for (const TokenProb& t : top) m[t.text] = t.logprob;
      tops.push_back(m);
    }
  }
  return {{"tokens", tokens}, {"token_logprobs", lps}, {"top_logprobs", tops}};
}

}  // namespace tessera::server
