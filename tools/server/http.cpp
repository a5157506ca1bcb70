#include "server/http.h"

#include <malloc.h>
#include <poll.h>
#include <sys/socket.h>

#include <array>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <optional>
#include <sstream>
#include <thread>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include "server/http_error.h"
#include "tessera/core/error.h"

namespace tessera::server {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using tcp = net::ip::tcp;

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    const auto lower = [](char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; };
    if (lower(a[i]) != lower(b[i])) return false;
  }
  return true;
}

std::string HttpRequest::header(std::string_view name) const {
  for (const auto& [k, v] : headers) {
    if (iequals(k, name)) return v;
  }
  return {};
}

namespace {

std::string str(beast::string_view s) { return std::string(s.data(), s.size()); }

struct Route {
  std::string method, path;
  HttpHandler handler;
  bool quick = false;
  size_t cost_per_byte = 0;
};

// The bytes requests in flight may hold, all together.
class Budget {
 public:
  explicit Budget(size_t limit) : limit_(limit) {}
  // Adds `more` to `held` when it fits.
  bool grow(size_t& held, size_t more) {
    size_t used = used_.load();
    do {
      if (more > limit_ || used > limit_ - more) return false;
    } while (!used_.compare_exchange_weak(used, used + more));
    held += more;
    return true;
  }
  void release(size_t& held) {
    used_ -= held;
    held = 0;
  }
  size_t used() const { return used_.load(); }
  size_t limit() const { return limit_; }

 private:
  const size_t limit_;
  std::atomic<size_t> used_{0};
};

// Requests handled off the I/O thread.
class WorkerPool {
 public:
  void start(int n) {
    for (int i = 0; i < n; ++i) threads_.emplace_back([this] { work(); });
  }
  void post(std::function<void()> task) {
    {
      std::lock_guard lock(mutex_);
      tasks_.push_back(std::move(task));
    }
    cv_.notify_one();
  }
  void stop() {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    cv_.notify_all();
    for (auto& t : threads_) t.join();
    threads_.clear();
  }

 private:
  void work() {
    while (true) {
      std::function<void()> task;
      {
        std::unique_lock lock(mutex_);
        cv_.wait(lock, [&] { return stopping_ || !tasks_.empty(); });
        if (tasks_.empty()) return;
        task = std::move(tasks_.front());
        tasks_.pop_front();
      }
      task();
    }
  }
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> tasks_;
  std::vector<std::thread> threads_;
  bool stopping_ = false;
};

constexpr size_t kLarge = size_t{1} << 20;
// The read buffer's bound: the head (16 KiB by default), a chunk-size line
// or the trailers must fit in it.
constexpr size_t kFramingLine = size_t{48} << 10;

bool quiet_error(const beast::error_code& ec) {
  return ec == bhttp::error::end_of_stream || ec == net::error::eof ||
         ec == beast::error::timeout || ec == net::error::operation_aborted ||
         ec == net::error::connection_reset || ec == net::error::bad_descriptor;
}

}  // namespace

struct HttpServer::Impl {
  explicit Impl(HttpLimits l) : limits(l), budget(l.max_inflight_bytes) {}
  class Session;

  HttpLimits limits;
  Budget budget;
  std::vector<Route> routes;
  std::function<bool(const HttpRequest&, HttpResponse&)> filter;
  std::function<std::string(int, const std::string&)> error_body;
  std::function<void(const HttpRequest&, HttpResponse&)> response_headers;
  WorkerPool pool;

  std::mutex mutex;  // running, stopped
  bool running = false, stopped = false;
  bool stopping = false;  // I/O thread only
  std::atomic<size_t> n_connections{0};
  std::atomic<int> busy{0};  // requests on workers
  std::vector<std::weak_ptr<Session>> sessions;  // I/O thread only
  // Last: destroyed first, with the handlers still queued (which hold
  // sessions, which count themselves out of n_connections above).
  net::io_context io{1};
  tcp::acceptor acceptor{io};
  net::steady_timer trim_timer{io};
  net::steady_timer accept_timer{io};

