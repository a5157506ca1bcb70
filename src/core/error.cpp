#include "tessera/core/error.h"

namespace tessera {

std::string_view category_name(ErrorCategory c) {
  switch (c) {
    case ErrorCategory::kInvalidArgument: return "invalid argument";
    case ErrorCategory::kInvalidFile: return "invalid file";
    case ErrorCategory::kUnsupported: return "unsupported";
    case ErrorCategory::kOutOfMemory: return "out of memory";
    case ErrorCategory::kDevice: return "device error";
    case ErrorCategory::kIo: return "i/o error";
    case ErrorCategory::kInternal: return "internal error";
  }
  return "error";
}

namespace detail {
void check_failed(const char* expr, const char* file, int line, const std::string& message) {
  throw Error(ErrorCategory::kInternal,
              fmt::format("[{}:{}] check failed: {}{}{}", file, line, expr,
                          message.empty() ? "" : ": ", message));
}
}  // namespace detail

}  // namespace tessera
