// JS values to tessera's types and back, for the addon. Option readers treat
// undefined and null as absent and throw a TypeError naming the option for a
// value of the wrong type (on the JS thread only).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <napi.h>
#include <nlohmann/json.hpp>

#include "tessera/serving/serving.h"

namespace tessera::node {

bool has(const Napi::Object& o, const char* key);
double number(const Napi::Object& o, const char* key, double fallback);
int64_t integer(const Napi::Object& o, const char* key, int64_t fallback);
bool boolean(const Napi::Object& o, const char* key, bool fallback);
std::string string(const Napi::Object& o, const char* key, const std::string& fallback);

// completion()'s sampling and stopping options, as llama.node names them:
// n_predict (or max_tokens), temperature, top_k, top_p, min_p,
// penalty_repeat, penalty_last_n, penalty_freq, penalty_present, seed,
// stop (a string or an array of strings), ignore_eos, n_probs, logit_bias
// ([[token, bias], ...] or {token: bias}).
serving::GenerationParams generation_params(const Napi::Object& o);

// Plain JS data (objects, arrays, strings, numbers, booleans, null) to JSON
// and back; `what` names the value in errors.
nlohmann::json to_json(const Napi::Value& v, const std::string& what, int depth = 0);
// The same keeping the objects' key order (JSON schemas: properties in order).
nlohmann::ordered_json to_ordered_json(const Napi::Value& v, const std::string& what, int depth = 0);
Napi::Value from_json(Napi::Env env, const nlohmann::json& j);

}  // namespace tessera::node