  void accept();
  void shut_down();  // I/O thread: no more accepts, idle connections closed
  // Every few seconds after requests came: the allocator returns the free
  // memory of bursts (many connections, large bodies) to the system.
  void trim_later();
  std::atomic<uint64_t> requests{0};
  uint64_t requests_trimmed = 0;
  HttpResponse error(int status, const std::string& message) const {
    HttpResponse r;
    r.status = status;
    r.body = error_body ? error_body(status, message) : message;
    return r;
  }
};

class HttpServer::Impl::Session : public std::enable_shared_from_this<Session>,
                                  public HttpConnection {
 public:
  Session(tcp::socket socket, Impl& server) : stream_(std::move(socket)), server_(server) {
    ++server_.n_connections;
  }
  ~Session() override {
    server_.budget.release(held_);
    --server_.n_connections;
  }

  void start() { read_head(); }
  bool reading() const { return reading_; }
  bool idle() const { return reading_ && idle_; }
  void close() {
    beast::error_code ec;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ec);
    stream_.close();
  }

  bool gone() override {
    char c;
    const ssize_t n = ::recv(stream_.socket().native_handle(), &c, 1, MSG_PEEK | MSG_DONTWAIT);
    return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
  }

  bool write(std::string_view data) override {
    if (failed_) return false;
    if (!head_sent_ && !send_head()) return false;
    if (data.empty()) return true;
    std::string chunk = fmt::format("{:x}\r\n", data.size());
    chunk.append(data);
    chunk += "\r\n";
    failed_ = !send_all(chunk);
    return !failed_;
  }

 private:
  void read_head() {
    reading_ = true;
    idle_ = buffer_.size() == 0;
    parser_.emplace();
    parser_->header_limit(static_cast<std::uint32_t>(server_.limits.max_header_bytes));
    parser_->body_limit(server_.limits.max_body_bytes);
    // Chunk extensions count against the body limit with the data (Beast
    // counts only the data): many chunks with long extensions cannot make
    // the server read past --max-body.
    framing_bytes_ = 0;
    parser_->on_chunk_header(on_chunk_header_);  // Beast keeps a reference
    stream_.expires_after(server_.limits.header_timeout);
    bhttp::async_read_header(stream_, buffer_, *parser_,
                             [self = shared_from_this()](beast::error_code ec, size_t) {
                               self->idle_ = false;
                               self->on_head(ec);
                             });
  }

  void on_head(beast::error_code ec) {
    if (ec == bhttp::error::body_limit) return too_large();  // Content-Length says so
    if (ec == bhttp::error::header_limit) {
      return fail(431, fmt::format("the request head is larger than {} bytes",
                                   server_.limits.max_header_bytes));
    }
    if (ec == bhttp::error::buffer_overflow) {
      return fail(431, fmt::format("the request head is larger than {} bytes",
                                   server_.limits.max_header_bytes));
    }
    if (ec) return quiet_error(ec) ? close() : fail(400, "malformed request: " + ec.message());
    if (server_.stopping) return fail(503, "the server is shutting down");
    // RFC 9112 6.3: a request whose transfer coding the server does not
    // know has no length it can trust; 400, and the connection closes (so
    // what follows cannot run as a second request).
    const auto& head = parser_->get();
    if (const auto te = head.count(bhttp::field::transfer_encoding); te > 0) {
      const std::string v = str(head[bhttp::field::transfer_encoding]);
      if (te > 1 || !iequals(trim(v), "chunked")) {
        return fail(400, fmt::format("Transfer-Encoding '{}' is not supported: only 'chunked', once",
                                     v.substr(0, 100)));
      }
    }
    const auto length = parser_->content_length();
    if (length && *length > server_.limits.max_body_bytes) return too_large();
    if (length && !server_.budget.grow(held_, *length)) return budget_full();
    // The Host, Origin and key checks see the head before the client is
    // told to send its body (a request without one is filtered as before).
    if (server_.filter && !parser_->is_done()) {
      HttpRequest probe = request_from(head);
      HttpResponse answer;
      if (server_.filter(probe, answer)) {
        keep_alive_ = false;
        request_ = std::move(probe);
        response_ = std::move(answer);
        ++server_.requests;
        return send_async();
      }
    }
    if (iequals(str(head[bhttp::field::expect]), "100-continue")) {
      static constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
      net::async_write(stream_, net::buffer(kContinue.data(), kContinue.size()),
                       [self = shared_from_this()](beast::error_code e, size_t) {
                         if (e) return self->close();
                         self->read_body();
                       });
      return;
    }
    read_body();
  }

  void read_body() {
    stream_.expires_after(server_.limits.body_timeout);
    bhttp::async_read(stream_, buffer_, *parser_,
                      [self = shared_from_this()](beast::error_code ec, size_t) { self->on_body(ec); });
  }

  void budget_full() {
    budget_full_ = false;
    keep_alive_ = false;
    response_ = server_.error(503, fmt::format("the requests in flight hold the server's memory for requests "
                                               "({} MiB, --max-request-memory): retry later",
                                               server_.budget.limit() >> 20));
    response_.headers.emplace_back("Retry-After", "1");
    send_async();
  }

  void too_large() {
    large_ = true;
    fail(413, fmt::format("the body is larger than the server accepts ({} bytes)",
                          server_.limits.max_body_bytes));
  }

  void on_body(beast::error_code ec) {
    if (budget_full_) return budget_full();
    if (ec == bhttp::error::body_limit) return too_large();
    if (ec == bhttp::error::buffer_overflow) {
      return fail(400, fmt::format("a chunk-size line or the trailers are longer than {} bytes",
                                   kFramingLine));
    }
    if (ec) return quiet_error(ec) ? close() : fail(400, "malformed request: " + ec.message());
    stream_.expires_never();
    reading_ = false;
    auto& req = parser_->get();
    large_ = req.body().size() >= kLarge;
    request_ = request_from(req);
    keep_alive_ = req.keep_alive();
    head_sent_ = failed_ = false;
    try {
      request_.body = decode_body(request_.header("Content-Encoding"), req.body(),
                                  server_.limits.max_body_bytes);
    } catch (const HttpError& e) {
      return fail(e.status(), e.what());
    }
    const size_t sent = req.body().size();
    parser_.reset();
    if (request_.body.size() > sent && !server_.budget.grow(held_, request_.body.size() - sent)) {
      return budget_full();
    }
    dispatch();
  }

  static HttpRequest request_from(const bhttp::request<bhttp::string_body>& req) {
    HttpRequest r;
    r.method = str(req.method_string());
    r.target = str(req.target());
    r.path = r.target.substr(0, r.target.find('?'));
    for (const auto& field : req) r.headers.emplace_back(str(field.name_string()), str(field.value()));
    return r;
  }

  static std::string_view trim(std::string_view v) {
    while (!v.empty() && (v.front() == ' ' || v.front() == '\t')) v.remove_prefix(1);
    while (!v.empty() && (v.back() == ' ' || v.back() == '\t')) v.remove_suffix(1);
    return v;
  }

  void dispatch() {
    ++server_.requests;
    response_ = HttpResponse{};
    if (server_.filter && server_.filter(request_, response_)) return send_async();
    const Route* route = nullptr;
    bool path_known = false;
    for (const Route& r : server_.routes) {
      if (r.path != request_.path) continue;
      path_known = true;
      if (r.method == request_.method) route = &r;
    }
    if (route == nullptr) {
      response_ = path_known ? server_.error(405, fmt::format("{} is not allowed on {}", request_.method.substr(0, 16), request_.path))
                             : server_.error(404, fmt::format("no endpoint {} {}", request_.method.substr(0, 16),
                                                              request_.path.substr(0, 100)));
      return send_async();
    }
    if (route->quick) {
      run_handler(*route);
      return send_async();
    }
    if (!server_.budget.grow(held_, request_.body.size() * route->cost_per_byte)) return budget_full();
    ++server_.busy;
    server_.pool.post([self = shared_from_this(), route] {
      self->run_handler(*route);
      self->finish_on_worker();
      --self->server_.busy;
    });
  }

  void run_handler(const Route& route) {
    try {
      route.handler(request_, response_, *this);
    } catch (const std::exception& e) {
      response_ = server_.error(500, e.what());
    }
  }

  // The response, written from the worker; then the I/O thread goes on.
  void finish_on_worker() {
    if (response_.abandoned) {  // the client left: no answer pretends otherwise
      failed_ = true;
    } else if (response_.stream) {
      response_.stream(*this);
      if (!failed_ && (head_sent_ || send_head())) failed_ = !send_all("0\r\n\r\n");
    } else {
      std::ostringstream out;
      out << *make_message();
      failed_ = !send_all(out.str());
    }
    net::post(stream_.get_executor(), [self = shared_from_this()] { self->after_response(); });
  }

  std::shared_ptr<bhttp::response<bhttp::string_body>> make_message() {
    if (server_.response_headers) server_.response_headers(request_, response_);
    auto m = std::make_shared<bhttp::response<bhttp::string_body>>(
        static_cast<bhttp::status>(response_.status), 11);
    m->set(bhttp::field::content_type, response_.content_type);
    for (const auto& [k, v] : response_.headers) m->set(k, v);
    large_ |= response_.body.size() >= kLarge;
    m->body() = std::move(response_.body);
    m->keep_alive(keep_alive_);
    m->prepare_payload();
    return m;
  }

  bool send_head() {
    if (server_.response_headers) server_.response_headers(request_, response_);
    bhttp::response<bhttp::empty_body> head(static_cast<bhttp::status>(response_.status), 11);
    head.set(bhttp::field::content_type, response_.content_type);
    for (const auto& [k, v] : response_.headers) head.set(k, v);
    head.chunked(true);
    head.keep_alive(keep_alive_);
    std::ostringstream out;
    out << head.base();
    head_sent_ = true;
    failed_ = !send_all(out.str());
    return !failed_;
  }

  // Writes all of `data` from a worker, straight to the socket (the I/O
  // thread does not touch it while the request is handled), under the
  // write deadline.
  bool send_all(std::string_view data) {
    const int fd = stream_.socket().native_handle();
    const auto deadline = std::chrono::steady_clock::now() + server_.limits.write_timeout;
    size_t at = 0;
    while (at < data.size()) {
      const ssize_t n = ::send(fd, data.data() + at, data.size() - at, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n > 0) {
        at += static_cast<size_t>(n);
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK)) return false;
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return false;
      pollfd p{fd, POLLOUT, 0};
      ::poll(&p, 1, static_cast<int>(left.count()));
    }
    return true;
  }

  // On the I/O thread, from the I/O thread.
  void send_async() {
    auto message = make_message();
    bhttp::async_write(stream_, *message,
                       [self = shared_from_this(), message](beast::error_code ec, size_t) {
                         self->failed_ = static_cast<bool>(ec);
                         self->after_response();
                       });
  }

  void fail(int status, const std::string& message) {
    keep_alive_ = false;
    large_ |= status == 413;
    response_ = server_.error(status, message);
    send_async();
  }

  void after_response() {
    release();
    if (failed_) return close();
    if (!keep_alive_ || server_.stopping) return linger();
    read_head();
  }

  // Drops what the last request held. After a large one (a body or an
  // answer of a megabyte or more) the allocator gives the memory back, so a
  // burst of large requests leaves no lasting growth.
  void release() {
    const bool large = std::exchange(large_, false) || buffer_.capacity() >= kLarge;
    server_.budget.release(held_);
    request_ = HttpRequest{};
    response_ = HttpResponse{};
    parser_.reset();
    if (buffer_.size() == 0) buffer_.shrink_to_fit();
    if (large) malloc_trim(0);
  }

  // Closes after a response the client may still be sending a body to
  // (a 413, a refused request): reading on for a moment lets it read the
  // response instead of a reset.
  void linger() {
    beast::error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
    stream_.expires_after(std::chrono::seconds(2));
    drain();
  }
  void drain() {
    if (!discard_) discard_ = std::make_unique<std::array<char, 16384>>();
    stream_.async_read_some(net::buffer(*discard_), [self = shared_from_this()](beast::error_code ec, size_t) {
      if (ec) return self->close();
      self->drain();
    });
  }

  beast::tcp_stream stream_;
  Impl& server_;
  // Bounded: a chunk-size line (with its extensions) or a trailer section
  // that does not fit is a 400, and no header field reaches Beast's 64 KiB
  // limit, which it enforces by throwing.
  beast::flat_buffer buffer_{kFramingLine};
  size_t framing_bytes_ = 0;  // chunk-size lines read so far
  size_t held_ = 0;           // bytes of the budget this request holds
  bool budget_full_ = false;  // a chunk did not fit the budget
  std::function<void(std::uint64_t, beast::string_view, beast::error_code&)> on_chunk_header_ =
      [this](std::uint64_t size, beast::string_view extensions, beast::error_code& ec) {
        framing_bytes_ += extensions.size() + 16;  // the size line's own bytes, roughly
        if (framing_bytes_ + parser_->get().body().size() + size > server_.limits.max_body_bytes) {
          ec = bhttp::error::body_limit;
        } else if (!server_.budget.grow(held_, size)) {
          budget_full_ = true;
          ec = bhttp::error::body_limit;
        }
      };
  bool idle_ = false;         // waiting for a request's first byte
  std::optional<bhttp::request_parser<bhttp::string_body>> parser_;
  HttpRequest request_;
  HttpResponse response_;
  bool reading_ = true;
  bool keep_alive_ = false;
  bool head_sent_ = false;
  bool failed_ = false;
  bool large_ = false;  // the last request or its answer was kLarge or more
  std::unique_ptr<std::array<char, 16384>> discard_;
};

