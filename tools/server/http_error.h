// A client's mistake as an HTTP status and an OpenAI-style error object:
// {"error": {"code": 400, "message": "...", "type": "invalid_request_error"}},
// and the one mapping from every exception the server can meet to a status.
#pragma once

#include <exception>
#include <stdexcept>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace tessera::server {

class HttpError : public std::runtime_error {
 public:
  HttpError(int status, std::string message)
      : std::runtime_error(std::move(message)), status_(status) {}
  int status() const { return status_; }
  // "invalid_request_error", "authentication_error", "not_found_error", ...
  std::string type() const;
  nlohmann::json to_json() const;

 private:
  int status_;
};

template <class... Args>
[[noreturn]] void bad_request(fmt::format_string<Args...> format, Args&&... args) {
  throw HttpError(400, fmt::format(format, std::forward<Args>(args)...));
}

// The status for whatever was thrown: an HttpError keeps its own; a refused
// conversation (serving::ChatError), a tessera Error of kInvalidArgument and
// malformed JSON are 400; serving::Stopped (shutting down) is 503; anything
// else 500.
HttpError to_http_error(std::exception_ptr error);

}  // namespace tessera::server
