// completion(): a request's options read into the serving core's
// parameters, the prompt tokenized off the JS thread, and its events folded
// (serving::Reply, as the server folds them) into llama.node's result and
// onToken calls. Every completion's promise settles exactly once, whatever
// ends it (its end, a stop, a cancel, release()).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>

#include <napi.h>

#include "state.h"
#include "tessera/serving/reply.h"
#include "tessera/serving/serving.h"

namespace tessera::node {

using Clock = std::chrono::steady_clock;

// One completion in flight.
struct Job {
  uint32_t id = 0;
  Napi::Promise::Deferred deferred;
  Napi::ThreadSafeFunction tsfn;
  bool has_callback = false;
  int32_t max_tokens = -1;
  Clock::time_point start = Clock::now();
  std::atomic<bool> cancel_asked{false};
  std::mutex mutex;  // request
  std::shared_ptr<serving::Request> request;
  serving::Reply reply;  // JS thread only: the events so far
  std::optional<Napi::Error> callback_error;  // onToken threw: the completion rejects with it

  explicit Job(Napi::Env env) : deferred(Napi::Promise::Deferred::New(env)) {}

  void cancel() {
    cancel_asked = true;
    std::lock_guard lock(mutex);
    if (request) request->cancel();
  }
  std::shared_ptr<serving::Request> current() {
    std::lock_guard lock(mutex);
    return request;
  }
};

// Completions not yet settled, by id; JS thread only.
using Jobs = std::map<uint32_t, std::shared_ptr<Job>>;

// completion(options, id, onToken?) on the context of `state`: returns the
// job's promise.
Napi::Value start_completion(const Napi::CallbackInfo& info, const std::shared_ptr<State>& state,
                             const std::shared_ptr<Jobs>& jobs);

}  // namespace tessera::node
