// The HTTP side of `tessera serve`: OpenAI-compatible endpoints over the
// serving core's Generator and Embedder, on cpp-httplib. The server listens
// before the model is loaded (GET /health answers 503 until attach()),
// checks the API key, bounds bodies, and answers every client mistake with
// an OpenAI error object.
#pragma once

#include <atomic>
#include <memory>
#include <string>

#include "tessera/chat.h"
#include "tessera/embedder.h"
#include "tessera/serving.h"
#include "tessera/tokenizer.h"

namespace tessera::server {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;  // 0: any free port
  std::string api_key;  // empty: none asked
  std::string model_name;
  size_t max_body_bytes = size_t{8} << 20;
  int http_threads = 16;  // connections served at once (streams hold one each)
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
