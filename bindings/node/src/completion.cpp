#include "completion.h"

#include <cmath>
#include <iterator>

#include <fmt/format.h>

#include "convert.h"
#include "task.h"
#include "tessera/core/error.h"
#include "tessera/grammar/grammar.h"

namespace tessera::node {

namespace {

using Probs = std::vector<std::pair<serving::TokenProb, std::vector<serving::TokenProb>>>;

// llama.node's completion_probabilities of some generated tokens.
nlohmann::json probs_json(const Probs& probs) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& [chosen, alts] : probs) {
    nlohmann::json top = nlohmann::json::array();
    for (const serving::TokenProb& t : alts) {
      top.push_back({{"id", t.id}, {"tok_str", t.text}, {"prob", std::exp(double(t.logprob))}});
    }
    out.push_back({{"id", chosen.id}, {"content", chosen.text},
                   {"prob", std::exp(double(chosen.logprob))}, {"probs", top}});
  }
  return out;
}

nlohmann::json calls_json(const std::vector<serving::ToolCall>& calls) {
  nlohmann::json out = nlohmann::json::array();
  for (const serving::ToolCall& c : calls) out.push_back(serving::tool_call_json(c));
  return out;
}

// llama.node's result of a finished completion, from its folded events.
Napi::Object result_object(Napi::Env env, const Job& job) {
  using serving::FinishReason;
  const serving::Reply& reply = job.reply;
  const serving::Event& e = reply.last;
  const bool length = e.finish == FinishReason::kLength;
  nlohmann::json r = {
      {"text", reply.text},  // the answer; with reasoning_format none, the thinking too
      {"content", reply.text},
      {"reasoning_content", reply.reasoning},
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
      {"timings", serving::timings_json(e)},
  };
  if (!reply.probs.empty()) r["completion_probabilities"] = probs_json(reply.probs);
  if (!reply.tool_calls.empty()) r["tool_calls"] = calls_json(reply.tool_calls);
  return from_json(env, r).As<Napi::Object>();
}

// The promise of a job that ended (rejected when onToken threw or the
// decode failed, else resolved with the result), and the job let go.
void finish(Napi::Env env, const std::shared_ptr<Job>& job, const std::shared_ptr<Jobs>& jobs) {
  try {
    if (job->callback_error) {
      job->deferred.Reject(job->callback_error->Value());
    } else if (job->reply.last.finish == serving::FinishReason::kError) {
      job->deferred.Reject(Napi::Error::New(env, job->reply.last.error).Value());
    } else {
      job->deferred.Resolve(result_object(env, *job));
    }
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

// On the JS thread, for each event of a streamed job (one with onToken) in order.
void on_event(Napi::Env env, Napi::Function callback, const std::shared_ptr<Job>& job,
              const std::shared_ptr<Jobs>& jobs, serving::Event&& e) {
  if (!job->callback_error &&
      (!e.text.empty() || !e.reasoning.empty() || !e.probs.empty() || !e.tool_calls.empty())) {
    Napi::Object data = Napi::Object::New(env);
    data.Set("token", Napi::String::New(env, e.reasoning + e.text));
    if (!e.text.empty()) data.Set("content", Napi::String::New(env, e.text));
    if (!e.reasoning.empty()) data.Set("reasoning_content", Napi::String::New(env, e.reasoning));
    if (!e.probs.empty()) data.Set("completion_probabilities", from_json(env, probs_json(e.probs)));
    // The calls completed by this token.
    if (!e.tool_calls.empty()) data.Set("tool_calls", from_json(env, calls_json(e.tool_calls)));
    try {
      callback.Call({data});
    } catch (const Napi::Error& err) {
      job->callback_error = err;  // stop here; the promise rejects with it
      job->cancel();
    }
  }
  const bool done = e.done;
  job->reply.add(std::move(e));
  if (done) finish(env, job, jobs);
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
      // Without onToken, the events are folded here, on the generator's
      // thread: one call into JS per completion, not per token.
      const bool streaming = job_->has_callback;
      auto request = std::make_shared<serving::Request>(
          std::move(tokens), std::move(params_),
          [tsfn, weak, jobs, streaming, held = serving::Reply{}](serving::Event&& e) mutable {
            if (streaming) {
              auto event = std::make_shared<serving::Event>(std::move(e));
              tsfn.BlockingCall([weak, jobs, event](Napi::Env env, Napi::Function cb) {
                const std::shared_ptr<Job> job = weak.lock();
                const std::shared_ptr<Jobs> all = jobs.lock();
                if (job && all) on_event(env, cb, job, all, std::move(*event));
              });
              return;
            }
            held.add(std::move(e));
            if (!held.done()) return;
            auto reply = std::make_shared<serving::Reply>(std::move(held));
            tsfn.BlockingCall([weak, jobs, reply](Napi::Env env, Napi::Function) {
              const std::shared_ptr<Job> job = weak.lock();
              const std::shared_ptr<Jobs> all = jobs.lock();
              if (!job || !all) return;
              job->reply = std::move(*reply);
              finish(env, job, all);
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

Napi::Value start_completion(const Napi::CallbackInfo& info, const std::shared_ptr<State>& s,
                             const std::shared_ptr<Jobs>& jobs_) {
  Napi::Env env = info.Env();
  return guarded(env, [&]() -> Napi::Value {
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
        params.harmony = chat.tool_format() == serving::ToolFormat::kHarmony;
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
        params.masks = grammar::masks(grammar::parse_cached(*g), s->loaded.tokenizer);
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

}  // namespace tessera::node
