#include "context.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "convert.h"
#include "task.h"
#include "tessera/core/error.h"

namespace tessera::node {

// ---- NativeContext --------------------------------------------------------------------

Napi::Function NativeContext::define(Napi::Env env) {
  return DefineClass(env, "NativeContext",
                     {InstanceMethod("completion", &NativeContext::Completion),
                      InstanceMethod("cancel", &NativeContext::Cancel),
                      InstanceMethod("status", &NativeContext::Status),
                      InstanceMethod("tokenize", &NativeContext::Tokenize),
                      InstanceMethod("detokenize", &NativeContext::Detokenize),
                      InstanceMethod("embedding", &NativeContext::Embedding),
                      InstanceMethod("rerank", &NativeContext::Rerank),
                      InstanceMethod("formatChat", &NativeContext::FormatChat),
                      InstanceMethod("modelInfo", &NativeContext::ModelInfo),
                      InstanceMethod("saveSession", &NativeContext::SaveSession),
                      InstanceMethod("loadSession", &NativeContext::LoadSession),
                      InstanceMethod("clearCache", &NativeContext::ClearCache),
                      InstanceMethod("setParallel", &NativeContext::SetParallel),
                      InstanceMethod("release", &NativeContext::Release)});
}

NativeContext::NativeContext(const Napi::CallbackInfo& info) : Napi::ObjectWrap<NativeContext>(info) {
  if (info.Length() != 1 || !info[0].IsExternal()) {
    throw Napi::TypeError::New(info.Env(), "NativeContext is made by loadModel()");
  }
  auto* s = info[0].As<Napi::External<std::shared_ptr<State>>>().Data();
  state_ = std::move(*s);
}

// Collected (or the process ending) without release(): stop and free here.
NativeContext::~NativeContext() {
  if (state_) state_->shutdown();
}

std::shared_ptr<State> NativeContext::state(const Napi::Env& env) const {
  if (!state_) throw Napi::Error::New(env, "this context was released");
  return state_;
}

Napi::Value NativeContext::Completion(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  return guarded(env, [&]() -> Napi::Value { return start_completion(info, state(env), jobs_); });
}

Napi::Value NativeContext::Cancel(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() < 1 || !info[0].IsNumber()) throw Napi::TypeError::New(env, "cancel(requestId)");
  const auto it = jobs_->find(info[0].As<Napi::Number>().Uint32Value());
  if (it == jobs_->end()) return Napi::Boolean::New(env, false);
  it->second->cancel();
  return Napi::Boolean::New(env, true);
}

Napi::Value NativeContext::Status(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  return guarded(env, [&]() -> Napi::Value {
    std::shared_ptr<State> s = state(env);
    const std::shared_ptr<serving::Generator> generator = s->gen();
    const serving::GeneratorMetrics m = generator->metrics();
    nlohmann::json requests = nlohmann::json::array();
    int queued = 0;
    for (const auto& [id, job] : *jobs_) {
      const std::shared_ptr<serving::Request> r = job->current();
      using Phase = serving::Request::Phase;
      const Phase phase = r ? r->phase() : Phase::kQueued;
      queued += phase == Phase::kQueued;
      const char* name = phase == Phase::kQueued ? "queued"
                         : phase == Phase::kPrompt ? "processing_prompt"
                         : phase == Phase::kGenerating ? "generating"
                                                       : "done";
      const double seconds = std::chrono::duration<double>(Clock::now() - job->start).count();
      const int64_t generated = r ? r->generated() : 0;
      requests.push_back({{"requestId", id},
                          {"state", name},
                          {"tokens_generated", generated},
                          {"tokens_per_second", seconds > 0 ? double(generated) / seconds : 0.0}});
    }
    return from_json(env, {{"n_parallel", generator->n_slots()},
                           {"active_slots", m.slots_busy},
                           {"queued_requests", queued},
                           {"requests", requests}});
  });
}

Napi::Value NativeContext::Tokenize(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  return guarded(env, [&]() -> Napi::Value {
    std::shared_ptr<State> s = state(env);
    if (info.Length() < 1 || !info[0].IsString()) {
      throw Napi::TypeError::New(env, "tokenize(text): text must be a string");
    }
    std::string text = info[0].As<Napi::String>().Utf8Value();
    return run_task<std::vector<TokenId>>(
        env, [s, text] { return s->loaded.tokenizer.tokenize(text, false, true); },
        [](Napi::Env e, std::vector<TokenId>& ids) -> Napi::Value {
          Napi::Int32Array a = Napi::Int32Array::New(e, ids.size());
          std::copy(ids.begin(), ids.end(), a.Data());
          Napi::Object o = Napi::Object::New(e);
          o.Set("tokens", a);
          o.Set("has_media", false);
          return o;
        });
  });
}

