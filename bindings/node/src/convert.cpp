#include "convert.h"

#include <charconv>
#include <cmath>
#include <limits>

namespace tessera::node {
namespace {

Napi::Value get(const Napi::Object& o, const char* key) {
  Napi::Value v = o.Get(key);
  return v.IsUndefined() || v.IsNull() ? Napi::Value() : v;
}

[[noreturn]] void wrong(const Napi::Object& o, const char* key, const char* expected) {
  throw Napi::TypeError::New(o.Env(), std::string("option '") + key + "': expected " + expected);
}

}  // namespace

bool has(const Napi::Object& o, const char* key) { return !get(o, key).IsEmpty(); }

double number(const Napi::Object& o, const char* key, double fallback) {
  Napi::Value v = get(o, key);
  if (v.IsEmpty()) return fallback;
  if (!v.IsNumber() || !std::isfinite(v.As<Napi::Number>().DoubleValue())) {
    wrong(o, key, "a finite number");
  }
  return v.As<Napi::Number>().DoubleValue();
}

int64_t integer(const Napi::Object& o, const char* key, int64_t fallback) {
  Napi::Value v = get(o, key);
  if (v.IsEmpty()) return fallback;
  const double d = v.IsNumber() ? v.As<Napi::Number>().DoubleValue() : 0.5;
  if (!v.IsNumber() || d != std::floor(d) || std::abs(d) > 9007199254740991.0) {
    wrong(o, key, "an integer");
  }
  return static_cast<int64_t>(d);
}

bool boolean(const Napi::Object& o, const char* key, bool fallback) {
  Napi::Value v = get(o, key);
  if (v.IsEmpty()) return fallback;
  if (!v.IsBoolean()) wrong(o, key, "a boolean");
  return v.As<Napi::Boolean>().Value();
}

std::string string(const Napi::Object& o, const char* key, const std::string& fallback) {
  Napi::Value v = get(o, key);
  if (v.IsEmpty()) return fallback;
  if (!v.IsString()) wrong(o, key, "a string");
  return v.As<Napi::String>().Utf8Value();
}

serving::GenerationParams generation_params(const Napi::Object& o) {
  serving::GenerationParams g;
  SamplerParams& s = g.sampling;
  const int64_t n_predict = integer(o, "n_predict", integer(o, "max_tokens", -1));
  if (n_predict < -1 || n_predict > std::numeric_limits<int32_t>::max()) {
    throw Napi::RangeError::New(o.Env(), "option 'n_predict': expected -1 (no limit) or more");
  }
  g.max_tokens = static_cast<int32_t>(n_predict);
  s.temp = static_cast<float>(number(o, "temperature", s.temp));
  s.top_k = static_cast<int32_t>(integer(o, "top_k", s.top_k));
  s.top_p = static_cast<float>(number(o, "top_p", s.top_p));
  s.min_p = static_cast<float>(number(o, "min_p", s.min_p));
  s.repeat_penalty = static_cast<float>(number(o, "penalty_repeat", s.repeat_penalty));
  s.repeat_last_n = static_cast<int32_t>(integer(o, "penalty_last_n", s.repeat_last_n));
  s.frequency_penalty = static_cast<float>(number(o, "penalty_freq", s.frequency_penalty));
  s.presence_penalty = static_cast<float>(number(o, "penalty_present", s.presence_penalty));
  const int64_t seed = integer(o, "seed", -1);
  if (seed < -1 || seed > 0xFFFFFFFFll) {
    throw Napi::RangeError::New(o.Env(), "option 'seed': expected -1 (random) or 0..4294967295");
  }
  s.seed = seed < 0 ? 0xFFFFFFFFu : static_cast<uint32_t>(seed);
  g.ignore_eos = boolean(o, "ignore_eos", false);
  const int64_t n_probs = integer(o, "n_probs", 0);
  if (n_probs < 0 || n_probs > 100) {
    throw Napi::RangeError::New(o.Env(), "option 'n_probs': expected 0..100");
  }
  g.top_logprobs = n_probs > 0 ? static_cast<int>(n_probs) : -1;
  if (Napi::Value stop = get(o, "stop"); !stop.IsEmpty()) {
    if (stop.IsString()) {
      g.stop.push_back(stop.As<Napi::String>().Utf8Value());
    } else if (stop.IsArray()) {
      const Napi::Array a = stop.As<Napi::Array>();
      for (uint32_t i = 0; i < a.Length(); ++i) {
        if (!a.Get(i).IsString()) wrong(o, "stop", "a string or an array of strings");
        g.stop.push_back(a.Get(i).As<Napi::String>().Utf8Value());
      }
    } else {
      wrong(o, "stop", "a string or an array of strings");
    }
  }
  if (Napi::Value bias = get(o, "logit_bias"); !bias.IsEmpty()) {
    auto add = [&](const Napi::Value& id, const Napi::Value& b) {
      double token = -1;
      if (id.IsNumber()) {
        token = id.As<Napi::Number>().DoubleValue();
      } else if (id.IsString()) {
        const std::string text = id.As<Napi::String>().Utf8Value();
        int64_t parsed = -1;
        const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), parsed);
        if (ec == std::errc() && end == text.data() + text.size()) token = static_cast<double>(parsed);
      }
      double value = 0;
      if (b.IsBoolean() && !b.As<Napi::Boolean>().Value()) {
        value = -std::numeric_limits<double>::infinity();  // llama.cpp: false bans the token
      } else if (b.IsNumber()) {
        value = b.As<Napi::Number>().DoubleValue();
      } else {
        wrong(o, "logit_bias", "[[token, bias], ...] or {token: bias} with numeric biases");
      }
      if (token < 0 || token != std::floor(token) || token > std::numeric_limits<int32_t>::max()) {
        wrong(o, "logit_bias", "token ids that are integers >= 0");
      }
      s.logit_bias.emplace_back(static_cast<int32_t>(token), static_cast<float>(value));
    };
    if (bias.IsArray()) {
      const Napi::Array a = bias.As<Napi::Array>();
      for (uint32_t i = 0; i < a.Length(); ++i) {
        Napi::Value pair = a.Get(i);
        if (!pair.IsArray() || pair.As<Napi::Array>().Length() != 2) {
          wrong(o, "logit_bias", "[[token, bias], ...] or {token: bias}");
        }
        add(pair.As<Napi::Array>().Get(0u), pair.As<Napi::Array>().Get(1u));
      }
    } else if (bias.IsObject()) {
      const Napi::Object m = bias.As<Napi::Object>();
      const Napi::Array keys = m.GetPropertyNames();
      for (uint32_t i = 0; i < keys.Length(); ++i) add(keys.Get(i), m.Get(keys.Get(i)));
    } else {
      wrong(o, "logit_bias", "[[token, bias], ...] or {token: bias}");
    }
  }
  return g;
}

