// `tessera serve` against hostile clients: the requests of the probe that
// crashed or starved the server before its HTTP layer was rebuilt, each as
// a test on the real server (raw sockets where a client library would
// refuse to send such bytes).
#include <gtest/gtest.h>
#include <zlib.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "tools/run_command.h"
#include "tools/server_process.h"

namespace tessera::testing {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

std::string model() { return models_dir() + "/stories260K.gguf"; }

// A connection of our own: bytes exactly as given.
class Raw {
 public:
  explicit Raw(int port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ok_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  }
  ~Raw() { close(); }
  void close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  bool ok() const { return ok_; }
  bool send(const std::string& bytes) {
    size_t at = 0;
    while (at < bytes.size()) {
      const ssize_t n = ::send(fd_, bytes.data() + at, bytes.size() - at, MSG_NOSIGNAL);
      if (n <= 0) return false;
      at += static_cast<size_t>(n);
    }
    return true;
  }
  // What the server sends until it closes or `limit` passes.
  std::string receive(std::chrono::milliseconds limit = std::chrono::milliseconds(10000)) {
    std::string out;
    const auto deadline = Clock::now() + limit;
    char buf[65536];
    while (Clock::now() < deadline) {
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, 50) <= 0) continue;
      const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
      if (n <= 0) break;
      out.append(buf, static_cast<size_t>(n));
    }
    return out;
  }

 private:
  int fd_ = -1;
  bool ok_ = false;
};

int status_of(const std::string& response) {
  if (response.rfind("HTTP/1.1 ", 0) != 0) return -1;
  return std::stoi(response.substr(9, 3));
}

std::string post_bytes(const std::string& path, const std::string& body,
                       const std::string& extra_headers = "") {
  return "POST " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
         "Content-Type: application/json\r\n" + extra_headers + "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
}

std::string gzip(const std::string& plain) {
  std::string out(compressBound(static_cast<uLong>(plain.size())) + 32, '\0');
  z_stream zs{};
  if (deflateInit2(&zs, 9, Z_DEFLATED, 16 + 15, 9, Z_DEFAULT_STRATEGY) != Z_OK) return {};
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(plain.data()));
  zs.avail_in = static_cast<uInt>(plain.size());
  zs.next_out = reinterpret_cast<Bytef*>(out.data());
  zs.avail_out = static_cast<uInt>(out.size());
  const bool ok = deflate(&zs, Z_FINISH) == Z_STREAM_END;
  out.resize(ok ? zs.total_out : 0);
  deflateEnd(&zs);
  return out;
}

std::string nested(size_t depth, const std::string& leaf) {
  return std::string(depth, '[') + leaf + std::string(depth, ']');
}

class HostileTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    server_ = new ServerProcess({"-m", model(), "-np", "2", "-c", "1024", "--max-body", "1048576"});
  }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }
  static std::string exchange(const std::string& bytes) {
    Raw c(server_->port());
    EXPECT_TRUE(c.ok());
    c.send(bytes);
    return c.receive();
  }
  static void expect_healthy() {
    auto h = server_->client().Get("/health");
    ASSERT_TRUE(h) << "the server no longer answers:\n" << server_->log();
    EXPECT_EQ(h->status, 200);
  }
  static ServerProcess* server_;
};
ServerProcess* HostileTest::server_ = nullptr;

TEST_F(HostileTest, DeepJsonIsA400BeforeAnythingReadsIt) {
  // ~120 KB nested 60,000 deep in a field, and in a message's content.
  for (const std::string& body :
       {R"({"prompt":"x","max_tokens":)" + nested(60000, "1") + "}",
        R"({"prompt":"x","seed":)" + nested(60000, "1") + "}",
        R"({"messages":[{"role":"user","content":)" + nested(60000, "\"a\"") + "}]}"}) {
    const std::string path = body.find("messages") != std::string::npos ? "/v1/chat/completions"
                                                                        : "/v1/completions";
    const std::string r = exchange(post_bytes(path, body));
    EXPECT_EQ(status_of(r), 400) << r.substr(0, 300);
    EXPECT_NE(r.find("nests deeper than 64"), std::string::npos) << r.substr(0, 300);
  }
  // 64 deep is still JSON the server reads (and refuses for its type only).
  const std::string ok = exchange(post_bytes("/v1/completions", R"({"prompt":"x","n":)" + nested(62, "1") + "}"));
  EXPECT_EQ(status_of(ok), 400);
  EXPECT_NE(ok.find("'n' must be an integer"), std::string::npos) << ok.substr(0, 300);
  expect_healthy();
}