void HttpServer::Impl::accept() {
  acceptor.async_accept([this](beast::error_code ec, tcp::socket socket) {
    if (ec) {
      if (stopping || !acceptor.is_open()) return;
      // Out of file descriptors: the connection waits in the backlog; try
      // again shortly rather than spin on the same error.
      if (ec == net::error::no_descriptors || ec == net::error::no_buffer_space || ec == net::error::no_memory) {
        accept_timer.expires_after(std::chrono::milliseconds(50));
        accept_timer.async_wait([this](beast::error_code e) {
          if (!e && !stopping) accept();
        });
        return;
      }
      accept();
      return;
    }
    std::erase_if(sessions, [](const std::weak_ptr<Session>& s) { return s.expired(); });
    if (n_connections.load() >= limits.max_connections) {
      // Full: the connection idle longest (no byte of a request yet) makes
      // room, so a flood of idle sockets cannot lock out /health and live
      // clients; with none idle, the new one is refused.
      std::shared_ptr<Session> oldest_idle;
      for (const auto& w : sessions) {
        if (auto s = w.lock(); s && s->idle()) {
          oldest_idle = std::move(s);
          break;
        }
      }
      if (oldest_idle) {
        oldest_idle->close();
      } else {
        beast::error_code ignored;
        socket.close(ignored);
        accept();
        return;
      }
    }
    auto s = std::make_shared<Session>(std::move(socket), *this);
    sessions.push_back(s);
    s->start();
    accept();
  });
}

