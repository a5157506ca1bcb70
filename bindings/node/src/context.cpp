#include "context.h"

#include <cmath>
#include <iterator>

#include <fmt/format.h>

#include "convert.h"
#include "tessera/core/error.h"
#include "tessera/grammar/grammar.h"
#include "tessera/serving/inspect.h"

namespace tessera::node {

using Clock = std::chrono::steady_clock;

// ---- State ----------------------------------------------------------------------------

namespace {

nlohmann::json model_info_json(const serving::LoadedModel& m) {
  const serving::ModelInfo info = serving::model_info(*m.model);
  nlohmann::json metadata = nlohmann::json::object();
  std::string arch, name, chat_template;
  for (serving::MetadataEntry& e : serving::model_metadata(*m.model)) {
    if (e.key == "general.architecture") arch = e.value;
    if (e.key == "general.name") name = e.value;
    if (e.key == "tokenizer.chat_template") chat_template = e.value;
    metadata[std::move(e.key)] = std::move(e.value);
  }
  const double params = static_cast<double>(info.n_params);
  const std::string size = params >= 1e9   ? fmt::format("{:.1f}B", params / 1e9)
                           : params >= 1e6 ? fmt::format("{:.0f}M", params / 1e6)
                                           : fmt::format("{:.0f}K", params / 1e3);
  const bool has_template = !chat_template.empty();
  return {
      {"desc", fmt::format("{} {}{}", arch, size, name.empty() ? "" : " (" + name + ")")},
      {"nEmbd", info.n_embd},
      {"nParams", info.n_params},
      {"size", info.size_bytes},
      {"nVocab", info.n_vocab},
      {"nCtxTrain", info.n_ctx_train},
      {"metadata", metadata},
      {"chatTemplates",
       {{"llamaChat", true},
        {"minja",
         {{"default", has_template},
          {"toolUse", chat_template.find("tools") != std::string::npos}}}}},
      {"isChatTemplateSupported", true},
  };
}

}  // namespace

std::shared_ptr<State> State::load(const LoadSettings& settings,
                                   const std::function<void(uint64_t, uint64_t)>& progress) {
  serving::LoadOptions o = settings.load;
  o.progress = progress;
  auto s = std::make_shared<State>(serving::load(o), settings);
  const Model& model = *s->loaded.model;
  for (const auto& [name, type] : {std::pair{"cache_type_k", settings.generator.type_k},
                                   std::pair{"cache_type_v", settings.generator.type_v}}) {
    if (model.hparams().head_dim % dtype_info(type).block_size != 0) {
      fail(ErrorCategory::kInvalidArgument,
           "[{} {}] needs the model's head size ({}) to be a multiple of its block size {}", name,
           dtype_name(type), model.hparams().head_dim, dtype_info(type).block_size);
    }
  }
  s->generator_ = std::make_shared<serving::Generator>(model, s->loaded.tokenizer, settings.generator);
  s->generator_->start();
  s->renderer(settings.chat_template);  // a template that does not parse fails the load
  s->info = model_info_json(s->loaded);
  return s;
}

const serving::ChatRenderer& State::renderer(const std::string& chat_template) {
  std::lock_guard lock(mutex);
  auto& r = renderers[chat_template];
  if (!r) {
    r = std::make_unique<serving::ChatRenderer>(loaded.model->file(), loaded.tokenizer,
                                                chat_template);
  }
  return *r;
}

serving::Embedder& State::embedder_for_use() {
  std::lock_guard lock(mutex);
  if (!embedder) {
    const Model& model = *loaded.model;
    embedder = std::make_unique<serving::Embedder>(
        model, settings.pooling.value_or(serving::model_pooling(model)),
        std::max<int64_t>(settings.generator.n_ctx, 512));
  }
  return *embedder;
}

std::shared_ptr<serving::Generator> State::gen() const {
  std::lock_guard lock(generator_mutex_);
  if (!generator_) throw std::runtime_error("this context has no generator (a failed parallel.enable())");
  return generator_;
}

void State::replace_generator(int n_slots) {
  std::lock_guard lock(generator_mutex_);
  serving::GeneratorOptions g = settings.generator;
  const int before = g.n_slots;
  g.n_slots = n_slots;
  if (generator_) generator_->shutdown();
  generator_.reset();  // its cache first: both might not fit together
  try {
    generator_ = std::make_shared<serving::Generator>(*loaded.model, loaded.tokenizer, g);
  } catch (...) {
    g.n_slots = before;
    generator_ = std::make_shared<serving::Generator>(*loaded.model, loaded.tokenizer, g);
    generator_->start();
    throw;
  }
  generator_->start();
  settings.generator = g;
}

void State::shutdown() {
  std::lock_guard lock(generator_mutex_);
  if (generator_) generator_->shutdown();
}

// ---- completions ----------------------------------------------------------------------

using Jobs = std::map<uint32_t, std::shared_ptr<Job>>;

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
  // JS thread only:
  std::string text, reasoning;
  nlohmann::json probs = nlohmann::json::array();
  nlohmann::json tool_calls = nlohmann::json::array();  // OpenAI's shape: {id, type, function}
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

namespace {

nlohmann::json event_probs(const serving::Event& e) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& [chosen, alts] : e.probs) {
    nlohmann::json top = nlohmann::json::array();
    for (const serving::TokenProb& t : alts) {
      top.push_back({{"id", t.id}, {"tok_str", t.text}, {"prob", std::exp(double(t.logprob))}});
    }
    out.push_back({{"id", chosen.id}, {"content", chosen.text},
                   {"prob", std::exp(double(chosen.logprob))}, {"probs", top}});
  }
  return out;
}

