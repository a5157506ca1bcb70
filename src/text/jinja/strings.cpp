#include "jinja/strings.h"

#include "unicode.h"

namespace tessera::jinja {

char32_t decode_code_point(std::string_view s, size_t i, size_t& n) {
  n = text::utf8_sequence_length(s, i);
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[i + k]); };
  switch (n) {
    case 1:
      return b(0);
    case 2:
      return (char32_t{b(0)} & 0x1F) << 6 | (b(1) & 0x3F);
    case 3:
      return (char32_t{b(0)} & 0x0F) << 12 | (char32_t{b(1)} & 0x3F) << 6 | (b(2) & 0x3F);
    case 4:
      return (char32_t{b(0)} & 0x07) << 18 | (char32_t{b(1)} & 0x3F) << 12 |
             (char32_t{b(2)} & 0x3F) << 6 | (b(3) & 0x3F);
    default:
      n = 1;  // a stray byte stands for itself
      return b(0);
  }
}

std::vector<size_t> code_point_offsets(std::string_view s) {
  std::vector<size_t> offsets;
  offsets.reserve(s.size() + 1);
  for (size_t i = 0; i < s.size();) {
    offsets.push_back(i);
    size_t n = 0;
    decode_code_point(s, i, n);
    i += n;
  }
  offsets.push_back(s.size());
  return offsets;
}

size_t code_point_count(std::string_view s) {
  size_t count = 0;
  for (size_t i = 0; i < s.size(); ++count) {
    size_t n = 0;
    decode_code_point(s, i, n);
    i += n;
  }
  return count;
}

bool is_space(char32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20) || cp == 0x85 || cp == 0xA0 ||
         cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 ||
         cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

namespace {

bool in_chars(char32_t cp, std::string_view chars) {
  for (size_t i = 0; i < chars.size();) {
    size_t n = 0;
    if (decode_code_point(chars, i, n) == cp) return true;
    i += n;
  }
  return false;
}

bool strippable(char32_t cp, const std::optional<std::string_view>& chars) {
  return chars ? in_chars(cp, *chars) : is_space(cp);
}

}  // namespace

std::string_view strip(std::string_view s, std::optional<std::string_view> chars, bool left,
                       bool right) {
  const std::vector<size_t> offsets = code_point_offsets(s);
  size_t begin = 0;
  size_t end = offsets.size() - 1;  // code point indices
  const auto at = [&](size_t k) {
    size_t n = 0;
    return decode_code_point(s, offsets[k], n);
  };
  if (left) {
    while (begin < end && strippable(at(begin), chars)) ++begin;
  }
  if (right) {
    while (end > begin && strippable(at(end - 1), chars)) --end;
  }
  return s.substr(offsets[begin], offsets[end] - offsets[begin]);
}

std::vector<std::string> split(std::string_view s, std::optional<std::string_view> sep,
                               long long maxsplit, bool from_right) {
  std::vector<std::string> parts;
  if (sep) {
    if (from_right) {
      size_t end = s.size();
      while (maxsplit != 0) {
        const size_t hit =
            end >= sep->size() ? s.rfind(*sep, end - sep->size()) : std::string::npos;
        if (hit == std::string_view::npos) break;
        parts.emplace_back(s.substr(hit + sep->size(), end - hit - sep->size()));
        end = hit;
        if (maxsplit > 0) --maxsplit;
      }
      parts.emplace_back(s.substr(0, end));
      return {parts.rbegin(), parts.rend()};
    }
    size_t pos = 0;
    while (maxsplit != 0) {
      const size_t hit = s.find(*sep, pos);
      if (hit == std::string_view::npos) break;
      parts.emplace_back(s.substr(pos, hit - pos));
      pos = hit + sep->size();
      if (maxsplit > 0) --maxsplit;
    }
    parts.emplace_back(s.substr(pos));
    return parts;
  }
  // Runs of whitespace; no empty parts.
  std::vector<std::pair<size_t, size_t>> words;
  size_t start = std::string_view::npos;
  for (size_t i = 0; i < s.size();) {
    size_t n = 0;
    const bool space = is_space(decode_code_point(s, i, n));
    if (space && start != std::string_view::npos) {
      words.emplace_back(start, i);
      start = std::string_view::npos;
    } else if (!space && start == std::string_view::npos) {
      start = i;
    }
    i += n;
  }
  if (start != std::string_view::npos) words.emplace_back(start, s.size());
  if (maxsplit < 0 || static_cast<size_t>(maxsplit) >= words.size()) {
    for (const auto& [b, e] : words) parts.emplace_back(s.substr(b, e - b));
    return parts;
  }
  const size_t keep = static_cast<size_t>(maxsplit);
  if (from_right) {
    const size_t first = words.size() - keep;
    parts.emplace_back(strip(s.substr(0, words[first - 1].second), std::nullopt, true, false));
    for (size_t k = first; k < words.size(); ++k) {
      parts.emplace_back(s.substr(words[k].first, words[k].second - words[k].first));
    }
    return parts;
  }
  for (size_t k = 0; k < keep; ++k) {
    parts.emplace_back(s.substr(words[k].first, words[k].second - words[k].first));
  }
  parts.emplace_back(strip(s.substr(words[keep].first), std::nullopt, false, true));
  return parts;
}

