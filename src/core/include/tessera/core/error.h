// tessera::Error: the one exception type tessera throws at its boundaries.
//
// Messages read "[where] found X, expected Y": `where` names the file, field,
// op or device, so a user can act on the message without a debugger.
// Errors are caught only in tools and the server.
#pragma once

#include <stdexcept>
#include <string>
#include <string_view>

#include <fmt/format.h>

namespace tessera {

enum class ErrorCategory {
  kInvalidArgument,  // a caller passed something wrong (flag, shape, index)
  kInvalidFile,      // a file's bytes break its format (GGUF, tokenizer data)
  kUnsupported,      // valid, but this build or device cannot do it
  kOutOfMemory,      // an allocation failed (names device, bytes asked, bytes free)
  kDevice,           // a device or driver failed
  kIo,               // open/read/map/write failed
  kInternal,         // a broken invariant inside tessera (a bug)
};

std::string_view category_name(ErrorCategory c);

class Error : public std::runtime_error {
 public:
  Error(ErrorCategory category, std::string message)
      : std::runtime_error(std::move(message)), category_(category) {}

  ErrorCategory category() const { return category_; }

 private:
  ErrorCategory category_;
};

// Throws an Error whose message is formatted with fmt.
template <class... Args>
[[noreturn]] void fail(ErrorCategory category, fmt::format_string<Args...> format,
                       Args&&... args) {
  throw Error(category, fmt::format(format, std::forward<Args>(args)...));
}

namespace detail {
[[noreturn]] void check_failed(const char* expr, const char* file, int line,
                               const std::string& message);
}  // namespace detail

}  // namespace tessera

// Always-on invariant check. On failure throws Error(kInternal) naming the
// expression, file and line, plus an optional fmt-formatted message.
// For untrusted input use an explicit `if (...) fail(...)` with a clear message.
#define TESSERA_CHECK(cond, ...)                                                       \
  do {                                                                                 \
    if (!(cond)) [[unlikely]] {                                                        \
      ::tessera::detail::check_failed(#cond, __FILE__, __LINE__,                       \
                                      ::tessera::detail::check_message(__VA_ARGS__));  \
    }                                                                                  \
  } while (0)

// Debug-only variant for hot loops; compiled out when NDEBUG is set.
#ifdef NDEBUG
#define TESSERA_DCHECK(cond, ...) \
  do {                            \
  } while (0)
#else
#define TESSERA_DCHECK(cond, ...) TESSERA_CHECK(cond, __VA_ARGS__)
#endif

namespace tessera::detail {
inline std::string check_message() { return {}; }
template <class... Args>
std::string check_message(fmt::format_string<Args...> format, Args&&... args) {
  return fmt::format(format, std::forward<Args>(args)...);
}
}  // namespace tessera::detail
