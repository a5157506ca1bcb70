// Error reporting for the cursor and the parsing steps.
#include "cursor.h"

#include "tessera/core/error.h"

namespace tessera::gguf::detail {

void fail_field(const std::string& file, uint64_t offset, std::string_view what,
                std::string_view found, std::string_view expected) {
  fail(ErrorCategory::kInvalidFile, "[gguf {} @ {:#x}] {}: found {}, expected {}", file, offset,
       what, found, expected);
}

std::string printable(std::string_view s, size_t max_bytes) {
  std::string out;
  for (size_t i = 0; i < s.size() && i < max_bytes; ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c < 0x7f && c != '\\' && c != '\'') {
      out += static_cast<char>(c);
    } else {
      out += fmt::format("\\x{:02x}", c);
    }
  }
  if (s.size() > max_bytes) out += "...";
  return out;
}

void Cursor::truncated(const std::string& what, uint64_t needed) const {
  fail(pos_, what, fmt::format("{} bytes left", remaining()),
       fmt::format("{} (file truncated)", needed));
}

}  // namespace tessera::gguf::detail
