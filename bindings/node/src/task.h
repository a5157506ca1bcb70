// Work off the JS thread and C++ errors as JS errors: what every part of the
// addon uses to answer a call with a promise.
#pragma once

#include <exception>
#include <functional>
#include <utility>

#include <napi.h>

namespace tessera::node {

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