Napi::Object result_object(Napi::Env env, const Job& job, const serving::Event& e) {
  using serving::FinishReason;
  const int64_t prompt_n = e.n_prompt - e.n_cached;
  const bool length = e.finish == FinishReason::kLength;
  nlohmann::json r = {
      {"text", job.text},  // the answer; with reasoning_format none, the thinking too
      {"content", job.text},
      {"reasoning_content", job.reasoning},
      {"tokens_predicted", e.n_gen},
      {"tokens_evaluated", e.n_prompt},
      {"tokens_cached", e.n_cached},
      {"truncated", false},
      {"context_full", length && (job.max_tokens < 0 || e.n_gen < job.max_tokens)},
      {"interrupted", e.finish == FinishReason::kCancelled || e.finish == FinishReason::kShutdown},
      {"stopped_eos", e.finish == FinishReason::kEndOfText},
      {"stopped_word", e.finish == FinishReason::kStop},
      {"stopped_limit", length && job.max_tokens >= 0 && e.n_gen >= job.max_tokens},
      {"stopping_word", e.stop},
      {"finish_reason", std::string(serving::finish_reason_name(e.finish))},
      {"seed", e.seed},
      {"timings",
       {{"cache_n", e.n_cached},
        {"prompt_n", prompt_n},
        {"prompt_ms", e.prompt_ms},
        {"prompt_per_token_ms", prompt_n > 0 ? e.prompt_ms / double(prompt_n) : 0.0},
        {"prompt_per_second", e.prompt_ms > 0 ? 1e3 * double(prompt_n) / e.prompt_ms : 0.0},
        {"predicted_n", e.n_gen},
        {"predicted_ms", e.gen_ms},
        {"predicted_per_token_ms", e.n_gen > 0 ? e.gen_ms / double(e.n_gen) : 0.0},
        {"predicted_per_second", e.gen_ms > 0 ? 1e3 * double(e.n_gen) / e.gen_ms : 0.0}}},
  };
  if (!job.probs.empty()) r["completion_probabilities"] = job.probs;
  if (!job.tool_calls.empty()) r["tool_calls"] = job.tool_calls;
  return from_json(env, r).As<Napi::Object>();
}