Napi::Value NativeContext::Detokenize(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  return guarded(env, [&]() -> Napi::Value {
    std::shared_ptr<State> s = state(env);
    const nlohmann::json j = info.Length() > 0 ? to_json(info[0], "tokens") : nlohmann::json();
    if (!j.is_array()) throw Napi::TypeError::New(env, "detokenize(tokens): tokens must be an array of ids");
    std::vector<TokenId> ids;
    for (const auto& v : j) {
      if (!v.is_number_integer() || v.get<int64_t>() < 0 ||
          v.get<int64_t>() >= static_cast<int64_t>(s->loaded.tokenizer.n_vocab())) {
        throw Napi::RangeError::New(env, fmt::format("detokenize(): token {} is outside the "
                                                     "vocabulary [0, {})", v.dump(),
                                                     s->loaded.tokenizer.n_vocab()));
      }
      ids.push_back(static_cast<TokenId>(v.get<int64_t>()));
    }
    return run_task<std::string>(
        env, [s, ids] { return s->loaded.tokenizer.detokenize(ids); },
        [](Napi::Env e, std::string& text) -> Napi::Value { return Napi::String::New(e, text); });
  });
}

Napi::Value NativeContext::Embedding(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  return guarded(env, [&]() -> Napi::Value {
    std::shared_ptr<State> s = state(env);
    if (info.Length() < 1 || !info[0].IsString()) {
      throw Napi::TypeError::New(env, "embedding(text, options?): text must be a string");
    }
    std::string text = info[0].As<Napi::String>().Utf8Value();
    int normalize = 2;
    if (info.Length() > 1 && info[1].IsObject()) {
      normalize = static_cast<int>(integer(info[1].As<Napi::Object>(), "embd_normalize", 2));
    }
    return run_task<std::vector<float>>(
        env,
        [s, text, normalize] {
          return s->embedder_for_use().embed(s->loaded.tokenizer.tokenize(text, true, false),
                                             normalize);
        },
        [](Napi::Env e, std::vector<float>& v) -> Napi::Value {
          Napi::Float32Array a = Napi::Float32Array::New(e, v.size());
          std::copy(v.begin(), v.end(), a.Data());
          Napi::Object o = Napi::Object::New(e);
          o.Set("embedding", a);
          return o;
        });
  });
}

// rerank(query, documents, {normalize}): each document's score against the
// query by the model's classifier head (a reranker), best first, as
// llama.node answers: [{score, index}]. normalize 1: the scores through a
// sigmoid (0..1); 0 (default): as the head gives them.
Napi::Value NativeContext::Rerank(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  return guarded(env, [&]() -> Napi::Value {
    std::shared_ptr<State> s = state(env);
    if (info.Length() < 2 || !info[0].IsString() || !info[1].IsArray()) {
      throw Napi::TypeError::New(env, "rerank(query, documents, options?): query must be a string and "
                                      "documents an array of strings");
    }
    const std::string query = info[0].As<Napi::String>().Utf8Value();
    const Napi::Array docs = info[1].As<Napi::Array>();
    std::vector<std::string> documents;
    for (uint32_t i = 0; i < docs.Length(); ++i) {
      const Napi::Value d = docs.Get(i);
      if (!d.IsString()) {
        throw Napi::TypeError::New(env, "rerank: documents[" + std::to_string(i) + "] is not a string");
      }
      documents.push_back(d.As<Napi::String>().Utf8Value());
    }
    int normalize = 0;
    if (info.Length() > 2 && info[2].IsObject()) {
      normalize = static_cast<int>(integer(info[2].As<Napi::Object>(), "normalize", 0));
      if (normalize != 0 && normalize != 1) {
        throw Napi::TypeError::New(env, "rerank: normalize must be 0 (the raw scores) or 1 (sigmoid)");
      }
    }
    using Ranked = std::vector<std::pair<float, uint32_t>>;
    return run_task<Ranked>(
        env,
        [s, query, documents, normalize] {
          std::vector<std::vector<int32_t>> inputs;
          const std::string tmpl = serving::rerank_template(*s->loaded.model);
          for (const std::string& d : documents) {
            inputs.push_back(serving::rerank_tokens(s->loaded.tokenizer, query, d, tmpl));
          }
          Ranked ranked;
          const auto scores = s->ranker_for_use().embed_all(inputs);
          for (size_t i = 0; i < scores.size(); ++i) {
            const float v = scores[i].at(0);
            ranked.emplace_back(normalize == 1 ? 1.0f / (1.0f + std::exp(-v)) : v, static_cast<uint32_t>(i));
          }
          std::stable_sort(ranked.begin(), ranked.end(),
                           [](const auto& a, const auto& b) { return a.first > b.first; });
          return ranked;
        },
        [](Napi::Env e, Ranked& ranked) -> Napi::Value {
          Napi::Array out = Napi::Array::New(e, ranked.size());
          for (uint32_t i = 0; i < ranked.size(); ++i) {
            Napi::Object o = Napi::Object::New(e);
            o.Set("score", ranked[i].first);
            o.Set("index", ranked[i].second);
            out.Set(i, o);
          }
          return out;
        });
  });
}

