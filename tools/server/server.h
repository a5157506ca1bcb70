// The HTTP side of `tessera serve`: OpenAI-compatible endpoints over the
// serving core's Generator and Embedder, on the HttpServer of http.h. The
// server listens before the model is loaded (GET /health answers 503 until
// attach()), checks the API key, the Host (a keyless server on a loopback
// address answers only to localhost names: no DNS rebinding) and the Origin
// (--cors-origin), and answers every client mistake with an OpenAI error
// object.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "tessera/serving/chat.h"
#include "tessera/serving/embedder.h"
#include "tessera/serving/serving.h"
#include "tessera/text/tokenizer.h"

namespace tessera::server {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;  // 0: any free port
  std::string api_key;  // empty: none asked
  std::string model_name;
  size_t max_body_bytes = size_t{8} << 20;
  // Memory all requests in flight may hold together (bodies and what
  // handling makes of them); past it, a 503 with Retry-After.
  size_t max_request_memory = size_t{1} << 30;
  int http_threads = 16;  // requests handled at once (streams hold one each)
  // Origins whose pages may call the API from a browser ("*": any); others
  // are refused with 403. Same-origin requests (the chat page) always pass.
  std::vector<std::string> cors_origins;
  // Fields no endpoint reads are a 400 unless this is set.
  bool ignore_unknown_fields = false;
  // /rerank and /v1/rerank on (the embedder ranks: a reranker's head);
  // /v1/embeddings then answers 501, as without it /rerank does.
  bool rerank = false;
  // /health answers 503 when requests wait or run and the generator has
  // not finished a step for this long.
  std::chrono::milliseconds health_stall{30'000};
};

class Server {
 public:
  explicit Server(ServerOptions options);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Binds host:port; returns the port. Throws Error(kIo) when it cannot.
  int bind();
  // Serves until stop(); call after bind().
  void listen();
  void stop();
  // The model is loaded: the endpoints answer from now on.
  // The generator must run on its own thread (start()).
  void attach(const Tokenizer& tokenizer, serving::Generator& generator,
              serving::Embedder& embedder, const serving::ChatRenderer& chat);
  // Loading failed: /health reports it.
  void set_load_error(const std::string& message);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tessera::server
