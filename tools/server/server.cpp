#include "server/server.h"

#include <httplib.h>

#include <atomic>
#include <chrono>
#include <ctime>
#include <mutex>
#include <random>
#include <thread>

#include <fmt/format.h>

#include "server/http_error.h"
#include "server/oai.h"
#include "server/page.h"
#include "tessera/error.h"
#include "tessera/gguf.h"

namespace tessera::server {
namespace {

using nlohmann::json;
using std::chrono::milliseconds;

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

void send_json(httplib::Response& res, const json& j, int status = 200) {
  res.status = status;
  res.set_content(dump(j), "application/json");
}

json error_json(int status, const std::string& message, const std::string& type) {
  return {{"error", {{"code", status}, {"message", message}, {"type", type}}}};
}

void send_error(httplib::Response& res, const HttpError& e) {
  send_json(res, error_json(e.status(), e.what(), e.type()), e.status());
}

json parse_body(const httplib::Request& req) {
  json body;
  try {
    body = json::parse(req.body);
  } catch (const json::parse_error& e) {
    throw HttpError(400, fmt::format("the body is not valid JSON: {}", e.what()));
  }
  if (!body.is_object()) throw HttpError(400, "the body must be a JSON object");
  return body;
}

std::string random_id(const char* prefix) {
  static std::mutex m;
  static std::mt19937_64 rng(std::random_device{}());
  std::lock_guard lock(m);
  return fmt::format("{}{:016x}", prefix, rng());
}

int64_t now_seconds() { return static_cast<int64_t>(std::time(nullptr)); }

std::string base64(const uint8_t* p, size_t n) {
  static constexpr char kDigits[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((n + 2) / 3 * 4);
  for (size_t i = 0; i < n; i += 3) {
    const uint32_t v = uint32_t{p[i]} << 16 | (i + 1 < n ? uint32_t{p[i + 1]} << 8 : 0) |
                       (i + 2 < n ? uint32_t{p[i + 2]} : 0);
    out += kDigits[v >> 18 & 63];
    out += kDigits[v >> 12 & 63];
    out += i + 1 < n ? kDigits[v >> 6 & 63] : '=';
    out += i + 2 < n ? kDigits[v & 63] : '=';
  }
  return out;
}

}  // namespace

struct Server::Impl {
  ServerOptions options;
  httplib::Server http;
  // httplib's stop() does nothing until its listen loop has begun, so a
  // stop() that came first (a model that fails to load at once) left
  // listen() serving forever. listen() and stop() meet under this mutex.
  std::mutex listen_mutex;
  bool listening = false, stopped = false;
  std::atomic<bool> listen_returned{false};
  std::atomic<bool> ready{false};
  std::mutex state_mutex;
  std::string load_error;
  const Model* model = nullptr;
  const Tokenizer* tokenizer = nullptr;
  Generator* generator = nullptr;
  Embedder* embedder = nullptr;
  ChatRenderer chat;

  void require_ready() const {
    if (!ready.load()) throw HttpError(503, "the model is loading");
  }

  // `v` as token ids of this vocabulary; errors name `field`.
  std::vector<TokenId> token_ids(const json& v, const char* field) const {
    if (!v.is_array()) bad_request("'{}' must be an array of token ids", field);
    std::vector<TokenId> ids;
    ids.reserve(v.size());
    for (const json& t : v) {
      if (!t.is_number_integer()) bad_request("'{}' must be an array of token ids", field);
      const auto id = t.get<int64_t>();
      if (id < 0 || id >= static_cast<int64_t>(tokenizer->n_vocab())) {
        bad_request("'{}' token {} is outside the vocabulary [0, {})", field, id, tokenizer->n_vocab());
      }
      ids.push_back(static_cast<TokenId>(id));
    }
    return ids;
  }

  // The prompt of a completions request: a string, one string in an array,
  // or an array of token ids.
  std::vector<TokenId> completion_prompt(const json& body) const {
    const auto it = body.find("prompt");
    if (it == body.end()) bad_request("'prompt' is required");
    const json* p = &*it;
    if (p->is_array() && p->size() == 1 && (*p)[0].is_string()) p = &(*p)[0];
    if (p->is_string()) return tokenizer->tokenize(p->get<std::string>(), true, true);
    if (p->is_array() && !p->empty()) return token_ids(*p, "prompt");
    bad_request("'prompt' must be a non-empty string or array of token ids");
  }

