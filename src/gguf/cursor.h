// A bounded little-endian reader over a file's bytes, and checked size
// arithmetic: the one choke point every length and count goes through.
#pragma once

#include <bit>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>

static_assert(std::endian::native == std::endian::little,
              "the GGUF reader assumes a little-endian host");

namespace tessera::gguf::detail {

// Throws Error(kInvalidFile): "[gguf FILE @ 0xOFFSET] WHAT: found X, expected Y".
[[noreturn]] void fail_field(const std::string& file, uint64_t offset, std::string_view what,
                             std::string_view found, std::string_view expected);

// `s` from the file made safe to print: control and non-ASCII bytes become
// \xNN, and long strings are cut with "...".
std::string printable(std::string_view s, size_t max_bytes = 80);

// Checked arithmetic; false on overflow.
inline bool checked_add(uint64_t a, uint64_t b, uint64_t* out) {
  return !__builtin_add_overflow(a, b, out);
}
inline bool checked_mul(uint64_t a, uint64_t b, uint64_t* out) {
  return !__builtin_mul_overflow(a, b, out);
}
// Rounds `n` up to `align` (a power of two).
inline bool checked_pad(uint64_t n, uint64_t align, uint64_t* out) {
  uint64_t bumped;
  if (!checked_add(n, align - 1, &bumped)) return false;
  *out = bumped & ~(align - 1);
  return true;
}

// `what` is a string or a callable returning one; callables build the
// description only when an error is reported.
template <class What>
std::string describe(const What& what) {
  if constexpr (std::is_invocable_v<const What&>) {
    return std::string(what());
  } else {
    return std::string(std::string_view(what));
  }
}

class Cursor {
 public:
  Cursor(std::span<const uint8_t> bytes, const std::string& file) : bytes_(bytes), file_(file) {}

  uint64_t pos() const { return pos_; }
  uint64_t size() const { return bytes_.size(); }
  uint64_t remaining() const { return bytes_.size() - pos_; }
  const uint8_t* data() const { return bytes_.data(); }
  const std::string& file() const { return file_; }

  template <class What>
  void require(uint64_t n, const What& what) const {
    if (n > remaining()) [[unlikely]]
      truncated(describe(what), n);
  }

  template <class T, class What>
  T read(const What& what) {
    static_assert(std::is_trivially_copyable_v<T>);
    require(sizeof(T), what);
    T v;
    std::memcpy(&v, bytes_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }

  // Skips `n` bytes and returns where they start.
  template <class What>
  const uint8_t* take(uint64_t n, const What& what) {
    require(n, what);
    const uint8_t* p = bytes_.data() + pos_;
    pos_ += n;
    return p;
  }

  [[noreturn]] void fail(uint64_t offset, std::string_view what, std::string_view found,
                         std::string_view expected) const {
    fail_field(file_, offset, what, found, expected);
  }

 private:
  [[noreturn]] void truncated(const std::string& what, uint64_t needed) const;

  std::span<const uint8_t> bytes_;
  const std::string& file_;
  uint64_t pos_ = 0;
};

}  // namespace tessera::gguf::detail