void HttpServer::Impl::trim_later() {
  trim_timer.expires_after(std::chrono::seconds(5));
  trim_timer.async_wait([this](beast::error_code ec) {
    if (ec || stopping) return;
    if (const uint64_t n = requests.load(); n != requests_trimmed) {
      requests_trimmed = n;
      malloc_trim(0);
    }
    trim_later();
  });
}

void HttpServer::Impl::shut_down() {
  stopping = true;
  beast::error_code ignored;
  acceptor.close(ignored);
  trim_timer.cancel();
  accept_timer.cancel();
  for (auto& w : sessions) {
    if (auto s = w.lock(); s && s->reading()) s->close();
  }
}

HttpServer::HttpServer(HttpLimits limits) : impl_(std::make_shared<Impl>(limits)) {}

HttpServer::~HttpServer() { stop(); }

void HttpServer::route(const std::string& method, const std::string& path, HttpHandler handler,
                       bool quick, size_t cost_per_byte) {
  impl_->routes.push_back({method, path, std::move(handler), quick, cost_per_byte});
}

void HttpServer::set_filter(std::function<bool(const HttpRequest&, HttpResponse&)> filter) {
  impl_->filter = std::move(filter);
}

void HttpServer::set_error_body(std::function<std::string(int, const std::string&)> body) {
  impl_->error_body = std::move(body);
}