namespace {

template <typename Json>
Json convert(const Napi::Value& v, const std::string& what, int depth) {
  if (depth > 64) throw Napi::RangeError::New(v.Env(), what + ": nested deeper than 64 levels");
  if (v.IsUndefined() || v.IsNull()) return nullptr;
  if (v.IsBoolean()) return v.As<Napi::Boolean>().Value();
  if (v.IsNumber()) {
    const double d = v.As<Napi::Number>().DoubleValue();
    if (d == std::floor(d) && std::abs(d) < 9007199254740992.0) return static_cast<int64_t>(d);
    return d;
  }
  if (v.IsString()) return v.As<Napi::String>().Utf8Value();
  if (v.IsArray()) {
    Json out = Json::array();
    const Napi::Array a = v.As<Napi::Array>();
    for (uint32_t i = 0; i < a.Length(); ++i) {
      out.push_back(convert<Json>(a.Get(i), what + "[" + std::to_string(i) + "]", depth + 1));
    }
    return out;
  }
  if (v.IsObject() && !v.IsFunction()) {
    Json out = Json::object();
    const Napi::Object o = v.As<Napi::Object>();
    const Napi::Array keys = o.GetPropertyNames();
    for (uint32_t i = 0; i < keys.Length(); ++i) {
      const std::string k = keys.Get(i).ToString().Utf8Value();
      out[k] = convert<Json>(o.Get(k), what + "." + k, depth + 1);
    }
    return out;
  }
  throw Napi::TypeError::New(v.Env(), what + ": expected plain data (no functions or symbols)");
}

}  // namespace

nlohmann::json to_json(const Napi::Value& v, const std::string& what, int depth) {
  return convert<nlohmann::json>(v, what, depth);
}

nlohmann::ordered_json to_ordered_json(const Napi::Value& v, const std::string& what, int depth) {
  return convert<nlohmann::ordered_json>(v, what, depth);
}

Napi::Value from_json(Napi::Env env, const nlohmann::json& j) {
  switch (j.type()) {
    case nlohmann::json::value_t::null: return env.Null();
    case nlohmann::json::value_t::boolean: return Napi::Boolean::New(env, j.get<bool>());
    case nlohmann::json::value_t::number_integer:
    case nlohmann::json::value_t::number_unsigned:
    case nlohmann::json::value_t::number_float: return Napi::Number::New(env, j.get<double>());
    case nlohmann::json::value_t::string: return Napi::String::New(env, j.get<std::string>());
    case nlohmann::json::value_t::array: {
      Napi::Array a = Napi::Array::New(env, j.size());
      for (size_t i = 0; i < j.size(); ++i) a.Set(static_cast<uint32_t>(i), from_json(env, j[i]));
      return a;
    }
    case nlohmann::json::value_t::object: {
      Napi::Object o = Napi::Object::New(env);
      for (const auto& [k, v] : j.items()) o.Set(k, from_json(env, v));
      return o;
    }
    default: return env.Undefined();
  }
}

}  // namespace tessera::node