  std::vector<TokenId> chat_prompt(const json& body) const {
    const auto it = body.find("messages");
    if (it == body.end() || !it->is_array() || it->empty()) {
      bad_request("'messages' must be a non-empty array");
    }
    for (const json& m : *it) {
      if (!m.is_object() || !m.contains("role") || !m["role"].is_string()) {
        bad_request("each message must be an object with a string 'role'");
      }
      const auto c = m.find("content");
      if (c != m.end() && !c->is_string() && !c->is_null() && !c->is_array()) {
        bad_request("a message's 'content' must be a string, an array of parts or null");
      }
    }
    std::string text;
    try {
      text = chat(*it, true);
    } catch (const HttpError&) {
      throw;
    } catch (const std::exception& e) {
      throw HttpError(400, fmt::format("the chat template failed on these messages: {}", e.what()));
    }
    // Special tokens in the render are parsed as such; BOS is the tokenizer's
    // to add (the renderer strips a leading one), as llama.cpp does.
    return tokenizer->tokenize(text, true, true);
  }

  std::shared_ptr<Request> submit(std::vector<TokenId> prompt, GenerationParams params) {
    auto r = std::make_shared<Request>(std::move(prompt), std::move(params));
    try {
      generator->submit(r);
    } catch (const Error& e) {
      throw HttpError(e.category() == ErrorCategory::kInvalidArgument ? 400 : 503, e.what());
    }
    return r;
  }

  void generate(const httplib::Request& req, httplib::Response& res, bool chat_api) {
    require_ready();
    const json body = parse_body(req);
    GenerationParams params = parse_generation(body, chat_api);
    bool stream = false;
    if (const auto it = body.find("stream"); it != body.end() && !it->is_null()) {
      if (!it->is_boolean()) bad_request("'stream' must be true or false");
      stream = it->get<bool>();
    }
    bool include_usage = false;
    if (const auto it = body.find("stream_options"); it != body.end() && it->is_object()) {
      include_usage = it->value("include_usage", false);
    }
    std::vector<TokenId> prompt = chat_api ? chat_prompt(body) : completion_prompt(body);
    std::shared_ptr<Request> r = submit(std::move(prompt), std::move(params));
    const std::string id = random_id(chat_api ? "chatcmpl-" : "cmpl-");
    const int64_t created = now_seconds();
    const std::string object = chat_api ? "chat.completion" : "text_completion";

    if (!stream) {
      std::string text;
      std::vector<Event> events;
      while (true) {
        std::optional<Event> e = r->pop(milliseconds(1000));
        if (!e) continue;
        text += e->text;
        events.push_back(std::move(*e));
        if (events.back().done) break;
      }
      const Event& last = events.back();
      if (last.finish_reason == "error") throw HttpError(500, last.error);
      json choice = {{"index", 0}, {"finish_reason", last.finish_reason}};
      std::vector<const Event*> ptrs;
      for (const Event& e : events) ptrs.push_back(&e);
      const bool probs = r->params.top_logprobs >= 0;
      choice["logprobs"] = probs ? logprobs_json(ptrs, chat_api) : json(nullptr);
      if (chat_api) {
        choice["message"] = {{"role", "assistant"}, {"content", text}};
      } else {
        choice["text"] = text;
      }
      send_json(res, {{"id", id},
                      {"object", object},
                      {"created", created},
                      {"model", options.model_name},
                      {"choices", json::array({choice})},
                      {"usage", usage_json(last)},
                      {"timings", timings_json(last)}});
      return;
    }

    res.set_header("Cache-Control", "no-cache");
    auto chunk = [=, this](const json& choices) {
      return json{{"id", id},
                  {"object", chat_api ? "chat.completion.chunk" : "text_completion"},
                  {"created", created},
                  {"model", options.model_name},
                  {"choices", choices}};
    };
    res.set_chunked_content_provider(
        "text/event-stream",
        [r, chunk, chat_api, include_usage](size_t, httplib::DataSink& sink) {
          auto send = [&](const std::string& data) {
            const std::string line = "data: " + data + "\n\n";
            if (!sink.write(line.data(), line.size())) {
              r->cancelled = true;
              return false;
            }
            return true;
          };
          if (chat_api &&
              !send(dump(chunk(json::array({{{"index", 0},
                                             {"delta", {{"role", "assistant"}, {"content", ""}}},
                                             {"logprobs", nullptr},
                                             {"finish_reason", nullptr}}}))))) {
            return false;
          }
          int idle = 0;
          while (true) {
            std::optional<Event> e = r->pop(milliseconds(250));
            if (!e) {
              // A comment line now and then: a client that left is noticed.
              if (++idle % 8 == 0) {
                static constexpr char kPing[] = ": ping\n\n";
                if (!sink.write(kPing, sizeof kPing - 1)) {
                  r->cancelled = true;
                  return false;
                }
              }
              continue;
            }
            idle = 0;
            const bool probs = r->params.top_logprobs >= 0;
            if (!e->text.empty() || !e->probs.empty()) {
              json c = {{"index", 0}, {"finish_reason", nullptr}};
              c["logprobs"] = probs ? logprobs_json({&*e}, chat_api) : json(nullptr);
              if (chat_api) {
                c["delta"] = {{"content", e->text}};
              } else {
                c["text"] = e->text;
              }
              if (!send(dump(chunk(json::array({c}))))) return false;
            }
            if (!e->done) continue;
            if (e->finish_reason == "error") {
              send(dump(error_json(500, e->error, "server_error")));
            } else {
              json c = {{"index", 0}, {"finish_reason", e->finish_reason}, {"logprobs", nullptr}};
              if (chat_api) {
                c["delta"] = json::object();
              } else {
                c["text"] = "";
              }
              json last = chunk(json::array({c}));
              last["timings"] = timings_json(*e);
              if (!send(dump(last))) return false;
              if (include_usage) {
                json u = chunk(json::array());
                u["usage"] = usage_json(*e);
                if (!send(dump(u))) return false;
              }
            }
            send("[DONE]");
            sink.done();
            return true;
          }
        },
        [r](bool) { r->cancelled = true; });  // finished or dropped: the slot is freed
  }