void settle(Napi::Env env, Job& job, const serving::Event& e);

// On the JS thread, for each event of a job in order.
void on_event(Napi::Env env, Napi::Function callback, const std::shared_ptr<Job>& job,
              const std::shared_ptr<Jobs>& jobs, serving::Event& e) {
  job->text += e.text;
  job->reasoning += e.reasoning;
  nlohmann::json probs = e.probs.empty() ? nlohmann::json::array() : event_probs(e);
  for (auto& p : probs) job->probs.push_back(p);
  nlohmann::json calls = nlohmann::json::array();
  for (const serving::ToolCall& c : e.tool_calls) {
    calls.push_back({{"type", "function"},
                     {"function", {{"name", c.name}, {"arguments", c.arguments}}},
                     {"id", c.id}});
  }
  for (const auto& c : calls) job->tool_calls.push_back(c);
  if (job->has_callback && !job->callback_error &&
      (!e.text.empty() || !e.reasoning.empty() || !probs.empty() || !calls.empty())) {
    Napi::Object data = Napi::Object::New(env);
    data.Set("token", Napi::String::New(env, e.reasoning + e.text));
    if (!e.text.empty()) data.Set("content", Napi::String::New(env, e.text));
    if (!e.reasoning.empty()) data.Set("reasoning_content", Napi::String::New(env, e.reasoning));
    if (!probs.empty()) data.Set("completion_probabilities", from_json(env, probs));
    if (!calls.empty()) data.Set("tool_calls", from_json(env, calls));  // the calls completed by this token
    try {
      callback.Call({data});
    } catch (const Napi::Error& err) {
      job->callback_error = err;  // stop here; the promise rejects with it
      job->cancel();
    }
  }
  if (!e.done) return;
  try {
    settle(env, *job, e);
  } catch (const Napi::Error& err) {
    job->deferred.Reject(err.Value());
  } catch (const std::exception& err) {
    job->deferred.Reject(Napi::Error::New(env, err.what()).Value());
  }
  {
    std::lock_guard lock(job->mutex);
    job->request.reset();
  }
  job->tsfn.Release();
  jobs->erase(job->id);
}

// The promise of a job that ended: rejected when onToken threw or the
// decode failed, else resolved with the result.
void settle(Napi::Env env, Job& job, const serving::Event& e) {
  if (job.callback_error) {
    job.deferred.Reject(job.callback_error->Value());
  } else if (e.finish == serving::FinishReason::kError) {
    job.deferred.Reject(Napi::Error::New(env, e.error).Value());
  } else {
    job.deferred.Resolve(result_object(env, job, e));
  }
}

// The grammar the output keeps to: 'grammar', 'json_schema' or
// 'response_format', read as the server reads them.
std::optional<std::string> output_grammar(const Napi::Object& o) {
  nlohmann::ordered_json fields = nlohmann::ordered_json::object();
  for (const char* key : {"grammar", "json_schema", "response_format"}) {
    if (has(o, key)) fields[key] = to_ordered_json(o.Get(key), key);
  }
  try {
    return grammar::request_grammar(fields);
  } catch (const Error& e) {
    throw Napi::Error::New(o.Env(), std::string("option ") + e.what());
  }
}

struct Prompt {
  std::optional<std::string> text;
  std::optional<nlohmann::json> messages;
  std::string chat_template;
  nlohmann::json kwargs = nlohmann::json::object();  // chat_template_kwargs, enable_thinking
  nlohmann::ordered_json tools;  // for the template (null: none)
};

// Tokenizes the prompt and submits the request, on the worker pool; the
// job's own promise settles from its events (or here, when this fails).
class SubmitWorker : public Napi::AsyncWorker {
 public:
  SubmitWorker(Napi::Env env, std::shared_ptr<State> state, std::shared_ptr<Job> job,
               std::shared_ptr<Jobs> jobs, Prompt prompt, serving::GenerationParams params)
      : Napi::AsyncWorker(env),
        state_(std::move(state)),
        job_(std::move(job)),
        jobs_(std::move(jobs)),
        prompt_(std::move(prompt)),
        params_(std::move(params)) {}

