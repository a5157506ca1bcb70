#include "server/sse.h"

#include <httplib.h>

#include <chrono>

#include "server/http_error.h"

namespace tessera::server {
namespace {

using nlohmann::json;

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

// Writes to the client; a failed write (the client left) cancels the request.
class Writer {
 public:
  Writer(httplib::DataSink& sink, serving::Request& request) : sink_(sink), request_(request) {}
  bool data(const json& j) { return line("data: " + dump(j) + "\n\n"); }
  bool done() { return line("data: [DONE]\n\n"); }
  bool ping() { return line(": ping\n\n"); }

 private:
  bool line(const std::string& s) {
    if (sink_.write(s.data(), s.size())) return true;
    request_.cancel();
    return false;
  }
  httplib::DataSink& sink_;
  serving::Request& request_;
};

// Everything after the opening chunk: events as they come, then the end.
bool stream_events(Writer& out, const Stream& s) {
  int idle = 0;
  while (true) {
    std::optional<serving::Event> e = s.events->pop(std::chrono::milliseconds(250));
    if (!e) {
      if (++idle % 8 == 0 && !out.ping()) return false;
      continue;
    }
    idle = 0;
    if ((!e->text.empty() || !e->probs.empty()) && !out.data(text_chunk(s.head, *e))) return false;
    if (!e->done) continue;
    if (e->finish == serving::FinishReason::kError) {
      out.data(HttpError(500, e->error).to_json());
    } else {
      if (!out.data(final_chunk(s.head, *e))) return false;
      if (s.include_usage && !out.data(usage_chunk(s.head, *e))) return false;
    }
    return out.done();
  }
}

}  // namespace

void send_event_stream(httplib::Response& res, Stream stream) {
  res.set_header("Cache-Control", "no-cache");
  auto request = stream.request;
  res.set_chunked_content_provider(
      "text/event-stream",
      [s = std::move(stream)](size_t, httplib::DataSink& sink) {
        Writer out(sink, *s.request);
        if (s.head.chat && !out.data(role_chunk(s.head))) return false;
        if (!stream_events(out, s)) return false;
        sink.done();
        return true;
      },
      [request](bool) { request->cancel(); });  // finished or dropped: the slot is freed
}

}  // namespace tessera::server
