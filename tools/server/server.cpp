#include "server/server.h"

#include <chrono>
#include <ctime>
#include <mutex>

#include <fmt/format.h>

#include "server/http.h"
#include "server/http_error.h"
#include "server/metrics.h"
#include "server/oai.h"
#include "server/page.h"
#include "server/sse.h"
#include "tessera/core/error.h"

namespace tessera::server {
namespace {

using nlohmann::json;
using Handler = std::function<void(const HttpRequest&, HttpResponse&, HttpConnection&)>;

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

void send_json(HttpResponse& res, const json& j, int status = 200) {
  res.status = status;
  res.content_type = "application/json";
  res.body = dump(j);
}

void send_error(HttpResponse& res, const HttpError& e) { send_json(res, e.to_json(), e.status()); }

// A handler whose every exception becomes an error object.
Handler guarded(Handler fn) {
  return [fn = std::move(fn)](const HttpRequest& req, HttpResponse& res, HttpConnection& c) {
    try {
      fn(req, res, c);
    } catch (...) {
      res = HttpResponse{};
      send_error(res, to_http_error(std::current_exception()));
    }
  };
}

bool loopback(const std::string& host) {
  return host == "127.0.0.1" || host == "localhost" || host == "::1";
}

// The host part of a Host header ("[::1]:8080" -> "[::1]", "a:80" -> "a").
std::string host_name(const std::string& host) {
  if (!host.empty() && host[0] == '[') return host.substr(0, host.find(']') + 1);
  return host.substr(0, host.find(':'));
}

}  // namespace

struct Server::Impl {
  explicit Impl(ServerOptions o)
      : options(std::move(o)),
        http({.max_body_bytes = options.max_body_bytes,
              .max_inflight_bytes = options.max_request_memory,
              .workers = options.http_threads}) {}

  ServerOptions options;
  HttpServer http;
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

  nlohmann::ordered_json body(const HttpRequest& req, Endpoint endpoint) const {
    nlohmann::ordered_json b = parse_body(req.body);
    if (!options.ignore_unknown_fields) refuse_unknown_fields(b, endpoint);
    return b;
  }

  void complete(const HttpRequest& req, HttpResponse& res, HttpConnection& conn, bool chat_api) {
    require_ready();
    if (generator->model().is_encoder()) {
      throw HttpError(501, fmt::format("the model ({}) is an encoder: it serves /v1/embeddings, not "
                                       "completions or chat",
                                       generator->model().hparams().architecture));
    }
    CompletionRequest c = parse_completion(body(req, Endpoint::kCompletion), chat_api, *tokenizer, *chat);
    const ResponseHead head = response_head(c, options.model_name);
    auto events = std::make_shared<serving::EventQueue>();
    auto r = std::make_shared<serving::Request>(std::move(c.prompt), std::move(c.params), events->sink());
    generator->submit(r);
    // Until the first event (the prompt may wait for a slot): a client that
    // leaves cancels its request; one refused at shutdown gets a 503.
    std::optional<serving::Event> first;  // streamed: the first event, then the rest as they come
    serving::Reply reply;                 // not streamed: every event, folded
    auto checked = std::chrono::steady_clock::now();
    while (c.stream ? !first.has_value() : !reply.done()) {
      // Checked at every token and every 50 ms while none comes: a request
      // whose client left ends within a decode step.
      std::optional<serving::Event> e = events->pop(std::chrono::milliseconds(50));
      const bool token = e.has_value();
      if (token && c.stream) first = std::move(*e);
      if (token && !c.stream) reply.add(std::move(*e));
      if (!token && std::chrono::steady_clock::now() - checked < std::chrono::milliseconds(50)) continue;
      checked = std::chrono::steady_clock::now();
      if (conn.gone()) {
        r->cancel();
        res.abandoned = true;
        return;
      }
    }
    const serving::Event& last = c.stream ? *first : reply.last;
    if (last.done && last.finish == serving::FinishReason::kShutdown && !last.error.empty()) {
      throw HttpError(503, last.error);
    }
    if (last.done && last.finish == serving::FinishReason::kError) throw HttpError(500, last.error);
    if (!c.stream) return send_json(res, completion_response(head, reply));
    send_event_stream(res, {.request = r, .events = events, .head = head,
                            .include_usage = c.include_usage, .first = std::move(*first)});
  }