TEST_F(HostileTest, NumberOverflowIsABadRequest) {
  // A literal no double holds makes the JSON parser throw out_of_range, not
  // parse_error (a fuzzer found it); it is the client's error all the same.
  for (const char* path : {"/tokenize", "/v1/completions", "/v1/embeddings"}) {
    const std::string r = exchange(post_bytes(path, R"({"content":"x","prompt":"x","n":111111111111e1111})"));
    EXPECT_EQ(status_of(r), 400) << path << ": " << r.substr(0, 300);
    EXPECT_NE(r.find("not valid JSON"), std::string::npos) << r.substr(0, 300);
  }
  expect_healthy();
}

TEST_F(HostileTest, ErrorMessagesQuoteAtMost100Characters) {
  const std::string huge(200000, 'x');
  const std::string r = exchange(post_bytes("/v1/completions", R"({"prompt":"x","max_tokens":[")" + huge + R"("]})"));
  EXPECT_EQ(status_of(r), 400);
  EXPECT_LT(r.size(), 600u) << r.substr(0, 600);
}

TEST_F(HostileTest, ChunkedAndCompressedBodiesAreBoundedToo) {
  // 3 MB in chunks of 64 KB, past the 1 MB limit: refused, read no further.
  std::string chunked = "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n\r\n";
  const std::string piece(65536, ' ');
  for (int i = 0; i < 48; ++i) chunked += "10000\r\n" + piece + "\r\n";
  chunked += "0\r\n\r\n";
  std::string r = exchange(chunked);
  EXPECT_EQ(status_of(r), 413) << r.substr(0, 300);
  // A 20 KB gzip body that expands to 20 MB.
  const std::string deflated = gzip(std::string(20 << 20, ' '));
  ASSERT_LT(deflated.size(), 1u << 20);
  r = exchange(post_bytes("/v1/completions", deflated, "Content-Encoding: gzip\r\n"));
  EXPECT_EQ(status_of(r), 413) << r.substr(0, 300);
  EXPECT_NE(r.find("decoded"), std::string::npos) << r.substr(0, 300);
  // A small gzip body is read as its JSON.
  const std::string json_body = R"({"prompt":"Once upon a time","max_tokens":3,"temperature":0})";
  const std::string small = gzip(json_body);
  r = exchange(post_bytes("/v1/completions", small, "Content-Encoding: gzip\r\n"));
  EXPECT_EQ(status_of(r), 200) << r.substr(0, 300);
  r = exchange(post_bytes("/v1/completions", json_body, "Content-Encoding: zstd\r\n"));
  EXPECT_EQ(status_of(r), 415) << r.substr(0, 300);
  expect_healthy();
}

TEST_F(HostileTest, StrictParsingLeavesNoRoomForSmuggling) {
  const std::string body = R"({"prompt":"x","max_tokens":1})";
  // Two Content-Lengths that differ.
  std::string r = exchange("POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: " +
                           std::to_string(body.size()) + "\r\nContent-Length: 5\r\n\r\n" + body);
  EXPECT_EQ(status_of(r), 400) << r.substr(0, 300);
  // Content-Length and Transfer-Encoding together.
  r = exchange("POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: " +
               std::to_string(body.size()) + "\r\nTransfer-Encoding: chunked\r\n\r\n" + body);
  EXPECT_EQ(status_of(r), 400) << r.substr(0, 300);
  // A bare LF inside the head does not start a header of its own.
  ServerProcess keyed({"-m", model(), "-np", "1", "--api-key", "KEY"});
  Raw c(keyed.port());
  c.send("GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\nX-Foo: a\nX-Api-Key: KEY\r\n\r\n");
  r = c.receive();
  EXPECT_NE(status_of(r), 200) << r.substr(0, 300);
  // A head larger than the limit.
  r = exchange("GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\nX-Big: " + std::string(40000, 'a') + "\r\n\r\n");
  EXPECT_EQ(status_of(r), 431) << r.substr(0, 300);
  expect_healthy();
}

