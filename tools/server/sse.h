// A completion streamed as server-sent events: "data: {chunk}" per event,
// a comment line now and then so a client that left is noticed, the final
// chunk with the finish reason and timings, the usage chunk when asked, and
// "data: [DONE]". A client that leaves cancels the request.
#pragma once

#include <memory>

#include "server/oai.h"
#include "tessera/serving.h"

namespace httplib {
struct Response;
}

namespace tessera::server {

struct Stream {
  std::shared_ptr<serving::Request> request;
  std::shared_ptr<serving::EventQueue> events;
  ResponseHead head;
  bool include_usage = false;
};

void send_event_stream(httplib::Response& res, Stream stream);

}  // namespace tessera::server