std::vector<std::string> split_lines(std::string_view s, bool keep_ends) {
  std::vector<std::string> lines;
  size_t start = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '\n' && s[i] != '\r') continue;
    size_t end = i + 1;
    if (s[i] == '\r' && end < s.size() && s[end] == '\n') ++end;
    lines.emplace_back(s.substr(start, (keep_ends ? end : i) - start));
    start = end;
    i = end - 1;
  }
  if (start < s.size()) lines.emplace_back(s.substr(start));
  return lines;
}

std::string replace(std::string_view s, std::string_view from, std::string_view to,
                    long long count) {
  std::string out;
  if (from.empty()) {
    // Python inserts `to` before every code point and at the end.
    const std::vector<size_t> offsets = code_point_offsets(s);
    for (size_t k = 0; k + 1 < offsets.size(); ++k) {
      if (count != 0) {
        out += to;
        if (count > 0) --count;
      }
      out += s.substr(offsets[k], offsets[k + 1] - offsets[k]);
    }
    if (count != 0) out += to;
    return out;
  }
  size_t pos = 0;
  while (count != 0) {
    const size_t hit = s.find(from, pos);
    if (hit == std::string_view::npos) break;
    out += s.substr(pos, hit - pos);
    out += to;
    pos = hit + from.size();
    if (count > 0) --count;
  }
  out += s.substr(pos);
  return out;
}

char32_t upper_of(char32_t c) {
  if (c >= 'a' && c <= 'z') return c - 32;
  if (c < 0x80) return c;
  if (c >= 0xE0 && c <= 0xFE && c != 0xF7) return c - 32;
  if (c == 0xFF) return 0x178;
  if (c >= 0x100 && c <= 0x17F) {
    const bool even_upper = (c <= 0x137) || (c >= 0x14A && c <= 0x177);
    const bool odd_upper = (c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17E);
    if (even_upper && (c & 1)) return c - 1;
    if (odd_upper && !(c & 1)) return c - 1;
    if (c == 0x17F) return 'S';
    return c;
  }
  if (c >= 0x3B1 && c <= 0x3C9) return c == 0x3C2 ? 0x3A3 : c - 32;
  switch (c) {
    case 0x3AC:
      return 0x386;
    case 0x3AD:
      return 0x388;
    case 0x3AE:
      return 0x389;
    case 0x3AF:
      return 0x38A;
    case 0x3CC:
      return 0x38C;
    case 0x3CD:
      return 0x38E;
    case 0x3CE:
      return 0x38F;
    default:
      break;
  }
  if (c >= 0x430 && c <= 0x44F) return c - 32;
  if (c >= 0x450 && c <= 0x45F) return c - 80;
  return c;
}

char32_t lower_of(char32_t c) {
  if (c >= 'A' && c <= 'Z') return c + 32;
  if (c < 0x80) return c;
  if (c >= 0xC0 && c <= 0xDE && c != 0xD7) return c + 32;
  if (c == 0x178) return 0xFF;
  if (c >= 0x100 && c <= 0x17F) {
    const bool even_upper = (c <= 0x137) || (c >= 0x14A && c <= 0x177);
    const bool odd_upper = (c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17E);
    if (even_upper && !(c & 1)) return c + 1;
    if (odd_upper && (c & 1)) return c + 1;
    return c;
  }
  if (c >= 0x391 && c <= 0x3A9 && c != 0x3A2) return c + 32;
  switch (c) {
    case 0x386:
      return 0x3AC;
    case 0x388:
      return 0x3AD;
    case 0x389:
      return 0x3AE;
    case 0x38A:
      return 0x3AF;
    case 0x38C:
      return 0x3CC;
    case 0x38E:
      return 0x3CD;
    case 0x38F:
      return 0x3CE;
    default:
      break;
  }
  if (c >= 0x410 && c <= 0x42F) return c + 32;
  if (c >= 0x400 && c <= 0x40F) return c + 80;
  return c;
}

bool is_cased(char32_t cp) {
  return upper_of(cp) != cp || lower_of(cp) != cp || cp == 0xDF || cp == 0x138 || cp == 0x149;
}

namespace {

template <class Map>
std::string map_code_points(std::string_view s, Map map) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    size_t n = 0;
    const char32_t cp = decode_code_point(s, i, n);
    const char32_t mapped = map(cp);
    if (mapped == cp) {
      out.append(s.substr(i, n));  // keeps stray bytes as they are
    } else {
      text::append_utf8(out, mapped);
    }
    i += n;
  }
  return out;
}

}  // namespace

std::string to_upper(std::string_view s) {
  return map_code_points(s, upper_of);
}
std::string to_lower(std::string_view s) {
  return map_code_points(s, lower_of);
}

std::string to_title(std::string_view s) {
  bool previous_cased = false;
  return map_code_points(s, [&](char32_t cp) {
    const char32_t out = previous_cased ? lower_of(cp) : upper_of(cp);
    previous_cased = is_cased(cp);
    return out;
  });
}

std::string capitalize(std::string_view s) {
  bool first = true;
  return map_code_points(s, [&](char32_t cp) {
    const char32_t out = first ? upper_of(cp) : lower_of(cp);
    first = false;
    return out;
  });
}

}  // namespace tessera::jinja