TEST_F(HostileTest, SlowClientsCannotStarveHealth) {
  // 200 connections, each sending one byte of its head now and then.
  std::vector<std::unique_ptr<Raw>> slow;
  for (int i = 0; i < 200; ++i) {
    slow.push_back(std::make_unique<Raw>(server_->port()));
    slow.back()->send("G");
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  for (auto& s : slow) s->send("E");
  double worst_ms = 0;
  for (int i = 0; i < 5; ++i) {
    const auto t0 = Clock::now();
    auto h = server_->client().Get("/health");
    worst_ms = std::max(worst_ms, std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
    ASSERT_TRUE(h);
    EXPECT_EQ(h->status, 200);
  }
  EXPECT_LT(worst_ms, 1000.0);  // answered at once (llama-server: 0 ms with 50); 1 s for a loaded CI
  RecordProperty("health_ms_with_200_slow_connections", static_cast<int>(worst_ms));
  // A completion goes through beside them too.
  auto r = server_->client().Post("/v1/completions", R"({"prompt":"One day","max_tokens":4})", "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
}

TEST_F(HostileTest, TokenizeOutputIsCappedAndMemoryReturns) {
  const std::string text(900 << 10, 'a');  // 900 KB of text: far more than 65536 tokens
  const long before = server_->rss_kib();
  for (int i = 0; i < 3; ++i) {
    auto r = server_->client().Post("/tokenize", json{{"content", text}, {"with_pieces", true}}.dump(),
                                    "application/json");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 413) << r->body.substr(0, 300);
    EXPECT_NE(r->body.find("at most 65536"), std::string::npos) << r->body.substr(0, 300);
  }
  const long after = server_->rss_kib();
#if !defined(TESSERA_ASAN)
  EXPECT_LT(after - before, 64 * 1024) << "RSS " << before << " -> " << after << " KiB";
#endif
  (void)before;  // ASan's allocator keeps what it frees: no RSS check there
  (void)after;
  auto ok = server_->client().Post("/tokenize", R"({"content":"hello","with_pieces":true})", "application/json");
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 200);
}

TEST_F(HostileTest, OpenAIMessageShapesAndUnimplementedFields) {
  httplib::Client c = server_->client();
  const json as_text = {{"messages", {{{"role", "user"}, {"content", "Tell a story."}}}},
                        {"max_tokens", 8}, {"temperature", 0}};
  const json as_parts = {{"messages", {{{"role", "user"},
                                        {"content", {{{"type", "text"}, {"text", "Tell a "}},
                                                     {{"type", "text"}, {"text", "story."}}}}}}},
                         {"max_tokens", 8}, {"temperature", 0}};
  auto a = c.Post("/v1/chat/completions", as_text.dump(), "application/json");
  auto b = c.Post("/v1/chat/completions", as_parts.dump(), "application/json");
  ASSERT_TRUE(a && b);
  ASSERT_EQ(b->status, 200) << b->body;
  EXPECT_EQ(json::parse(a->body)["choices"][0]["message"], json::parse(b->body)["choices"][0]["message"]);
  // content null beside tool_calls, a name field.
  const json null_content = {
      {"messages", {{{"role", "user"}, {"content", "Hi"}, {"name", "ann"}},
                    {{"role", "assistant"}, {"content", nullptr},
                     {"tool_calls", {{{"id", "1"}, {"type", "function"},
                                      {"function", {{"name", "f"}, {"arguments", "{}"}}}}}}},
                    {{"role", "user"}, {"content", "Go on"}}}},
      {"max_tokens", 4}};
  auto n = c.Post("/v1/chat/completions", null_content.dump(), "application/json");
  ASSERT_TRUE(n);
  EXPECT_EQ(n->status, 200) << n->body;
  // An image part, malformed tools, and fields that would change the output
  // but are not implemented, are named.
  const std::vector<std::pair<json, std::string>> refused = {
      {{{"messages", {{{"role", "user"}, {"content", {{{"type", "image_url"}, {"image_url", {{"url", "x"}}}}}}}}}}, "image_url"},
      {{{"messages", as_text["messages"]}, {"tools", json::array({json::object()})}}, "'tools[0]'"},
      {{{"messages", as_text["messages"]}, {"functions", json::array({json::object()})}}, "'functions'"},
      {{{"messages", as_text["messages"]}, {"response_format", {{"type", "yaml"}}}}, "'response_format'"},
      {{{"messages", as_text["messages"]}, {"json_schema", {{"type", "object"}, {"patternProperties", json::object()}}}}, "'/patternProperties'"},
      {{{"messages", as_text["messages"]}, {"grammar", "root ::= (\"a\""}}, "'grammar': [grammar] line 1"},
      {{{"messages", as_text["messages"]}, {"logit_bias", {{"99999", 5}}}}, "'logit_bias'"},
  };
  for (const auto& [body, names] : refused) {
    auto r = c.Post("/v1/chat/completions", body.dump(), "application/json");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 400) << body.dump();
    EXPECT_NE(r->body.find(names), std::string::npos) << r->body;
  }
  auto d = c.Post("/v1/embeddings", R"({"input":"hi","dimensions":8})", "application/json");
  ASSERT_TRUE(d);
  EXPECT_EQ(d->status, 400);
  EXPECT_NE(d->body.find("'dimensions'"), std::string::npos) << d->body;
}