  void routes() {
    auto guarded = [this](auto fn) {
      return [this, fn](const httplib::Request& req, httplib::Response& res) {
        try {
          fn(req, res);
        } catch (const HttpError& e) {
          send_error(res, e);
        } catch (const Error& e) {
          send_error(res, HttpError(e.category() == ErrorCategory::kInvalidArgument ? 400 : 500,
                                    e.what()));
        } catch (const json::exception& e) {
          send_error(res, HttpError(400, fmt::format("bad request: {}", e.what())));
        } catch (const std::exception& e) {
          send_error(res, HttpError(500, e.what()));
        }
      };
    };
    // The chat page; like /health it needs no API key (the page asks for one).
    http.Get("/", [](const httplib::Request&, httplib::Response& res) {
      res.set_header("Content-Security-Policy",
                     "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
                     "img-src data:; connect-src 'self'; base-uri 'none'; form-action 'none'");
      res.set_header("X-Content-Type-Options", "nosniff");
      res.set_content(chat_page().data(), chat_page().size(), "text/html; charset=utf-8");
    });
    http.Get("/health", guarded([this](const httplib::Request&, httplib::Response& res) {
      std::lock_guard lock(state_mutex);
      if (!load_error.empty()) {
        throw HttpError(503, "the model failed to load: " + load_error);
      }
      require_ready();
      send_json(res, {{"status", "ok"}});
    }));
    auto models = guarded([this](const httplib::Request&, httplib::Response& res) {
      require_ready();
      const Hparams& hp = model->hparams();
      uint64_t params = 0;
      for (const gguf::TensorInfo& t : model->file().tensors()) {
        params += static_cast<uint64_t>(t.n_elements());
      }
      send_json(res, {{"object", "list"},
                      {"data",
                       json::array({{{"id", options.model_name},
                                     {"object", "model"},
                                     {"created", now_seconds()},
                                     {"owned_by", "tessera"},
                                     {"meta",
                                      {{"n_vocab", hp.n_vocab},
                                       {"n_ctx_train", hp.n_ctx_train},
                                       {"n_embd", hp.n_embd},
                                       {"n_params", params},
                                       {"size", model->weight_bytes()}}}}})}});
    });
    http.Get("/v1/models", models);
    http.Get("/models", models);
    auto completions = guarded([this](const httplib::Request& q, httplib::Response& s) {
      generate(q, s, false);
    });
    auto chat_completions = guarded([this](const httplib::Request& q, httplib::Response& s) {
      generate(q, s, true);
    });
    http.Post("/v1/completions", completions);
    http.Post("/completions", completions);
    http.Post("/v1/chat/completions", chat_completions);
    http.Post("/chat/completions", chat_completions);
    auto embeddings = guarded([this](const httplib::Request& req, httplib::Response& res) {
      require_ready();
      const json body = parse_body(req);
      const auto in = body.find("input");
      if (in == body.end()) bad_request("'input' is required");
      // A string, token ids, or an array of either.
      std::vector<std::vector<TokenId>> inputs;
      auto one = [&](const json& v) {
        if (v.is_string()) {
          if (v.get<std::string>().empty()) bad_request("'input' strings must not be empty");
          inputs.push_back(tokenizer->tokenize(v.get<std::string>(), true, false));
          return;
        }
        if (!v.is_array() || v.empty()) bad_request("'input' must be a string, token ids, or an array of them");
        inputs.push_back(token_ids(v, "input"));
      };
      if (in->is_array() && !in->empty() && ((*in)[0].is_string() || (*in)[0].is_array())) {
        if (in->size() > 256) bad_request("'input' holds {} items, at most 256", in->size());
        for (const json& v : *in) one(v);
      } else {
        one(*in);
      }
      const std::string format = body.value("encoding_format", "float");
      if (format != "float" && format != "base64") {
        bad_request("'encoding_format' must be float or base64, found '{}'", format);
      }
      json data = json::array();
      int64_t tokens = 0;
      for (size_t i = 0; i < inputs.size(); ++i) {
        std::vector<float> v;
        try {
          v = embedder->embed(inputs[i]);
        } catch (const Error& e) {
          if (e.category() == ErrorCategory::kInvalidArgument) throw HttpError(400, e.what());
          throw;
        }
        tokens += static_cast<int64_t>(inputs[i].size());
        json item = {{"object", "embedding"}, {"index", i}};
        if (format == "float") {
          item["embedding"] = v;
        } else {
          item["embedding"] = base64(reinterpret_cast<const uint8_t*>(v.data()), v.size() * sizeof(float));
        }
        data.push_back(std::move(item));
      }
      send_json(res, {{"object", "list"},
                      {"data", data},
                      {"model", options.model_name},
                      {"usage", {{"prompt_tokens", tokens}, {"total_tokens", tokens}}}});
    });
    http.Post("/v1/embeddings", embeddings);
    http.Post("/embeddings", embeddings);
    http.Post("/tokenize", guarded([this](const httplib::Request& req, httplib::Response& res) {
      require_ready();
      const json body = parse_body(req);
      const auto c = body.find("content");
      if (c == body.end() || !c->is_string()) bad_request("'content' must be a string");
      const bool special = body.value("add_special", false);
      const bool with_pieces = body.value("with_pieces", false);
      const std::vector<TokenId> ids = tokenizer->tokenize(c->get<std::string>(), special, true);
      json tokens = json::array();
      for (TokenId id : ids) {
        if (with_pieces) {
          tokens.push_back({{"id", id}, {"piece", tokenizer->token_to_piece(id)}});
        } else {
          tokens.push_back(id);
        }
      }
      send_json(res, {{"tokens", tokens}});
    }));
    http.Post("/detokenize", guarded([this](const httplib::Request& req, httplib::Response& res) {
      require_ready();
      const json body = parse_body(req);
      const auto t = body.find("tokens");
      if (t == body.end()) bad_request("'tokens' must be an array of token ids");
      send_json(res, {{"content", tokenizer->detokenize(token_ids(*t, "tokens"))}});
    }));
    http.Get("/metrics", guarded([this](const httplib::Request&, httplib::Response& res) {
      require_ready();
      const GeneratorMetrics m = generator->metrics();
      std::string out;
      auto metric = [&](const char* name, const char* type, const char* help, double v) {
        out += fmt::format("# HELP tessera_{0} {1}\n# TYPE tessera_{0} {2}\ntessera_{0} {3}\n",
                           name, help, type, v);
      };
      metric("requests_total", "counter", "Generation requests accepted.", double(m.requests));
      metric("requests_cancelled_total", "counter", "Requests whose client left before the end.",
             double(m.cancelled));
      metric("prompt_tokens_total", "counter", "Prompt tokens decoded (cache hits excluded).",
             double(m.prompt_tokens));
      metric("prompt_tokens_cached_total", "counter", "Prompt tokens reused from the cache.",
             double(m.cached_tokens));
      metric("generated_tokens_total", "counter", "Tokens generated.", double(m.generated_tokens));
      metric("prompt_seconds_total", "counter", "Time requests spent on their prompts.",
             m.prompt_seconds);
      metric("generation_seconds_total", "counter", "Time requests spent generating.",
             m.generation_seconds);
      metric("generated_tokens_per_second", "gauge", "Generated tokens per second of generation.",
             m.generation_seconds > 0 ? double(m.generated_tokens) / m.generation_seconds : 0.0);
      metric("slots_busy", "gauge", "Slots holding a request.", m.slots_busy);
      metric("slots", "gauge", "Slots (-np).", m.slots);
      metric("requests_queued", "gauge", "Requests waiting for a slot.", m.queued);
      metric("kv_cells_used", "gauge", "KV cache cells in use.", double(m.kv_cells_used));
      metric("kv_cells", "gauge", "KV cache cells.", double(m.kv_cells));
      metric("decode_steps_total", "counter", "Batches decoded.", double(m.steps));
      metric("plans_built_total", "counter", "Graphs built and planned (one per batch shape).",
             double(m.plans_built));
      res.set_content(out, "text/plain; version=0.0.4");
    }));
  }