  void rerank(const HttpRequest& req, HttpResponse& res) {
    require_ready();
    if (!options.rerank) {
      throw HttpError(501, "this server does not rerank: start it with --rerank (and a reranker model)");
    }
    RerankRequest r =
        parse_rerank(body(req, Endpoint::kRerank), *tokenizer, serving::rerank_template(embedder->model()));
    if (r.truncate) {
      for (auto& in : r.inputs) serving::truncate_tokens(in, static_cast<size_t>(embedder->max_tokens()), *tokenizer);
    }
    std::vector<float> scores;
    for (const std::vector<float>& v : embedder->embed_all(r.inputs)) scores.push_back(v.at(0));
    send_json(res, rerank_response(r, scores, options.model_name));
  }

  void embeddings(const HttpRequest& req, HttpResponse& res) {
    require_ready();
    if (options.rerank) {
      throw HttpError(501, "this server ranks (--rerank): use /v1/rerank, or start it without --rerank");
    }
    EmbeddingRequest e = parse_embeddings(body(req, Endpoint::kEmbeddings), *tokenizer);
    if (e.truncate) {
      for (auto& in : e.inputs) serving::truncate_tokens(in, static_cast<size_t>(embedder->max_tokens()), *tokenizer);
    }
    const std::vector<std::vector<float>> vectors = embedder->embed_all(e.inputs);
    send_json(res, embeddings_response(e, vectors, options.model_name));
  }

  void tokenize(const HttpRequest& req, HttpResponse& res) {
    require_ready();
    const TokenizeRequest t = parse_tokenize(body(req, Endpoint::kTokenize));
    const std::vector<TokenId> ids = tokenizer->tokenize(t.content, t.add_special, true);
    send_json(res, tokenize_response(ids, t.with_pieces, *tokenizer));
  }