TEST_F(HostileTest, LogitBiasSteersTheTokens) {
  httplib::Client c = server_->client();
  const json base = {{"prompt", "Once upon a time"}, {"max_tokens", 1}, {"temperature", 0}, {"logprobs", 1}};
  auto free = c.Post("/v1/completions", base.dump(), "application/json");
  ASSERT_TRUE(free);
  const std::string first = json::parse(free->body)["choices"][0]["logprobs"]["tokens"][0];
  auto ids = c.Post("/tokenize", json{{"content", "Lily"}}.dump(), "application/json");
  const int lily = json::parse(ids->body)["tokens"].back();
  json biased = base;
  biased["logit_bias"] = {{std::to_string(lily), 100}};
  auto r = c.Post("/v1/completions", biased.dump(), "application/json");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  const std::string forced = json::parse(r->body)["choices"][0]["logprobs"]["tokens"][0];
  EXPECT_NE(forced, first);
  EXPECT_NE(std::string("Lily").find(forced.substr(forced.find_first_not_of(' '))), std::string::npos) << forced;
}

TEST_F(HostileTest, HostAndOriginChecks) {
  // A keyless server on 127.0.0.1 answers only to localhost names (DNS rebinding).
  std::string r = exchange("GET /v1/models HTTP/1.1\r\nHost: evil.example:8080\r\nConnection: close\r\n\r\n");
  EXPECT_EQ(status_of(r), 403) << r.substr(0, 300);
  r = exchange("GET /v1/models HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
  EXPECT_EQ(status_of(r), 200) << r.substr(0, 300);
  // A page of another origin is refused; same-origin (the chat page) passes.
  r = exchange(post_bytes("/v1/completions", R"({"prompt":"x","max_tokens":1})",
                          "Origin: http://evil.example\r\n"));
  EXPECT_EQ(status_of(r), 403) << r.substr(0, 300);
  ServerProcess cors({"-m", model(), "-np", "1", "--cors-origin", "http://app.example"});
  Raw c(cors.port());
  c.send("OPTIONS /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nOrigin: http://app.example\r\n"
         "Access-Control-Request-Method: POST\r\nConnection: close\r\n\r\n");
  r = c.receive();
  EXPECT_EQ(status_of(r), 204) << r;
  EXPECT_NE(r.find("Access-Control-Allow-Origin: http://app.example"), std::string::npos) << r;
  Raw d(cors.port());
  d.send(post_bytes("/v1/completions", R"({"prompt":"x","max_tokens":1})",
                    "Origin: http://other.example\r\n"));
  EXPECT_EQ(status_of(d.receive()), 403);
}

TEST(HostileCancel, NonStreamingRequestsOfClientsThatLeaveAreCancelled) {
  ServerProcess s({"-m", slow_model(), "-np", "1", "-c", "4096"});
  // Three requests, one running and two queued; every client leaves.
  for (int i = 0; i < 3; ++i) {
    Raw c(s.port());
    c.send(post_bytes("/v1/completions", R"({"prompt":"Once","max_tokens":4000,"ignore_eos":true})"));
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    c.close();
  }
  bool freed = false;
  for (int i = 0; i < 200 && !freed; ++i) {
    freed = metric(s, "tessera_slots_busy") == 0 && metric(s, "tessera_requests_queued") == 0 &&
            metric(s, "tessera_requests_cancelled_total") == 3;
    if (!freed) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_TRUE(freed) << s.client().Get("/metrics")->body;
  EXPECT_LT(metric(s, "tessera_generated_tokens_total"), 4000);
}

TEST(HostileShutdown, QueuedRequestsGet503AndRunningOnesAbort) {
  ServerProcess s({"-m", slow_model(), "-np", "1", "-c", "4096"});
  Raw running(s.port()), queued(s.port());
  running.send(post_bytes("/v1/completions", R"({"prompt":"Once","max_tokens":4000,"ignore_eos":true})"));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  queued.send(post_bytes("/v1/completions", R"({"prompt":"One day","max_tokens":8})"));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  std::string a, b;
  std::thread ra([&] { a = running.receive(std::chrono::milliseconds(30000)); });
  std::thread rb([&] { b = queued.receive(std::chrono::milliseconds(30000)); });
  EXPECT_EQ(s.terminate(), 0) << s.log();
  ra.join();
  rb.join();
  EXPECT_EQ(status_of(a), 200) << a.substr(0, 300);
  EXPECT_NE(a.find("\"finish_reason\":\"abort\""), std::string::npos) << a.substr(0, 600);
  EXPECT_EQ(status_of(b), 503) << b.substr(0, 300);
}

}  // namespace
}  // namespace tessera::testing
