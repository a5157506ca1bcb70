// The native side of a loaded model: LlamaContext in lib/index.js wraps one
// NativeContext. Work that takes time runs off the JS thread: tokenizing,
// embeddings and sessions on Node's worker pool (task.h), generation on the
// serving core's generator thread (completion.h).
#pragma once

#include <memory>

#include <napi.h>

#include "completion.h"
#include "state.h"

namespace tessera::node {

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
  Napi::Value Rerank(const Napi::CallbackInfo& info);
  Napi::Value FormatChat(const Napi::CallbackInfo& info);
  Napi::Value ModelInfo(const Napi::CallbackInfo& info);
  Napi::Value SaveSession(const Napi::CallbackInfo& info);
  Napi::Value LoadSession(const Napi::CallbackInfo& info);
  Napi::Value ClearCache(const Napi::CallbackInfo& info);
  Napi::Value SetParallel(const Napi::CallbackInfo& info);
  Napi::Value Release(const Napi::CallbackInfo& info);

  std::shared_ptr<State> state_;
  // Completions not yet settled, by id; JS thread only.
  std::shared_ptr<Jobs> jobs_ = std::make_shared<Jobs>();
};

}  // namespace tessera::node
