#include "unicode.h"

#include <algorithm>
#include <array>

namespace tessera::text {
namespace {

struct ClassRange {
  char32_t first;
  uint8_t cls;  // UnicodeClass, up to the next range's first
};
struct CodePointMap {
  char32_t from, to;
};
struct NfdRange {
  char32_t first, last, to;
};
#include "unicode_tables.inc"

constexpr bool is_printable_byte(unsigned b) {
  return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

// byte -> code point, built at compile time.
constexpr std::array<char32_t, 256> make_byte_map() {
  std::array<char32_t, 256> map{};
  char32_t next = 0x100;
  for (unsigned b = 0; b < 256; ++b) map[b] = is_printable_byte(b) ? b : next++;
  return map;
}
constexpr std::array<char32_t, 256> kByteMap = make_byte_map();

// The bytes that map above U+00FF, in order: kShifted[cp - 0x100].
constexpr std::array<uint8_t, 68> make_shifted() {
  std::array<uint8_t, 68> shifted{};
  size_t n = 0;
  for (unsigned b = 0; b < 256; ++b) {
    if (!is_printable_byte(b)) shifted[n++] = static_cast<uint8_t>(b);
  }
  return shifted;
}
constexpr std::array<uint8_t, 68> kShifted = make_shifted();

bool is_continuation(unsigned char c) {
  return (c & 0xC0) == 0x80;
}

}  // namespace

size_t utf8_sequence_length(std::string_view s, size_t i) {
  const auto at = [&](size_t k) { return static_cast<unsigned char>(s[i + k]); };
  const unsigned char c = at(0);
  const size_t left = s.size() - i;
  if (c < 0x80) return 1;
  if (c >= 0xC2 && c <= 0xDF) return left >= 2 && is_continuation(at(1)) ? 2 : 0;
  if (c >= 0xE0 && c <= 0xEF) {
    if (left < 3 || !is_continuation(at(1)) || !is_continuation(at(2))) return 0;
    if (c == 0xE0 && at(1) < 0xA0) return 0;   // overlong
    if (c == 0xED && at(1) >= 0xA0) return 0;  // surrogate
    return 3;
  }
  if (c >= 0xF0 && c <= 0xF4) {
    if (left < 4 || !is_continuation(at(1)) || !is_continuation(at(2)) || !is_continuation(at(3))) {
      return 0;
    }
    if (c == 0xF0 && at(1) < 0x90) return 0;   // overlong
    if (c == 0xF4 && at(1) >= 0x90) return 0;  // above U+10FFFF
    return 4;
  }
  return 0;
}

std::string sanitize_utf8(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const size_t n = utf8_sequence_length(s, i);
    if (n == 0) {
      out += "\xEF\xBF\xBD";
      ++i;
    } else {
      out.append(s.substr(i, n));
      i += n;
    }
  }
  return out;
}

std::u32string decode_utf8(std::string_view s) {
  std::u32string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const size_t n = utf8_sequence_length(s, i);
    if (n == 0) {
      out += U'\uFFFD';
      ++i;
      continue;
    }
    const auto b = [&](size_t k) { return static_cast<char32_t>(static_cast<unsigned char>(s[i + k])); };
    char32_t cp = n == 1 ? b(0) : n == 2 ? b(0) & 0x1F : n == 3 ? b(0) & 0x0F : b(0) & 0x07;
    for (size_t k = 1; k < n; ++k) cp = (cp << 6) | (b(k) & 0x3F);
    out += cp;
    i += n;
  }
  return out;
}

UnicodeClass unicode_class(char32_t cp) {
  if (cp > 0x10FFFF) return UnicodeClass::kUndefined;
  const auto it = std::upper_bound(std::begin(kClassRanges), std::end(kClassRanges), cp,
                                   [](char32_t c, const ClassRange& r) { return c < r.first; });
  return static_cast<UnicodeClass>((it - 1)->cls);
}

bool is_unicode_whitespace(char32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F ||
         cp == 0x205F || cp == 0x3000;
}

char32_t unicode_tolower(char32_t cp) {
  if (cp >= 'A' && cp <= 'Z') return cp + ('a' - 'A');
  if (cp < 0x80) return cp;
  const auto it = std::lower_bound(std::begin(kLowercase), std::end(kLowercase), cp,
                                   [](const CodePointMap& m, char32_t c) { return m.from < c; });
  return it != std::end(kLowercase) && it->from == cp ? it->to : cp;
}

char32_t nfd_first(char32_t cp) {
  if (cp < 0xC0) return cp;
  const auto it = std::upper_bound(std::begin(kNfdFirst), std::end(kNfdFirst), cp,
                                   [](char32_t c, const NfdRange& r) { return c < r.first; });
  if (it == std::begin(kNfdFirst)) return cp;
  const NfdRange& r = *(it - 1);
  return cp <= r.last ? r.to : cp;
}

void append_utf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

char32_t byte_to_code_point(uint8_t byte) {
  return kByteMap[byte];
}

int code_point_to_byte(char32_t cp) {
  if (cp < 0x100) return is_printable_byte(cp) ? static_cast<int>(cp) : -1;
  if (cp - 0x100 < kShifted.size()) return kShifted[cp - 0x100];
  return -1;
}

void append_byte_encoded(std::string& out, std::string_view bytes) {
  for (const char c : bytes) append_utf8(out, kByteMap[static_cast<unsigned char>(c)]);
}

void append_byte_decoded(std::string& out, std::string_view text) {
  for (size_t i = 0; i < text.size();) {
    const size_t n = utf8_sequence_length(text, i);
    if (n == 0) {  // not UTF-8: keep the byte as it is
      out += text[i++];
      continue;
    }
    const auto b = [&](size_t k) {
      return static_cast<char32_t>(static_cast<unsigned char>(text[i + k]));
    };
    char32_t cp = 0;
    switch (n) {
      case 1:
        cp = b(0);
        break;
      case 2:
        cp = ((b(0) & 0x1F) << 6) | (b(1) & 0x3F);
        break;
      case 3:
        cp = ((b(0) & 0x0F) << 12) | ((b(1) & 0x3F) << 6) | (b(2) & 0x3F);
        break;
      default:
        cp = ((b(0) & 0x07) << 18) | ((b(1) & 0x3F) << 12) | ((b(2) & 0x3F) << 6) | (b(3) & 0x3F);
    }
    const int byte = code_point_to_byte(cp);
    if (byte >= 0) {
      out += static_cast<char>(byte);
    } else {
      out.append(text.substr(i, n));
    }
    i += n;
  }
}

}  // namespace tessera::text
