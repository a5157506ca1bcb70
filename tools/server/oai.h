// The OpenAI wire format: each request body parsed into a typed struct
// (every field checked against its declared type and range, a 400 naming
// the field otherwise), and every response object and stream chunk built
// here, with llama.cpp's extras (timings).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tessera/serving/chat.h"
#include "tessera/serving/reply.h"
#include "tessera/serving/serving.h"

namespace tessera::server {

// The body as a JSON object (a 400 otherwise, and for nesting deeper than
// 64 levels, refused while parsing).
nlohmann::ordered_json parse_body(const std::string& body);

// A 400 naming the first field of `body` the endpoint neither reads nor
// knows to change nothing (unless the server runs with
// --ignore-unknown-fields). llama.cpp's sampler fields tessera lacks are
// refused by the parsers themselves past their neutral values.
enum class Endpoint { kCompletion, kEmbeddings, kTokenize, kDetokenize, kRerank };
void refuse_unknown_fields(const nlohmann::ordered_json& body, Endpoint endpoint);

// /v1/completions and /v1/chat/completions.
struct CompletionRequest {
  bool chat = false;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  std::vector<TokenId> prompt;
  serving::GenerationParams params;
};
CompletionRequest parse_completion(const nlohmann::ordered_json& body, bool chat, const Tokenizer& tokenizer,
                                   const serving::ChatRenderer& renderer);

// Sampling, length and stop fields shared by completions and chat:
// max_tokens (or max_completion_tokens, n_predict), temperature, top_p,
// top_k, min_p, seed, stop, presence_penalty, frequency_penalty,
// repeat_penalty, repeat_last_n, ignore_eos, cache_prompt, n (only 1),
// logprobs / top_logprobs.
// logit_bias ({"id": -100..100}; ids below n_vocab). Fields that would
// change the output but are not implemented (functions / function_call,
// audio, best_of > 1, echo, suffix) are 400s.
serving::GenerationParams parse_generation(const nlohmann::ordered_json& body, bool chat, size_t n_vocab);

// What every response and chunk of one request carries.
struct ResponseHead {
  std::string id;  // chatcmpl-... / cmpl-...
  int64_t created = 0;
  std::string model;
  bool chat = false;
  bool logprobs = false;
};
ResponseHead response_head(const CompletionRequest& r, const std::string& model);

// The whole response of a non-streamed request from its folded events.
// (finish_reason, tool calls, usage and timings: serving/reply.h, shared
// with the Node package.)
nlohmann::json completion_response(const ResponseHead& h, const serving::Reply& reply);
// Stream chunks: the chat's opening role delta; one event's text (and
// log-probabilities); the last event's finish reason and timings; the usage
// chunk of stream_options.include_usage.
nlohmann::json role_chunk(const ResponseHead& h);
nlohmann::json text_chunk(const ResponseHead& h, const serving::Event& e);
nlohmann::json final_chunk(const ResponseHead& h, const serving::Event& last, bool tool_calls = false);
// One tool call streamed as OpenAI streams it (delta.tool_calls[index]):
// id, type and name first, then the arguments.
std::vector<nlohmann::json> tool_call_chunks(const ResponseHead& h, int index, const serving::ToolCall& c);
nlohmann::json usage_chunk(const ResponseHead& h, const serving::Event& last);

// /tokenize and /detokenize: at most 65536 tokens out (a 413 past that).
struct TokenizeRequest {
  std::string content;
  bool add_special = false;
  bool with_pieces = false;
};
TokenizeRequest parse_tokenize(const nlohmann::ordered_json& body);
nlohmann::json tokenize_response(const std::vector<TokenId>& ids, bool with_pieces,
                                 const Tokenizer& tokenizer);
nlohmann::json detokenize_response(const std::vector<TokenId>& ids, const Tokenizer& tokenizer);

// /v1/embeddings: a string, token ids, or an array of either (at most 256).
struct EmbeddingRequest {
  std::vector<std::vector<TokenId>> inputs;
  bool base64 = false;
  bool truncate = false;  // cut inputs longer than the model takes (else a 400 naming the index)
};
EmbeddingRequest parse_embeddings(const nlohmann::ordered_json& body, const Tokenizer& tokenizer);
nlohmann::json embeddings_response(const EmbeddingRequest& r,
                                   const std::vector<std::vector<float>>& vectors,
                                   const std::string& model);

// /rerank, /v1/rerank (llama-server's shape): `query` and `documents` (or
// TEI's `texts`), at most 256 non-empty strings; `top_n` (default all);
// `return_text`. Each document is laid out with the query as
// serving::rerank_tokens does.
struct RerankRequest {
  std::vector<std::string> documents;
  std::vector<std::vector<TokenId>> inputs;  // per document: query and document
  size_t top_n = 0;
  bool return_text = false;
  bool truncate = false;  // cut pairs longer than the model takes (else a 400 naming the index)
  bool tei = false;  // `texts`: TEI's answer, a bare array with `score` and `text`
};
// rerank_template: the model's (serving::rerank_template), or empty.
RerankRequest parse_rerank(const nlohmann::ordered_json& body, const Tokenizer& tokenizer,
                           std::string_view rerank_template = {});
// Results sorted by score, best first, the first top_n: {index,
// relevance_score, document: {text}?} under llama-server's list object, or
// TEI's [{index, score, text?}].
nlohmann::json rerank_response(const RerankRequest& r, const std::vector<float>& scores,
                               const std::string& model);

// `v` as token ids of this vocabulary; errors name `field`.
std::vector<TokenId> token_ids(const nlohmann::ordered_json& v, const char* field, size_t n_vocab);

}  // namespace tessera::server
