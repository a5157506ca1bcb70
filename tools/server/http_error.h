// A client's mistake as an HTTP status and an OpenAI-style error object:
// {"error": {"code": 400, "message": "...", "type": "invalid_request_error"}}.
#pragma once

#include <stdexcept>
#include <string>

#include <fmt/format.h>

namespace tessera::server {

class HttpError : public std::runtime_error {
 public:
  HttpError(int status, std::string message)
      : std::runtime_error(std::move(message)), status_(status) {}
  int status() const { return status_; }
  // "invalid_request_error", "authentication_error", "not_found_error", ...
  std::string type() const;

 private:
  int status_;
};

template <class... Args>
[[noreturn]] void bad_request(fmt::format_string<Args...> format, Args&&... args) {
  throw HttpError(400, fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace tessera::server
