#include "server/sse.h"

#include <chrono>
#include <optional>

#include "server/http_error.h"

namespace tessera::server {
namespace {

using nlohmann::json;

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

// Writes to the client; a failed write (the client left) cancels the request.
class Writer {
 public:
  Writer(HttpConnection& conn, serving::Request& request) : conn_(conn), request_(request) {}
  bool data(const json& j) { return line("data: " + dump(j) + "\n\n"); }
  bool done() { return line("data: [DONE]\n\n"); }
  bool ping() { return line(": ping\n\n"); }

 private:
  bool line(const std::string& s) {
    if (conn_.write(s)) return true;
    request_.cancel();
    return false;
  }
  HttpConnection& conn_;
  serving::Request& request_;
};

// One event out; true while more may follow.
bool send(Writer& out, const Stream& s, const serving::Event& e, int& n_calls) {
  if ((!e.text.empty() || !e.reasoning.empty() || !e.probs.empty()) && !out.data(text_chunk(s.head, e))) {
    return false;
  }
  for (const serving::ToolCall& c : e.tool_calls) {
    for (const json& j : tool_call_chunks(s.head, n_calls, c)) {
      if (!out.data(j)) return false;
    }
    ++n_calls;
  }
  if (!e.done) return true;
  if (e.finish == serving::FinishReason::kError) {
    out.data(HttpError(500, e.error).to_json());
  } else {
    if (!out.data(final_chunk(s.head, e, n_calls > 0))) return false;
    if (s.include_usage && !out.data(usage_chunk(s.head, e))) return false;
  }
  out.done();
  return false;
}

void stream_events(HttpConnection& conn, const Stream& s) {
  Writer out(conn, *s.request);
  if (s.head.chat && !out.data(role_chunk(s.head))) return;
  int n_calls = 0;
  if (!send(out, s, s.first, n_calls)) return;
  int idle = 0;
  while (true) {
    std::optional<serving::Event> e = s.events->pop(std::chrono::milliseconds(250));
    if (!e) {
      // A comment line now and then: a client that left is noticed.
      if (++idle % 8 == 0 && !out.ping()) return;
      if (conn.gone()) {
        s.request->cancel();
        return;
      }
      continue;
    }
    idle = 0;
    if (!send(out, s, *e, n_calls)) return;
  }
}

}  // namespace

void send_event_stream(HttpResponse& res, Stream stream) {
  res.content_type = "text/event-stream";
  res.headers.emplace_back("Cache-Control", "no-cache");
  res.stream = [s = std::make_shared<Stream>(std::move(stream))](HttpConnection& conn) {
    stream_events(conn, *s);
    s->request->cancel();  // ended or dropped: a request still running is freed
  };
}

}  // namespace tessera::server