  void hooks() {
    http.set_payload_max_length(options.max_body_bytes);
    http.set_tcp_nodelay(true);  // a streamed token goes out now, not after a delayed ACK
    // An idle keep-alive connection holds its thread (and shutdown) this long.
    http.set_keep_alive_timeout(1);
    http.new_task_queue = [n = options.http_threads] {
      return new httplib::ThreadPool(static_cast<size_t>(n));
    };
    http.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
      if (options.api_key.empty() || req.path == "/health" || req.path == "/") {
        return httplib::Server::HandlerResponse::Unhandled;
      }
      const std::string want = "Bearer " + options.api_key;
      if (req.get_header_value("Authorization") != want &&
          req.get_header_value("X-Api-Key") != options.api_key) {
        send_error(res, HttpError(401, "invalid or missing API key (Authorization: Bearer KEY)"));
        return httplib::Server::HandlerResponse::Handled;
      }
      return httplib::Server::HandlerResponse::Unhandled;
    });
    // Errors httplib answers itself (unknown path, body too large, ...) get
    // the error object too.
    http.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
      if (!res.body.empty()) return;
      const std::string message =
          res.status == 404   ? fmt::format("no endpoint {} {}", req.method, req.path)
          : res.status == 413 ? "the body is larger than the server accepts"
                              : fmt::format("HTTP {}", res.status);
      const HttpError e(res.status, message);
      res.set_content(dump(error_json(e.status(), e.what(), e.type())), "application/json");
    });
    http.set_exception_handler([](const httplib::Request&, httplib::Response& res,
                                  std::exception_ptr ep) {
      std::string what = "internal error";
      try {
        std::rethrow_exception(ep);
      } catch (const std::exception& e) {
        what = e.what();
      } catch (...) {
      }
      send_json(res, error_json(500, what, "server_error"), 500);
    });
  }
};

