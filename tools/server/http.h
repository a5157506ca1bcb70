// The HTTP/1.1 layer of `tessera serve`, on Boost.Beast (docs/server.md, "The HTTP layer"
// says why): one I/O thread reads every connection asynchronously, each
// request head and body under a deadline, so a slow client holds no thread
// and cannot starve the others; complete requests run on a pool of worker
// threads (quick routes, such as /health, on the I/O thread itself).
// Parsing is strict: CRLF line endings only, one Content-Length (or equal
// repeats), never with Transfer-Encoding; the header size, the body size
// (chunked or not) and the decoded size (gzip, deflate, br) are bounded, and
// decompression stops at the limit.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tessera::server {

struct HttpLimits {
  size_t max_header_bytes = size_t{16} << 10;  // the request line and headers: 431 past it
  size_t max_body_bytes = size_t{8} << 20;     // as sent and as decoded: 413 past it
  // The whole head, from the connection's start or the last response (a
  // kept-alive connection is closed when no request comes in this time).
  std::chrono::milliseconds header_timeout{10'000};
  std::chrono::milliseconds body_timeout{60'000};   // the whole body
  std::chrono::milliseconds write_timeout{30'000};  // one write to a client
  size_t max_connections = 1024;  // past it, the oldest idle one is closed (else the new one)
  // One budget for every request in flight: its body as it arrives (as
  // declared, chunk by chunk, as decoded), then the route's cost per byte
  // for what handling makes of it. A request that does not fit is a 503.
  size_t max_inflight_bytes = size_t{1} << 30;
  int workers = 16;               // requests handled at once (a stream holds one)
};

struct HttpRequest {
  std::string method;
  std::string target;  // as sent
  std::string path;    // the target without its query
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;  // decoded
  // The value of header `name` (any case), "" when absent.
  std::string header(std::string_view name) const;
};

// The client's connection while its request is handled (on a worker).
class HttpConnection {
 public:
  virtual ~HttpConnection() = default;
  // The client closed its side: its request can be abandoned.
  virtual bool gone() = 0;
  // Streams part of the body (chunked; the head goes out with the first
  // write). False once the client left or a write timed out.
  virtual bool write(std::string_view data) = 0;
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
  // Set: the body is streamed by this function after the handler returns.
  std::function<void(HttpConnection&)> stream;
  // Set when the client left before an answer: the connection is closed
  // with none (not a 200 with an empty body).
  bool abandoned = false;
};

using HttpHandler = std::function<void(const HttpRequest&, HttpResponse&, HttpConnection&)>;

class HttpServer {
 public:
  explicit HttpServer(HttpLimits limits);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // An exact path. `quick` handlers run on the I/O thread and must not
  // block; the others run on a worker. `cost_per_byte`: the memory handling
  // takes per byte of body (parsed JSON, tokens, grammars), held from the
  // budget while the request runs.
  void route(const std::string& method, const std::string& path, HttpHandler handler,
             bool quick = false, size_t cost_per_byte = 0);
  // Runs before routing on every request (the API key, Host and Origin
  // checks); true when it answered the request itself.
  void set_filter(std::function<bool(const HttpRequest&, HttpResponse&)> filter);
  // The body of the answers the server gives itself (400, 404, 405, 413,
  // 415, 431, 503), from the status and a message.
  void set_error_body(std::function<std::string(int status, const std::string& message)> body);
  // Headers added to every response (CORS).
  void set_response_headers(std::function<void(const HttpRequest&, HttpResponse&)> add);

  // Binds host:port (0: any free port); returns the port. Throws Error(kIo).
  int bind(const std::string& host, int port);
  // Serves until stop(); returns at once when stop() came first.
  void run();
  // From any thread: stops accepting, closes idle connections, lets the
  // requests being handled finish (each write still under its deadline)
  // and makes run() return.
  void stop();

  size_t connections() const;
  // Bytes of the budget held by requests in flight.
  size_t inflight_bytes() const;

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

// ASCII case-insensitive equality (header names, tokens).
bool iequals(std::string_view a, std::string_view b);

// Decodes a body sent with `encoding` (gzip, x-gzip, deflate, br; identity
// or empty: as it is) into at most `limit` bytes. Throws HttpError 413 past
// the limit, 415 for an encoding it does not know, 400 for corrupt data.
std::string decode_body(std::string_view encoding, std::string_view body, size_t limit);

}  // namespace tessera::server
