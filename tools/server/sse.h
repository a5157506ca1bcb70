// A completion streamed as server-sent events: "data: {chunk}" per event,
// a comment line now and then so a client that left is noticed, the final
// chunk with the finish reason and timings, the usage chunk when asked, and
// "data: [DONE]". A client that leaves cancels the request.
#pragma once

#include <memory>

#include "server/http.h"
#include "server/oai.h"
#include "tessera/serving/serving.h"

namespace tessera::server {

struct Stream {
  std::shared_ptr<serving::Request> request;
  std::shared_ptr<serving::EventQueue> events;
  ResponseHead head;
  bool include_usage = false;
  serving::Event first;  // already taken from the queue
};

// Makes `res` a stream of `stream`'s events.
void send_event_stream(HttpResponse& res, Stream stream);

}  // namespace tessera::server