Server::Server(ServerOptions options) : impl_(std::make_unique<Impl>()) {
  impl_->options = std::move(options);
  impl_->hooks();
  impl_->routes();
}

Server::~Server() { stop(); }

int Server::bind() {
  Impl& s = *impl_;
  if (s.options.port == 0) {
    const int port = s.http.bind_to_any_port(s.options.host);
    if (port <= 0) fail(ErrorCategory::kIo, "[serve] cannot bind {}:<any port>", s.options.host);
    s.options.port = port;
    return port;
  }
  if (!s.http.bind_to_port(s.options.host, s.options.port)) {
    fail(ErrorCategory::kIo, "[serve --host {} --port {}] cannot bind: in use or not allowed",
         s.options.host, s.options.port);
  }
  return s.options.port;
}

void Server::listen() {
  Impl& s = *impl_;
  {
    std::lock_guard lock(s.listen_mutex);
    if (s.stopped) return;
    s.listening = true;
  }
  s.http.listen_after_bind();
  s.listen_returned.store(true, std::memory_order_release);
}

void Server::stop() {
  if (!impl_) return;
  Impl& s = *impl_;
  {
    std::lock_guard lock(s.listen_mutex);
    s.stopped = true;
    if (!s.listening) return;  // a later listen() returns at once
  }
  // listen() is in, or about to enter, httplib's loop: wait for the loop.
  while (!s.http.is_running() && !s.listen_returned.load(std::memory_order_acquire)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  s.http.stop();
}

void Server::attach(const Model& model, const Tokenizer& tokenizer, Generator& generator,
                    Embedder& embedder, ChatRenderer chat) {
  std::lock_guard lock(impl_->state_mutex);
  impl_->embedder = &embedder;
  impl_->model = &model;
  impl_->tokenizer = &tokenizer;
  impl_->generator = &generator;
  impl_->chat = std::move(chat);
  impl_->ready = true;
}

void Server::set_load_error(const std::string& message) {
  std::lock_guard lock(impl_->state_mutex);
  impl_->load_error = message;
}

}  // namespace tessera::server