  void Execute() override {
    try {
      const Tokenizer& tok = state_->loaded.tokenizer;
      std::vector<TokenId> tokens =
          prompt_.messages
              ? state_->renderer(prompt_.chat_template)
                    .tokenize(*prompt_.messages, true, tok, prompt_.kwargs, prompt_.tools)
              : tok.tokenize(*prompt_.text, true, true);
      if (params_.split_reasoning) params_.reasoning_open = serving::prompt_opens_thinking(tokens, tok);
      Napi::ThreadSafeFunction tsfn = job_->tsfn;
      // The job by a weak reference only: the jobs map on the JS thread
      // owns it until its last event, so it is never freed here.
      std::weak_ptr<Job> weak = job_;
      std::weak_ptr<Jobs> jobs = jobs_;
      // Without onToken, the events before the last wait here, on the
      // generator's thread: one call into JS per completion, not per token.
      const bool streaming = job_->has_callback;
      auto request = std::make_shared<serving::Request>(
          std::move(tokens), std::move(params_),
          [tsfn, weak, jobs, streaming, held = serving::Event{}](serving::Event&& e) mutable {
            if (!streaming) {
              held.text += e.text;
              held.reasoning += e.reasoning;
              std::move(e.probs.begin(), e.probs.end(), std::back_inserter(held.probs));
              std::move(e.tool_calls.begin(), e.tool_calls.end(), std::back_inserter(held.tool_calls));
              if (!e.done) return;
              e.text = std::move(held.text);
              e.reasoning = std::move(held.reasoning);
              e.probs = std::move(held.probs);
              e.tool_calls = std::move(held.tool_calls);
            }
            auto event = std::make_shared<serving::Event>(std::move(e));
            tsfn.BlockingCall([weak, jobs, event](Napi::Env env, Napi::Function cb) {
              const std::shared_ptr<Job> job = weak.lock();
              const std::shared_ptr<Jobs> all = jobs.lock();
              if (job && all) on_event(env, cb, job, all, *event);
            });
          });
      {
        std::lock_guard lock(job_->mutex);
        job_->request = request;
      }
      if (job_->cancel_asked) request->cancel();
      state_->gen()->submit(request);
    } catch (const serving::Stopped&) {
      SetError("the context was released");
    } catch (const std::exception& e) {
      SetError(e.what());
    }
    if (!error_.empty()) {
      std::lock_guard lock(job_->mutex);
      job_->request.reset();
    }
  }
  void SetError(const std::string& e) {
    error_ = e;
    Napi::AsyncWorker::SetError(e);
  }
  void OnError(const Napi::Error& e) override {
    job_->deferred.Reject(e.Value());
    job_->tsfn.Release();
    jobs_->erase(job_->id);
  }

 private:
  std::shared_ptr<State> state_;
  std::shared_ptr<Job> job_;
  std::shared_ptr<Jobs> jobs_;
  Prompt prompt_;
  serving::GenerationParams params_;
  std::string error_;
};

}  // namespace

// ---- NativeContext --------------------------------------------------------------------

