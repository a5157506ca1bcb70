#include "server/oai.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <ctime>
#include <limits>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <string_view>

#include "server/http_error.h"
#include "tessera/core/error.h"
#include "tessera/grammar/grammar.h"
#include "tessera/serving/embedder.h"
#include "tessera/serving/tool_calls.h"

namespace tessera::server {
namespace {

using nlohmann::json;
using ojson = nlohmann::ordered_json;  // request bodies keep their keys' order

constexpr int kMaxDepth = 64;
constexpr size_t kMaxTokenizeTokens = size_t{1} << 16;

// At most 100 characters of a client's value, for error messages.
std::string excerpt(const ojson& v) {
  std::string s = v.dump(-1, ' ', false, json::error_handler_t::replace);
  if (s.size() > 100) s = s.substr(0, 100) + "...";
  return s;
}

// body[key] as a number in [lo, hi], or `fallback` when absent or null.
double number(const ojson& body, const char* key, double lo, double hi, double fallback) {
  const auto it = body.find(key);
  if (it == body.end() || it->is_null()) return fallback;
  if (!it->is_number()) bad_request("'{}' must be a number, found {}", key, it->type_name());
  const double v = it->get<double>();
  if (!std::isfinite(v) || v < lo || v > hi) {
    bad_request("'{}' must be in [{}, {}], found {}", key, lo, hi, excerpt(*it));
  }
  return v;
}

int64_t integer(const ojson& body, const char* key, int64_t lo, int64_t hi, int64_t fallback) {
  const auto it = body.find(key);
  if (it == body.end() || it->is_null()) return fallback;
  if (!it->is_number_integer()) bad_request("'{}' must be an integer, found {}", key, excerpt(*it));
  // Past int64 (18446744073709551615 is -1 read as signed): out of range, not wrapped.
  if (it->is_number_unsigned() && it->get<uint64_t>() > static_cast<uint64_t>(hi)) {
    bad_request("'{}' must be in [{}, {}], found {}", key, lo, hi, it->get<uint64_t>());
  }
  const auto v = it->get<int64_t>();
  if (v < lo || v > hi) bad_request("'{}' must be in [{}, {}], found {}", key, lo, hi, v);
  return v;
}

bool boolean(const ojson& body, const char* key, bool fallback) {
  const auto it = body.find(key);
  if (it == body.end() || it->is_null()) return fallback;
  if (!it->is_boolean()) bad_request("'{}' must be true or false, found {}", key, excerpt(*it));
  return it->get<bool>();
}

std::string string_field(const ojson& body, const char* key, const std::string& fallback) {
  const auto it = body.find(key);
  if (it == body.end() || it->is_null()) return fallback;
  if (!it->is_string()) bad_request("'{}' must be a string, found {}", key, excerpt(*it));
  return it->get<std::string>();
}

std::vector<std::string> stop_strings(const ojson& body) {
  std::vector<std::string> stop;
  const auto it = body.find("stop");
  if (it == body.end() || it->is_null()) return stop;
  if (it->is_string()) {
    stop.push_back(it->get<std::string>());
  } else if (it->is_array() && it->size() <= 16) {
    for (const ojson& v : *it) {
      if (!v.is_string()) bad_request("'stop' must be a string or an array of strings");
      stop.push_back(v.get<std::string>());
    }
  } else {
    bad_request("'stop' must be a string or an array of at most 16 strings");
  }
  for (const std::string& x : stop) {
    if (x.empty() || x.size() > 1024) bad_request("each 'stop' string must have 1..1024 bytes");
  }
  return stop;
}

// The prompt of a completions request: a string, one string in an array,
// or an array of token ids.
std::vector<TokenId> completion_prompt(const ojson& body, const Tokenizer& tokenizer) {
  const auto it = body.find("prompt");
  if (it == body.end()) bad_request("'prompt' is required");
  const ojson* p = &*it;
  if (p->is_array() && p->size() == 1 && (*p)[0].is_string()) p = &(*p)[0];
  if (p->is_string()) return tokenizer.tokenize(p->get<std::string>(), true, true);
  if (p->is_array() && !p->empty()) return token_ids(*p, "prompt", tokenizer.n_vocab());
  bad_request("'prompt' must be a non-empty string or array of token ids");
}

std::vector<TokenId> chat_prompt(const ojson& body, const Tokenizer& tokenizer,
                                 const serving::ChatRenderer& renderer, const ojson& tools) {
  const auto it = body.find("messages");
  if (it == body.end() || !it->is_array() || it->empty()) {
    bad_request("'messages' must be a non-empty array");
  }
  json kwargs = json::object();  // a template's variables: order does not matter
  if (const auto k = body.find("chat_template_kwargs"); k != body.end() && !k->is_null()) {
    if (!k->is_object()) bad_request("'chat_template_kwargs' must be an object");
    kwargs = *k;
  }
  return renderer.tokenize(*it, true, tokenizer, kwargs, tools);
}

// Fields that would change the output but are not implemented: a 400
// naming the field, never silently ignored.
// llama.cpp's sampler fields that tessera does not implement yet: each is
// accepted at its neutral value (what clients that send every field send)
// and a 400 naming it otherwise, never silently ignored.
bool neutral_number(const ojson& v, double neutral) {
  return v.is_null() || (v.is_number() && v.get<double>() == neutral);
}

void refuse_unimplemented_samplers(const ojson& body) {
  struct Neutral {
    const char* key;
    double value;
  };
  // The field and the value that turns it off.
  static constexpr Neutral kOff[] = {
      {"n_probs", 0},        {"typical_p", 1},      {"tfs_z", 1},         {"mirostat", 0},
      {"dry_multiplier", 0}, {"xtc_probability", 0}, {"min_tokens", 0},    {"dynatemp_range", 0},
      {"n_indent", 0},       {"t_max_predict_ms", 0}};
  for (const auto& [key, value] : kOff) {
    if (const auto it = body.find(key); it != body.end() && !neutral_number(*it, value)) {
      bad_request("'{}' is not supported by this server yet (only {} is accepted, which turns it off)", key,
                  value);
    }
  }
  // top_n_sigma: off at any value <= 0 (llama.cpp's -1).
  if (const auto it = body.find("top_n_sigma"); it != body.end() && !it->is_null() &&
                                                  !(it->is_number() && it->get<double>() <= 0)) {
    bad_request("'top_n_sigma' is not supported by this server yet (only values <= 0, which turn it off)");
  }
  if (const auto it = body.find("samplers"); it != body.end() && !it->is_null()) {
    bad_request("'samplers' (an order of samplers) is not supported by this server yet: its chain is fixed "
                "(penalties, top-k, top-p, min-p, temperature)");
  }
}

// Every field the completion endpoints read, and those that change nothing
// in the output (model, user, store, metadata, service_tier).
const std::set<std::string_view>& completion_fields() {
  static const std::set<std::string_view> k = {
      "prompt", "messages", "model", "max_tokens", "n_predict", "max_completion_tokens", "temperature",
      "top_p", "top_k", "min_p", "presence_penalty", "frequency_penalty", "repeat_penalty",
      "repeat_last_n", "seed", "logit_bias", "ignore_eos", "cache_prompt", "n", "stop", "stream",
      "stream_options", "logprobs", "top_logprobs", "best_of", "echo", "suffix", "modalities",
      "functions", "function_call", "audio", "grammar", "json_schema", "response_format", "tools",
      "tool_choice", "parallel_tool_calls", "chat_template_kwargs", "reasoning_format", "user", "store",
      "metadata", "service_tier",
      // Read only to be refused past their neutral values (above).
      "n_probs", "typical_p", "tfs_z", "mirostat", "mirostat_tau", "mirostat_eta", "dry_multiplier",
      "dry_base", "dry_allowed_length", "dry_penalty_last_n", "dry_sequence_breakers", "xtc_probability",
      "xtc_threshold", "top_n_sigma", "min_tokens", "samplers", "dynatemp_range", "dynatemp_exponent",
      "n_indent", "t_max_predict_ms"};
  return k;
}

}  // namespace

void refuse_unknown_fields(const ojson& body, Endpoint endpoint) {
  static const std::set<std::string_view> kEmbeddings = {"input", "model", "encoding_format", "dimensions", "user",
                                                         "truncate"};
  static const std::set<std::string_view> kTokenize = {"content", "add_special", "with_pieces"};
  static const std::set<std::string_view> kDetokenize = {"tokens"};
  static const std::set<std::string_view> kRerank = {"query", "documents", "texts", "top_n", "return_text", "model",
                                                     "truncate"};
  const std::set<std::string_view>& known = endpoint == Endpoint::kCompletion   ? completion_fields()
                                            : endpoint == Endpoint::kEmbeddings ? kEmbeddings
                                            : endpoint == Endpoint::kTokenize   ? kTokenize
                                            : endpoint == Endpoint::kRerank     ? kRerank
                                                                                : kDetokenize;
  for (const auto& [key, _] : body.items()) {
    if (!known.contains(key)) {
      bad_request("unknown field '{}' (the server refuses what it would ignore; "
                  "--ignore-unknown-fields lets such fields through)",
                  key.size() > 100 ? key.substr(0, 100) + "..." : key);
    }
  }
}

namespace {

void refuse_unimplemented(const ojson& body) {
  refuse_unimplemented_samplers(body);
  // functions / function_call: the deprecated spellings of tools / tool_choice.
  static constexpr const char* kRefused[] = {"functions", "function_call", "audio"};
  for (const char* key : kRefused) {
    if (const auto it = body.find(key); it != body.end() && !it->is_null()) {
      bad_request("'{}' is not supported by this server yet", key);
    }
  }
  if (const auto it = body.find("modalities"); it != body.end() && !it->is_null() &&
                                               *it != ojson::array({"text"})) {
    bad_request("'modalities' other than [\"text\"] is not supported");
  }
  if (integer(body, "best_of", 1, 1 << 20, 1) != 1) bad_request("'best_of' must be 1");
  if (boolean(body, "echo", false)) bad_request("'echo' is not supported by this server yet");
  if (const auto it = body.find("suffix"); it != body.end() && !it->is_null() &&
                                           !(it->is_string() && it->get<std::string>().empty())) {
    bad_request("'suffix' is not supported by this server yet");
  }
}

// OpenAI's logit_bias: {"token id": bias in [-100, 100]}.
std::vector<std::pair<int32_t, float>> logit_bias(const ojson& body, size_t n_vocab) {
  std::vector<std::pair<int32_t, float>> out;
  const auto it = body.find("logit_bias");
  if (it == body.end() || it->is_null()) return out;
  if (!it->is_object()) bad_request("'logit_bias' must be an object of token id -> bias");
  if (it->size() > 1024) bad_request("'logit_bias' holds {} tokens, at most 1024", it->size());
  for (const auto& [key, value] : it->items()) {
    size_t used = 0;
    long long id = -1;
    try {
      id = std::stoll(key, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != key.size() || id < 0 || id >= static_cast<long long>(n_vocab)) {
      bad_request("'logit_bias' key '{}' is not a token id in [0, {})", key.substr(0, 100), n_vocab);
    }
    if (!value.is_number() || !std::isfinite(value.get<double>()) || value.get<double>() < -100 ||
        value.get<double>() > 100) {
      bad_request("'logit_bias' of token {} must be a number in [-100, 100], found {}", id, excerpt(value));
    }
    out.emplace_back(static_cast<int32_t>(id), value.get<float>());
  }
  return out;
}

std::string random_id(const char* prefix) {
  static std::mutex m;
  static std::mt19937_64 rng(std::random_device{}());
  std::lock_guard lock(m);
  return fmt::format("{}{:016x}", prefix, rng());
}

json chunk(const ResponseHead& h, json choices) {
  return {{"id", h.id},
          {"object", h.chat ? "chat.completion.chunk" : "text_completion"},
          {"created", h.created},
          {"model", h.model},
          {"choices", std::move(choices)}};
}

std::string base64(const uint8_t* p, size_t n) {
  static constexpr char kDigits[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((n + 2) / 3 * 4);
  for (size_t i = 0; i < n; i += 3) {
    const uint32_t v = uint32_t{p[i]} << 16 | (i + 1 < n ? uint32_t{p[i + 1]} << 8 : 0) |
                       (i + 2 < n ? uint32_t{p[i + 2]} : 0);
    out += kDigits[v >> 18 & 63];
    out += kDigits[v >> 12 & 63];
    out += i + 1 < n ? kDigits[v >> 6 & 63] : '=';
    out += i + 2 < n ? kDigits[v & 63] : '=';
  }
  return out;
}

// Log-probabilities of the tokens in `events` in the completions format
// ({tokens, token_logprobs, top_logprobs}) or the chat one ({content: [...]}).
using Probs = std::vector<std::pair<serving::TokenProb, std::vector<serving::TokenProb>>>;

json logprobs_json(const Probs& probs, bool chat) {
  if (chat) {
    json content = json::array();
    for (const auto& [chosen, top] : probs) {
      json alts = json::array();
      for (const serving::TokenProb& t : top) alts.push_back({{"token", t.text}, {"logprob", t.logprob}});
      content.push_back({{"id", chosen.id},
                         {"token", chosen.text},
                         {"logprob", chosen.logprob},
                         {"top_logprobs", alts}});
    }
    return {{"content", content}};
  }
  json tokens = json::array(), lps = json::array(), tops = json::array();
  for (const auto& [chosen, top] : probs) {
    tokens.push_back(chosen.text);
    lps.push_back(chosen.logprob);
    json m = json::object();
    for (const serving::TokenProb& t : top) m[t.text] = t.logprob;
    tops.push_back(m);
  }
  return {{"tokens", tokens}, {"token_logprobs", lps}, {"top_logprobs", tops}};
}

}  // namespace

ojson parse_body(const std::string& text) {
  ojson body;
  // Nesting is bounded while parsing, before any code (which may recurse)
  // sees the value. So are keys: the ordered objects find a key by a linear
  // search, so n keys cost n^2/2 comparisons (100,000 took 24 s).
  constexpr size_t kMaxKeys = 8192, kMaxAllKeys = 32768;
  std::array<size_t, kMaxDepth + 2> keys{};  // per open object
  size_t all_keys = 0;
  const ojson::parser_callback_t depth = [&](int d, ojson::parse_event_t event, ojson&) {
    if (d > kMaxDepth) throw HttpError(400, fmt::format("the JSON nests deeper than {} levels", kMaxDepth));
    if (event == ojson::parse_event_t::object_start) {
      keys[static_cast<size_t>(d) + 1] = 0;
    } else if (event == ojson::parse_event_t::key) {
      if (++keys[static_cast<size_t>(d)] > kMaxKeys) {
        throw HttpError(400, fmt::format("a JSON object has more than {} keys", kMaxKeys));
      }
      if (++all_keys > kMaxAllKeys) {
        throw HttpError(400, fmt::format("the JSON's objects have more than {} keys in all", kMaxAllKeys));
      }
    }
    return true;
  };
  try {
    body = ojson::parse(text, depth);
  } catch (const ojson::exception& e) {
    // parse_error for bad syntax, out_of_range for a number no double holds
    // (1e1111): both are the client's JSON, not the server's fault.
    const std::string what = e.what();
    throw HttpError(400, fmt::format("the body is not valid JSON: {}",
                                     what.size() > 200 ? what.substr(0, 200) + "..." : what));
  }
  if (!body.is_object()) throw HttpError(400, "the body must be a JSON object");
  return body;
}

std::vector<TokenId> token_ids(const ojson& v, const char* field, size_t n_vocab) {
  if (!v.is_array()) bad_request("'{}' must be an array of token ids", field);
  std::vector<TokenId> ids;
  ids.reserve(v.size());
  for (const ojson& t : v) {
    if (!t.is_number_integer()) bad_request("'{}' must be an array of token ids", field);
    const auto id = t.get<int64_t>();
    if (id < 0 || id >= static_cast<int64_t>(n_vocab)) {
      bad_request("'{}' token {} is outside the vocabulary [0, {})", field, id, n_vocab);
    }
    ids.push_back(static_cast<TokenId>(id));
  }
  return ids;
}

serving::GenerationParams parse_generation(const ojson& body, bool chat, size_t n_vocab) {
  refuse_unimplemented(body);
  serving::GenerationParams p;
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
  s.logit_bias = logit_bias(body, n_vocab);
  p.ignore_eos = boolean(body, "ignore_eos", false);
  p.cache_prompt = boolean(body, "cache_prompt", true);
  if (integer(body, "n", 1, 1, 1) != 1) bad_request("'n' must be 1");
  p.stop = stop_strings(body);
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


CompletionRequest parse_completion(const ojson& body, bool chat, const Tokenizer& tokenizer,
                                   const serving::ChatRenderer& renderer) {
  CompletionRequest r;
  r.chat = chat;
  r.params = parse_generation(body, chat, tokenizer.n_vocab());
  // tools, tool_choice, parallel_tool_calls (chat only).
  std::optional<serving::ToolRequest> tools;
  if (chat) {
    try {
      tools = serving::parse_tool_request(body, renderer.tool_format());
    } catch (const Error& e) {
      bad_request("{}", e.what());
    }
  } else if (const auto t = body.find("tools"); t != body.end() && !t->is_null()) {
    bad_request("'tools' is a field of /v1/chat/completions");
  }
  // grammar, json_schema or response_format: a 400 naming the field when wrong.
  std::optional<std::string> g;
  try {
    g = grammar::request_grammar(body);
  } catch (const Error& e) {
    bad_request("{}", e.what());
  }
  if (tools) {
    try {
      serving::use_tools(*tools, r.params, g);
    } catch (const Error& e) {
      bad_request("{}", e.what());
    }
  }
  if (g) {
    std::shared_ptr<const grammar::Grammar> parsed;
    try {
      parsed = grammar::parse_cached(*g);
    } catch (const Error& e) {
      bad_request("'grammar': {}", e.what());
    }
    r.params.masks = grammar::masks(std::move(parsed), tokenizer);
  }
  r.stream = boolean(body, "stream", false);
  if (const auto it = body.find("stream_options"); it != body.end() && it->is_object()) {
    r.include_usage = boolean(*it, "include_usage", false);
  }
  r.prompt = chat ? chat_prompt(body, tokenizer, renderer,
                               tools && tools->active() ? tools->tools : ojson(nullptr))
                   : completion_prompt(body, tokenizer);
  if (chat) {
    // reasoning_format: "none" keeps the thinking in the content; "auto" (the
    // default) and "deepseek" move it to reasoning_content.
    const std::string format = string_field(body, "reasoning_format", "auto");
    if (format != "none" && format != "auto" && format != "deepseek") {
      bad_request("'reasoning_format' must be none, auto or deepseek");
    }
    r.params.split_reasoning = format != "none";
    r.params.reasoning_open = serving::prompt_opens_thinking(r.prompt, tokenizer);
    // gpt-oss: the reply's channels carry the thinking and the calls.
    r.params.harmony = renderer.tool_format() == serving::ToolFormat::kHarmony;
  }
  return r;
}

ResponseHead response_head(const CompletionRequest& r, const std::string& model) {
  return {.id = random_id(r.chat ? "chatcmpl-" : "cmpl-"),
          .created = static_cast<int64_t>(std::time(nullptr)),
          .model = model,
          .chat = r.chat,
          .logprobs = r.params.top_logprobs >= 0};
}

json completion_response(const ResponseHead& h, const serving::Reply& reply) {
  json calls = json::array();
  for (const serving::ToolCall& c : reply.tool_calls) calls.push_back(serving::tool_call_json(c));
  json choice = {{"index", 0},
                 {"finish_reason", serving::openai_finish_reason(reply.last.finish, !calls.empty())}};
  choice["logprobs"] = h.logprobs ? logprobs_json(reply.probs, h.chat) : json(nullptr);
  if (h.chat) {
    // OpenAI's content is null beside tool calls when the model wrote nothing else.
    choice["message"] = {{"role", "assistant"},
                         {"content", reply.text.empty() && !calls.empty() ? json(nullptr) : json(reply.text)}};
    if (!calls.empty()) choice["message"]["tool_calls"] = std::move(calls);
    if (!reply.reasoning.empty()) choice["message"]["reasoning_content"] = reply.reasoning;
  } else {
    choice["text"] = reply.text;
  }
  return {{"id", h.id},
          {"object", h.chat ? "chat.completion" : "text_completion"},
          {"created", h.created},
          {"model", h.model},
          {"choices", json::array({choice})},
          {"usage", serving::usage_json(reply.last)},
          {"timings", serving::timings_json(reply.last)}};
}

std::vector<json> tool_call_chunks(const ResponseHead& h, int index, const serving::ToolCall& c) {
  // As OpenAI streams a call: its id, type and name with empty arguments,
  // then the arguments (here in one piece: a call is sent once it parses).
  auto one = [&](json call) {
    call["index"] = index;
    return chunk(h, json::array({{{"index", 0},
                                  {"delta", {{"tool_calls", json::array({std::move(call)})}}},
                                  {"logprobs", nullptr},
                                  {"finish_reason", nullptr}}}));
  };
  return {one({{"id", c.id}, {"type", "function"}, {"function", {{"name", c.name}, {"arguments", ""}}}}),
          one({{"function", {{"arguments", c.arguments}}}})};
}

json role_chunk(const ResponseHead& h) {
  return chunk(h, json::array({{{"index", 0},
                                {"delta", {{"role", "assistant"}, {"content", ""}}},
                                {"logprobs", nullptr},
                                {"finish_reason", nullptr}}}));
}

json text_chunk(const ResponseHead& h, const serving::Event& e) {
  json c = {{"index", 0}, {"finish_reason", nullptr}};
  c["logprobs"] = h.logprobs ? logprobs_json(e.probs, h.chat) : json(nullptr);
  if (h.chat) {
    c["delta"] = json::object();
    if (!e.text.empty() || e.reasoning.empty()) c["delta"]["content"] = e.text;
    if (!e.reasoning.empty()) c["delta"]["reasoning_content"] = e.reasoning;
  } else {
    c["text"] = e.text;
  }
  return chunk(h, json::array({c}));
}

json final_chunk(const ResponseHead& h, const serving::Event& last, bool tool_calls) {
  json c = {{"index", 0},
            {"finish_reason", serving::openai_finish_reason(last.finish, tool_calls)},
            {"logprobs", nullptr}};
  if (h.chat) {
    c["delta"] = json::object();
  } else {
    c["text"] = "";
  }
  json out = chunk(h, json::array({c}));
  out["timings"] = serving::timings_json(last);
  return out;
}

json usage_chunk(const ResponseHead& h, const serving::Event& last) {
  json u = chunk(h, json::array());
  u["usage"] = serving::usage_json(last);
  return u;
}

TokenizeRequest parse_tokenize(const ojson& body) {
  TokenizeRequest t;
  const auto c = body.find("content");
  if (c == body.end() || !c->is_string()) bad_request("'content' must be a string");
  t.content = c->get<std::string>();
  t.add_special = boolean(body, "add_special", false);
  t.with_pieces = boolean(body, "with_pieces", false);
  return t;
}

json tokenize_response(const std::vector<TokenId>& ids, bool with_pieces, const Tokenizer& tokenizer) {
  if (ids.size() > kMaxTokenizeTokens) {
    throw HttpError(413, fmt::format("the text has {} tokens; /tokenize returns at most {}", ids.size(),
                                     kMaxTokenizeTokens));
  }
  json tokens = json::array();
  for (TokenId id : ids) {
    if (with_pieces) {
      tokens.push_back({{"id", id}, {"piece", tokenizer.token_to_piece(id)}});
    } else {
      tokens.push_back(id);
    }
  }
  return {{"tokens", std::move(tokens)}};
}

json detokenize_response(const std::vector<TokenId>& ids, const Tokenizer& tokenizer) {
  if (ids.size() > kMaxTokenizeTokens) {
    throw HttpError(413, fmt::format("'tokens' holds {} ids; /detokenize takes at most {}", ids.size(),
                                     kMaxTokenizeTokens));
  }
  return {{"content", tokenizer.detokenize(ids)}};
}

EmbeddingRequest parse_embeddings(const ojson& body, const Tokenizer& tokenizer) {
  EmbeddingRequest r;
  const auto in = body.find("input");
  if (in == body.end()) bad_request("'input' is required");
  if (const auto d = body.find("dimensions"); d != body.end() && !d->is_null()) {
    bad_request("'dimensions' is not supported: the vectors have the model's n_embd");
  }
  auto one = [&](const ojson& v) {
    if (v.is_string()) {
      if (v.get<std::string>().empty()) bad_request("'input' strings must not be empty");
      r.inputs.push_back(tokenizer.tokenize(v.get<std::string>(), true, false));
      return;
    }
    if (!v.is_array() || v.empty()) bad_request("'input' must be a string, token ids, or an array of them");
    r.inputs.push_back(token_ids(v, "input", tokenizer.n_vocab()));
  };
  if (in->is_array() && !in->empty() && ((*in)[0].is_string() || (*in)[0].is_array())) {
    if (in->size() > 256) bad_request("'input' holds {} items, at most 256", in->size());
    for (const ojson& v : *in) one(v);
  } else {
    one(*in);
  }
  const auto f = body.find("encoding_format");
  const std::string format = f == body.end() || f->is_null() ? "float" : f->is_string() ? f->get<std::string>() : "";
  if (format != "float" && format != "base64") bad_request("'encoding_format' must be float or base64");
  r.base64 = format == "base64";
  if (const auto t = body.find("truncate"); t != body.end() && !t->is_null()) {
    if (!t->is_boolean()) bad_request("'truncate' must be true or false");
    r.truncate = t->get<bool>();
  }
  return r;
}

json embeddings_response(const EmbeddingRequest& r, const std::vector<std::vector<float>>& vectors,
                         const std::string& model) {
  json data = json::array();
  int64_t tokens = 0;
  for (size_t i = 0; i < vectors.size(); ++i) {
    tokens += static_cast<int64_t>(r.inputs[i].size());
    json item = {{"object", "embedding"}, {"index", i}};
    const std::vector<float>& v = vectors[i];
    if (r.base64) {
      item["embedding"] = base64(reinterpret_cast<const uint8_t*>(v.data()), v.size() * sizeof(float));
    } else {
      item["embedding"] = v;
    }
    data.push_back(std::move(item));
  }
  return {{"object", "list"},
          {"data", data},
          {"model", model},
          {"usage", {{"prompt_tokens", tokens}, {"total_tokens", tokens}}}};
}

RerankRequest parse_rerank(const ojson& body, const Tokenizer& tokenizer, std::string_view rerank_template) {
  RerankRequest r;
  const auto q = body.find("query");
  if (q == body.end() || !q->is_string() || q->get<std::string>().empty()) {
    bad_request("'query' must be a non-empty string");
  }
  const auto docs = body.find("documents");
  const auto texts = body.find("texts");
  if ((docs == body.end()) == (texts == body.end())) bad_request("give the documents as 'documents' (or TEI's 'texts'), once");
  r.tei = texts != body.end();
  const ojson& list = r.tei ? *texts : *docs;
  const char* name = r.tei ? "texts" : "documents";
  if (!list.is_array() || list.empty()) bad_request("'{}' must be a non-empty array of strings", name);
  if (list.size() > 256) bad_request("'{}' holds {} items, at most 256", name, list.size());
  const std::string query = q->get<std::string>();
  for (const ojson& d : list) {
    if (!d.is_string() || d.get<std::string>().empty()) bad_request("'{}' must hold non-empty strings", name);
    r.documents.push_back(d.get<std::string>());
    r.inputs.push_back(serving::rerank_tokens(tokenizer, query, r.documents.back(), rerank_template));
  }
  r.top_n = r.documents.size();
  if (const auto t = body.find("top_n"); t != body.end() && !t->is_null()) {
    if (!t->is_number_integer() || t->get<int64_t>() < 1) bad_request("'top_n' must be a positive integer");
    r.top_n = std::min<size_t>(r.top_n, t->get<size_t>());
  }
  if (const auto t = body.find("return_text"); t != body.end() && !t->is_null()) {
    if (!t->is_boolean()) bad_request("'return_text' must be true or false");
    r.return_text = t->get<bool>();
  }
  if (const auto t = body.find("truncate"); t != body.end() && !t->is_null()) {
    if (!t->is_boolean()) bad_request("'truncate' must be true or false");
    r.truncate = t->get<bool>();
  }
  return r;
}

json rerank_response(const RerankRequest& r, const std::vector<float>& scores, const std::string& model) {
  std::vector<size_t> order(scores.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return scores[a] > scores[b]; });
  order.resize(std::min(order.size(), r.top_n));
  json results = json::array();
  int64_t tokens = 0;
  for (const std::vector<TokenId>& in : r.inputs) tokens += static_cast<int64_t>(in.size());
  for (const size_t i : order) {
    json item = {{"index", i}, {r.tei ? "score" : "relevance_score", scores[i]}};
    if (r.return_text && r.tei) item["text"] = r.documents[i];
    if (r.return_text && !r.tei) item["document"] = {{"text", r.documents[i]}};
    results.push_back(std::move(item));
  }
  if (r.tei) return results;
  return {{"model", model},
          {"object", "list"},
          {"usage", {{"prompt_tokens", tokens}, {"total_tokens", tokens}}},
          {"results", results}};
}

}  // namespace tessera::server