  void models(HttpResponse& res) {
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

  void health(HttpResponse& res) {
    std::lock_guard lock(state_mutex);
    if (!load_error.empty()) throw HttpError(503, "the model failed to load: " + load_error);
    require_ready();
    const serving::GeneratorMetrics m = generator->metrics();
    if (m.seconds_since_progress * 1000 > static_cast<double>(options.health_stall.count())) {
      throw HttpError(503, fmt::format("the generator has not finished a step for {:.1f} s with {} "
                                       "requests running and {} waiting",
                                       m.seconds_since_progress, m.slots_busy, m.queued));
    }
    send_json(res, {{"status", "ok"}});
  }

  static void page(HttpResponse& res) {
    res.headers = {{"Content-Security-Policy",
                    "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
                    "img-src data:; connect-src 'self'; base-uri 'none'; form-action 'none'"},
                   {"X-Content-Type-Options", "nosniff"}};
    res.content_type = "text/html; charset=utf-8";
    res.body.assign(chat_page().data(), chat_page().size());
  }

  void routes() {
    auto quick = [this](const char* method, const char* path, Handler h) {
      http.route(method, path, guarded(std::move(h)), /*quick=*/true);
    };
    // What handling a request makes of its body, per byte: the JSON's
    // values, the tokens, a grammar, the answer. Measured: an 8 MB /tokenize
    // peaks at about 51 bytes per byte (stories260K, Zen 5); 64 leaves room.
    constexpr size_t kCostPerByte = 64;
    auto worker = [this](const char* method, const std::string& path, Handler h) {
      http.route(method, path, guarded(std::move(h)), /*quick=*/false, kCostPerByte);
    };
    quick("GET", "/", [](const auto&, auto& res, auto&) { page(res); });
    quick("GET", "/health", [this](const auto&, auto& res, auto&) { health(res); });
    quick("GET", "/metrics", [this](const auto&, auto& res, auto&) {
      require_ready();
      res.content_type = "text/plain; version=0.0.4";
      res.body = prometheus_text(generator->metrics());
    });
    for (const std::string p : {"/v1", ""}) {
      quick("GET", (p + "/models").c_str(), [this](const auto&, auto& res, auto&) { models(res); });
      worker("POST", p + "/completions", [this](const auto& q, auto& s, auto& c) { complete(q, s, c, false); });
      worker("POST", p + "/chat/completions", [this](const auto& q, auto& s, auto& c) { complete(q, s, c, true); });
      worker("POST", p + "/embeddings", [this](const auto& q, auto& s, auto&) { embeddings(q, s); });
      for (const char* name : {"/rerank", "/reranking"}) {
        worker("POST", p + name, [this](const auto& q, auto& s, auto&) { rerank(q, s); });
      }
    }
    worker("POST", "/tokenize", [this](const auto& q, auto& s, auto&) { tokenize(q, s); });
    worker("POST", "/detokenize", [this](const auto& q, auto& s, auto&) {
      require_ready();
      const auto b = body(q, Endpoint::kDetokenize);
      const auto t = b.find("tokens");
      if (t == b.end()) bad_request("'tokens' must be an array of token ids");
      send_json(s, detokenize_response(token_ids(*t, "tokens", tokenizer->n_vocab()), *tokenizer));
    });
  }

  bool origin_allowed(const std::string& origin) const {
    for (const std::string& o : options.cors_origins) {
      if (o == "*" || o == origin) return true;
    }
    return false;
  }

  // Before routing: the Host check (DNS rebinding), foreign origins, CORS
  // preflight, the API key. True when it answered.
  bool filter(const HttpRequest& req, HttpResponse& res) {
    const std::string host = req.header("Host");
    if (options.api_key.empty() && loopback(options.host) && !loopback(host_name(host)) &&
        host_name(host) != "[::1]") {
      send_error(res, HttpError(403, fmt::format("Host '{}' is not this server (a keyless server on "
                                                 "{} answers only to localhost names)",
                                                 host.substr(0, 100), options.host)));
      return true;
    }
    const std::string origin = req.header("Origin");
    if (!origin.empty() && origin != "http://" + host && !origin_allowed(origin)) {
      send_error(res, HttpError(403, fmt::format("Origin '{}' is not allowed (--cors-origin)",
                                                 origin.substr(0, 100))));
      return true;
    }
    if (req.method == "OPTIONS") {  // a preflight from an allowed origin
      res.status = 204;
      res.headers = {{"Access-Control-Allow-Methods", "GET, POST, OPTIONS"},
                     {"Access-Control-Allow-Headers", "Authorization, Content-Type, X-Api-Key"},
                     {"Access-Control-Max-Age", "600"}};
      return true;
    }
    if (options.api_key.empty() || req.path == "/health" || req.path == "/") return false;
    if (req.header("Authorization") == "Bearer " + options.api_key ||
        req.header("X-Api-Key") == options.api_key) {
      return false;
    }
    send_error(res, HttpError(401, "invalid or missing API key (Authorization: Bearer KEY)"));
    return true;
  }

  void hooks() {
    http.set_filter([this](const HttpRequest& req, HttpResponse& res) { return filter(req, res); });
    http.set_error_body([](int status, const std::string& message) {
      return dump(HttpError(status, message).to_json());
    });
    http.set_response_headers([this](const HttpRequest& req, HttpResponse& res) {
      const std::string origin = req.header("Origin");
      if (!origin.empty() && origin_allowed(origin)) {
        res.headers.emplace_back("Access-Control-Allow-Origin", origin);
        res.headers.emplace_back("Vary", "Origin");
      }
    });
  }
};

Server::Server(ServerOptions options) : impl_(std::make_unique<Impl>(std::move(options))) {
  impl_->hooks();
  impl_->routes();
}

Server::~Server() { stop(); }

int Server::bind() {
  Impl& s = *impl_;
  s.options.port = s.http.bind(s.options.host, s.options.port);
  return s.options.port;
}

void Server::listen() { impl_->http.run(); }

void Server::stop() {
  if (impl_) impl_->http.stop();
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