Napi::Function NativeContext::define(Napi::Env env) {
  return DefineClass(env, "NativeContext",
                     {InstanceMethod("completion", &NativeContext::Completion),
                      InstanceMethod("cancel", &NativeContext::Cancel),
                      InstanceMethod("status", &NativeContext::Status),
                      InstanceMethod("tokenize", &NativeContext::Tokenize),
                      InstanceMethod("detokenize", &NativeContext::Detokenize),
                      InstanceMethod("embedding", &NativeContext::Embedding),
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
  return guarded(env, [&]() -> Napi::Value {
    std::shared_ptr<State> s = state(env);
    if (info.Length() < 2 || !info[0].IsObject() || !info[1].IsNumber()) {
      throw Napi::TypeError::New(env, "completion(options, onToken?): options must be an object");
    }
    const Napi::Object o = info[0].As<Napi::Object>();
    const auto id = info[1].As<Napi::Number>().Uint32Value();
    Prompt prompt;
    prompt.chat_template = string(o, "chat_template", s->settings.chat_template);
    if (has(o, "messages")) {
      if (!o.Get("messages").IsArray()) {
        throw Napi::TypeError::New(env, "option 'messages': expected an array of {role, content}");
      }
      prompt.messages = to_json(o.Get("messages"), "messages");
    } else if (has(o, "prompt")) {
      prompt.text = string(o, "prompt", "");
    } else {
      throw Napi::TypeError::New(env, "completion(): give 'prompt' (a string) or 'messages'");
    }
    serving::GenerationParams params = generation_params(o);
    check_sampler_params(params.sampling);
    // Thinking to reasoning_content: by default for messages, as llama-server does.
    const std::string reasoning = string(o, "reasoning_format", prompt.messages ? "auto" : "none");
    if (reasoning != "none" && reasoning != "auto" && reasoning != "deepseek") {
      throw Napi::TypeError::New(env, "option 'reasoning_format': expected 'none', 'auto' or 'deepseek'");
    }
    params.split_reasoning = reasoning != "none";
    if (has(o, "chat_template_kwargs")) {
      prompt.kwargs = to_json(o.Get("chat_template_kwargs"), "chat_template_kwargs");
      if (!prompt.kwargs.is_object()) throw Napi::TypeError::New(env, "option 'chat_template_kwargs': expected an object");
    }
    if (has(o, "enable_thinking")) prompt.kwargs["enable_thinking"] = boolean(o, "enable_thinking", true);
    std::optional<std::string> g = output_grammar(o);
    // tools, tool_choice, parallel_tool_calls: as the server reads them.
    if (has(o, "tools") && !prompt.messages) {
      throw Napi::TypeError::New(env, "option 'tools' needs 'messages' (a chat)");
    }
    if (prompt.messages) {
      nlohmann::ordered_json fields = nlohmann::ordered_json::object();
      for (const char* key : {"tools", "tool_choice", "parallel_tool_calls"}) {
        if (has(o, key)) fields[key] = to_ordered_json(o.Get(key), key);
      }
      try {
        const serving::ChatRenderer& chat = s->renderer(prompt.chat_template);
        if (std::optional<serving::ToolRequest> t = serving::parse_tool_request(fields, chat.tool_format());
            t && t->active()) {
          serving::use_tools(*t, params, g);
          prompt.tools = t->tools;
        }
      } catch (const Error& e) {
        throw Napi::Error::New(env, std::string("option ") + e.what());
      }
    }
    if (g) {
      try {
        params.masks = grammar::masks(grammar::Grammar::parse(*g), s->loaded.tokenizer);
      } catch (const Error& e) {
        throw Napi::Error::New(env, std::string("option 'grammar': ") + e.what());
      }
    }
    auto job = std::make_shared<Job>(env);
    job->id = id;
    job->max_tokens = params.max_tokens;
    Napi::Function callback;
    if (info.Length() > 2 && info[2].IsFunction()) {
      callback = info[2].As<Napi::Function>();
      job->has_callback = true;
    } else {
      callback = Napi::Function::New(env, [](const Napi::CallbackInfo&) {});
    }
    if (jobs_->contains(id)) throw Napi::Error::New(env, fmt::format("request id {} is in use", id));
    job->tsfn = Napi::ThreadSafeFunction::New(env, callback, "tessera completion", 0, 1);
    (*jobs_)[id] = job;
    auto* worker = new SubmitWorker(env, s, job, jobs_, std::move(prompt), std::move(params));
    worker->Queue();
    return job->deferred.Promise();
  });
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
