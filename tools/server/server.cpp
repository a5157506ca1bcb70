#include "server/server.h"

#include <httplib.h>

#include <atomic>
#include <chrono>
#include <ctime>
#include <mutex>
#include <thread>

#include <fmt/format.h>

#include "server/http_error.h"
#include "server/metrics.h"
#include "server/oai.h"
#include "server/page.h"
#include "server/sse.h"
#include "tessera/error.h"

namespace tessera::server {
namespace {

using nlohmann::json;
using Handler = std::function<void(const httplib::Request&, httplib::Response&)>;

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

void send_json(httplib::Response& res, const json& j, int status = 200) {
  res.status = status;
  res.set_content(dump(j), "application/json");
}

void send_error(httplib::Response& res, const HttpError& e) { send_json(res, e.to_json(), e.status()); }

// A handler whose every exception becomes an error object.
Handler guarded(Handler fn) {
  return [fn = std::move(fn)](const httplib::Request& req, httplib::Response& res) {
    try {
      fn(req, res);
    } catch (...) {
      send_error(res, to_http_error(std::current_exception()));
    }
  };
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
  const Tokenizer* tokenizer = nullptr;
  serving::Generator* generator = nullptr;
  serving::Embedder* embedder = nullptr;
  const serving::ChatRenderer* chat = nullptr;
  serving::ModelInfo info;

  void require_ready() const {
    if (!ready.load()) throw HttpError(503, "the model is loading");
  }

  void complete(const httplib::Request& req, httplib::Response& res, bool chat_api) {
    require_ready();
    CompletionRequest c = parse_completion(parse_body(req.body), chat_api, *tokenizer, *chat);
    const ResponseHead head = response_head(c, options.model_name);
    auto events = std::make_shared<serving::EventQueue>();
    auto r = std::make_shared<serving::Request>(std::move(c.prompt), std::move(c.params), events->sink());
    generator->submit(r);
    if (c.stream) {
      send_event_stream(res, {.request = r, .events = events, .head = head, .include_usage = c.include_usage});
      return;
    }
    std::vector<serving::Event> got;
    while (got.empty() || !got.back().done) {
      if (std::optional<serving::Event> e = events->pop(std::chrono::milliseconds(1000))) {
        got.push_back(std::move(*e));
      }
    }
    if (got.back().finish == serving::FinishReason::kError) throw HttpError(500, got.back().error);
    send_json(res, completion_response(head, got));
  }

  void embeddings(const httplib::Request& req, httplib::Response& res) {
    require_ready();
    const EmbeddingRequest e = parse_embeddings(parse_body(req.body), *tokenizer);
    std::vector<std::vector<float>> vectors;
    for (const std::vector<TokenId>& input : e.inputs) vectors.push_back(embedder->embed(input));
    send_json(res, embeddings_response(e, vectors, options.model_name));
  }

  void tokenize(const httplib::Request& req, httplib::Response& res) {
    require_ready();
    const json body = parse_body(req.body);
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
  }

  void models(httplib::Response& res) {
    require_ready();
    send_json(res, {{"object", "list"},
                    {"data",
                     json::array({{{"id", options.model_name},
                                   {"object", "model"},
                                   {"created", static_cast<int64_t>(std::time(nullptr))},
                                   {"owned_by", "tessera"},
                                   {"meta",
                                    {{"n_vocab", info.n_vocab},
                                     {"n_ctx_train", info.n_ctx_train},
                                     {"n_embd", info.n_embd},
                                     {"n_params", info.n_params},
                                     {"size", info.size_bytes}}}}})}});
  }

  void health(httplib::Response& res) {
    std::lock_guard lock(state_mutex);
    if (!load_error.empty()) throw HttpError(503, "the model failed to load: " + load_error);
    require_ready();
    send_json(res, {{"status", "ok"}});
  }

  void routes() {
    // The chat page; like /health it needs no API key (the page asks for one).
    http.Get("/", [](const httplib::Request&, httplib::Response& res) {
      res.set_header("Content-Security-Policy",
                     "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
                     "img-src data:; connect-src 'self'; base-uri 'none'; form-action 'none'");
      res.set_header("X-Content-Type-Options", "nosniff");
      res.set_content(chat_page().data(), chat_page().size(), "text/html; charset=utf-8");
    });
    http.Get("/health", guarded([this](const httplib::Request&, httplib::Response& res) { health(res); }));
    const Handler list = guarded([this](const httplib::Request&, httplib::Response& res) { models(res); });
    const Handler text = guarded([this](const auto& q, auto& s) { complete(q, s, false); });
    const Handler chat_text = guarded([this](const auto& q, auto& s) { complete(q, s, true); });
    const Handler embed = guarded([this](const auto& q, auto& s) { embeddings(q, s); });
    for (const char* prefix : {"/v1", ""}) {
      const std::string p = prefix;
      http.Get(p + "/models", list);
      http.Post(p + "/completions", text);
      http.Post(p + "/chat/completions", chat_text);
      http.Post(p + "/embeddings", embed);
    }
    http.Post("/tokenize", guarded([this](const auto& q, auto& s) { tokenize(q, s); }));
    http.Post("/detokenize", guarded([this](const httplib::Request& req, httplib::Response& res) {
      require_ready();
      const json body = parse_body(req.body);
      const auto t = body.find("tokens");
      if (t == body.end()) bad_request("'tokens' must be an array of token ids");
      send_json(res, {{"content", tokenizer->detokenize(token_ids(*t, "tokens", tokenizer->n_vocab()))}});
    }));
    http.Get("/metrics", guarded([this](const httplib::Request&, httplib::Response& res) {
      require_ready();
      res.set_content(prometheus_text(generator->metrics()), "text/plain; version=0.0.4");
    }));
  }

  bool authorized(const httplib::Request& req) const {
    if (options.api_key.empty() || req.path == "/health" || req.path == "/") return true;
    return req.get_header_value("Authorization") == "Bearer " + options.api_key ||
           req.get_header_value("X-Api-Key") == options.api_key;
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
      if (authorized(req)) return httplib::Server::HandlerResponse::Unhandled;
      send_error(res, HttpError(401, "invalid or missing API key (Authorization: Bearer KEY)"));
      return httplib::Server::HandlerResponse::Handled;
    });
    // Errors httplib answers itself (unknown path, body too large, ...) get
    // the error object too.
    http.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
      if (!res.body.empty()) return;
      const std::string message =
          res.status == 404   ? fmt::format("no endpoint {} {}", req.method, req.path)
          : res.status == 413 ? "the body is larger than the server accepts"
                              : fmt::format("HTTP {}", res.status);
      res.set_content(dump(HttpError(res.status, message).to_json()), "application/json");
    });
    http.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
      send_error(res, to_http_error(ep));
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

void Server::attach(const Tokenizer& tokenizer, serving::Generator& generator,
                    serving::Embedder& embedder, const serving::ChatRenderer& chat) {
  std::lock_guard lock(impl_->state_mutex);
  impl_->info = serving::model_info(generator.model());
  impl_->embedder = &embedder;
  impl_->tokenizer = &tokenizer;
  impl_->generator = &generator;
  impl_->chat = &chat;
  impl_->ready = true;
}

void Server::set_load_error(const std::string& message) {
  std::lock_guard lock(impl_->state_mutex);
  impl_->load_error = message;
}

}  // namespace tessera::server