Napi::Value NativeContext::FormatChat(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  return guarded(env, [&]() -> Napi::Value {
    std::shared_ptr<State> s = state(env);
    if (info.Length() < 1 || !info[0].IsArray()) {
      throw Napi::TypeError::New(env, "getFormattedChat(messages, template?): messages must be "
                                      "an array of {role, content}");
    }
    nlohmann::json messages = to_json(info[0], "messages");
    std::string chat_template = s->settings.chat_template;
    if (info.Length() > 1 && info[1].IsString()) chat_template = info[1].As<Napi::String>().Utf8Value();
    return run_task<std::string>(
        env,
        [s, messages, chat_template] {
          return s->renderer(chat_template).render(messages, true);
        },
        [](Napi::Env e, std::string& prompt) -> Napi::Value {
          Napi::Object o = Napi::Object::New(e);
          o.Set("prompt", prompt);
          o.Set("type", "llama-chat");
          return o;
        });
  });
}

Napi::Value NativeContext::ModelInfo(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  return guarded(env, [&]() -> Napi::Value { return from_json(env, state(env)->info); });
}

namespace {

std::string path_argument(const Napi::CallbackInfo& info, const char* call) {
  if (info.Length() < 1 || !info[0].IsString() || info[0].As<Napi::String>().Utf8Value().empty()) {
    throw Napi::TypeError::New(info.Env(), std::string(call) + "(path): path must be a non-empty string");
  }
  return info[0].As<Napi::String>().Utf8Value();
}

}  // namespace

Napi::Value NativeContext::SaveSession(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  return guarded(env, [&]() -> Napi::Value {
    std::shared_ptr<State> s = state(env);
    const std::string path = path_argument(info, "saveSession");
    return run_task<size_t>(
        env, [s, path] { return s->gen()->save_session(path); },
        [](Napi::Env e, size_t& n) -> Napi::Value {
          Napi::Object o = Napi::Object::New(e);
          o.Set("tokens_saved", static_cast<double>(n));
          return o;
        });
  });
}

Napi::Value NativeContext::LoadSession(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  return guarded(env, [&]() -> Napi::Value {
    std::shared_ptr<State> s = state(env);
    const std::string path = path_argument(info, "loadSession");
    using Loaded = std::pair<std::vector<TokenId>, std::string>;
    return run_task<Loaded>(
        env,
        [s, path] {
          std::vector<TokenId> tokens = s->gen()->load_session(path);
          std::string text = s->loaded.tokenizer.detokenize(tokens);
          return Loaded{std::move(tokens), std::move(text)};
        },
        [](Napi::Env e, Loaded& l) -> Napi::Value {
          Napi::Object o = Napi::Object::New(e);
          o.Set("tokens_loaded", static_cast<double>(l.first.size()));
          o.Set("prompt", l.second);
          return o;
        });
  });
}

Napi::Value NativeContext::ClearCache(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  return guarded(env, [&]() -> Napi::Value {
    std::shared_ptr<State> s = state(env);
    return run_task<bool>(
        env,
        [s] {
          s->gen()->clear_cache();
          return true;
        },
        [](Napi::Env e, bool&) -> Napi::Value { return e.Undefined(); });
  });
}

// A generator of n slots in place of the one there (same context size),
// when nothing runs; the same count does nothing.
Napi::Value NativeContext::SetParallel(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  return guarded(env, [&]() -> Napi::Value {
    std::shared_ptr<State> s = state(env);
    if (info.Length() < 1 || !info[0].IsNumber()) throw Napi::TypeError::New(env, "n_parallel must be a number");
    const int n = info[0].As<Napi::Number>().Int32Value();
    if (n < 1 || n > kMaxSequences) {
      throw Napi::RangeError::New(env, fmt::format("n_parallel {}: expected 1..{}", n, kMaxSequences));
    }
    if (n == s->gen()->n_slots()) return run_task<bool>(env, [] { return true; }, [](Napi::Env e, bool&) -> Napi::Value { return e.Undefined(); });
    if (!jobs_->empty()) {
      throw Napi::Error::New(env, fmt::format("n_parallel: {} request(s) are running or queued; "
                                              "change the slots when none are", jobs_->size()));
    }
    return run_task<bool>(
        env,
        [s, n] {
          s->replace_generator(n);
          return true;
        },
        [](Napi::Env e, bool&) -> Napi::Value { return e.Undefined(); });
  });
}

// Ends what runs (its promises resolve with interrupted: true), then frees
// the model off the JS thread. Later calls reject.
Napi::Value NativeContext::Release(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (!state_) {
    return run_task<bool>(env, [] { return true; }, [](Napi::Env e, bool&) -> Napi::Value { return e.Undefined(); });
  }
  std::shared_ptr<State> s = std::move(state_);
  return run_task<bool>(
      env,
      [s]() mutable {
        s->shutdown();
        s.reset();  // the last owner frees here, unless a worker still runs
        return true;
      },
      [](Napi::Env e, bool&) -> Napi::Value { return e.Undefined(); });
}

}  // namespace tessera::node
