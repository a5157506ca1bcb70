// The native side of a loaded model: LlamaContext in lib/index.js wraps one
// NativeContext. Work that takes time runs off the JS thread: loading,
// tokenizing, embeddings and sessions on Node's worker pool, generation on
// the serving core's generator thread, whose events come back through a
// thread-safe function per completion. Every completion's promise settles
// exactly once, whatever ends it (its end, a stop, a cancel, release()).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include <napi.h>
#include <nlohmann/json.hpp>

#include "tessera/serving/chat.h"
#include "tessera/serving/embedder.h"
#include "tessera/serving/loaded_model.h"
#include "tessera/serving/serving.h"

namespace tessera::node {

struct LoadSettings {
  serving::LoadOptions load;
  serving::GeneratorOptions generator;
  std::string chat_template;  // a built-in name or a Jinja source; "": the model's
  std::optional<serving::Pooling> pooling;
};

// What a context owns; shared with the workers in flight, so release() can
// drop it while one runs.
struct State {
  State(serving::LoadedModel m, LoadSettings s) : loaded(std::move(m)), settings(std::move(s)) {}
  serving::LoadedModel loaded;
  LoadSettings settings;  // settings.generator under generator_mutex
  std::mutex mutex;  // renderers, embedder
  std::map<std::string, std::unique_ptr<serving::ChatRenderer>> renderers;
  std::unique_ptr<serving::Embedder> embedder;
  nlohmann::json info;  // getModelInfo()

  static std::shared_ptr<State> load(const LoadSettings& settings,
                                     const std::function<void(uint64_t, uint64_t)>& progress);
  const serving::ChatRenderer& renderer(const std::string& chat_template);
  serving::Embedder& embedder_for_use();

  // The generator, shared with the caller: parallel.enable() may replace it
  // meanwhile (the caller's keeps working until dropped, shut down).
  // Throws when a failed replacement left none.
  std::shared_ptr<serving::Generator> gen() const;
  // A generator of n slots in place of the one there; on failure the old
  // slot count is made again.
  void replace_generator(int n_slots);
  void shutdown();

 private:
  mutable std::mutex generator_mutex_;
  std::shared_ptr<serving::Generator> generator_;
};

struct Job;

class NativeContext : public Napi::ObjectWrap<NativeContext> {
 public:
  static Napi::Function define(Napi::Env env);
  explicit NativeContext(const Napi::CallbackInfo& info);
  ~NativeContext() override;

 private:
  std::shared_ptr<State> state(const Napi::Env& env) const;  // throws once released

  Napi::Value Completion(const Napi::CallbackInfo& info);
  Napi::Value Cancel(const Napi::CallbackInfo& info);
  Napi::Value Status(const Napi::CallbackInfo& info);
  Napi::Value Tokenize(const Napi::CallbackInfo& info);
  Napi::Value Detokenize(const Napi::CallbackInfo& info);
  Napi::Value Embedding(const Napi::CallbackInfo& info);
  Napi::Value FormatChat(const Napi::CallbackInfo& info);
  Napi::Value ModelInfo(const Napi::CallbackInfo& info);
  Napi::Value SaveSession(const Napi::CallbackInfo& info);
  Napi::Value LoadSession(const Napi::CallbackInfo& info);
  Napi::Value ClearCache(const Napi::CallbackInfo& info);
  Napi::Value SetParallel(const Napi::CallbackInfo& info);
  Napi::Value Release(const Napi::CallbackInfo& info);

  std::shared_ptr<State> state_;
  // Completions not yet settled, by id; JS thread only.
  std::shared_ptr<std::map<uint32_t, std::shared_ptr<Job>>> jobs_ =
      std::make_shared<std::map<uint32_t, std::shared_ptr<Job>>>();
};

// Runs `work` on Node's worker pool and settles the returned promise with
// done(env, result) or with an Error carrying the exception's message.
template <typename T>
class Task : public Napi::AsyncWorker {
 public:
  Task(Napi::Env env, std::function<T()> work, std::function<Napi::Value(Napi::Env, T&)> done)
      : Napi::AsyncWorker(env),
        deferred_(Napi::Promise::Deferred::New(env)),
        work_(std::move(work)),
        done_(std::move(done)) {}
  void Execute() override {
    try {
      value_ = work_();
    } catch (const std::exception& e) {
      SetError(e.what());
    }
  }
  void OnOK() override {
    try {
      deferred_.Resolve(done_(Env(), value_));
    } catch (const Napi::Error& e) {
      deferred_.Reject(e.Value());
    } catch (const std::exception& e) {
      deferred_.Reject(Napi::Error::New(Env(), e.what()).Value());
    }
  }
  void OnError(const Napi::Error& e) override { deferred_.Reject(e.Value()); }
  Napi::Promise promise() const { return deferred_.Promise(); }

 private:
  Napi::Promise::Deferred deferred_;
  std::function<T()> work_;
  std::function<Napi::Value(Napi::Env, T&)> done_;
  T value_{};
};

template <typename T>
Napi::Promise run_task(Napi::Env env, std::function<T()> work,
                       std::function<Napi::Value(Napi::Env, T&)> done) {
  auto* task = new Task<T>(env, std::move(work), std::move(done));  // deletes itself
  Napi::Promise promise = task->promise();
  task->Queue();
  return promise;
}

// Calls f, turning a C++ exception into a JS Error (node-addon-api passes on
// only its own).
template <typename F>
auto guarded(const Napi::Env& env, F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const Napi::Error&) {
    throw;
  } catch (const std::exception& e) {
    throw Napi::Error::New(env, e.what());
  }
}

}  // namespace tessera::node