void HttpServer::set_response_headers(std::function<void(const HttpRequest&, HttpResponse&)> add) {
  impl_->response_headers = std::move(add);
}

int HttpServer::bind(const std::string& host, int port) {
  Impl& s = *impl_;
  beast::error_code ec;
  const auto address = net::ip::make_address(host == "localhost" ? "127.0.0.1" : host, ec);
  if (ec) fail(ErrorCategory::kIo, "[serve --host {}] not an IP address: {}", host, ec.message());
  const tcp::endpoint at(address, static_cast<unsigned short>(port));
  s.acceptor.open(at.protocol(), ec);
  if (!ec) s.acceptor.set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) s.acceptor.bind(at, ec);
  if (!ec) s.acceptor.listen(net::socket_base::max_listen_connections, ec);
  if (ec) {
    fail(ErrorCategory::kIo, "[serve --host {} --port {}] cannot bind: {}", host, port, ec.message());
  }
  return s.acceptor.local_endpoint().port();
}

void HttpServer::run() {
  Impl& s = *impl_;
  {
    std::lock_guard lock(s.mutex);
    if (s.stopped) return;
    s.running = true;
  }
  s.pool.start(s.limits.workers);
  s.accept();
  s.trim_later();
  // Requests on workers have no operation pending on the I/O thread: it
  // runs until stop() says so, not until it has nothing to wait for.
  auto keep = net::make_work_guard(s.io);
  // A handler that throws (Beast throws for a few limits of its own) ends
  // that connection, not the server: run() goes on after it.
  while (true) {
    try {
      s.io.run();
      break;
    } catch (const std::exception& e) {
      fmt::print(stderr, "serve: an HTTP connection ended on an error: {}\n", e.what());
    }
  }
  s.pool.stop();
}

void HttpServer::stop() {
  Impl& s = *impl_;
  {
    std::lock_guard lock(s.mutex);
    if (s.stopped) return;
    s.stopped = true;
    if (!s.running) return;  // a later run() returns at once
  }
  net::post(s.io, [&s] { s.shut_down(); });
  // The requests being handled finish; each write is under its deadline.
  const auto deadline = std::chrono::steady_clock::now() + s.limits.write_timeout;
  while (s.busy.load() > 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  s.io.stop();
}

size_t HttpServer::connections() const { return impl_->n_connections.load(); }

size_t HttpServer::inflight_bytes() const { return impl_->budget.used(); }

}  // namespace tessera::server
