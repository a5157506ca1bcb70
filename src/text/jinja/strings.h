// Python's str methods over UTF-8: templates index, slice, strip and case
// strings by code point, as Python does. Bytes that are not well-formed
// UTF-8 count as one code point each and are kept as they are.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tessera::jinja {

// The code point at s[i] and its length in bytes (`n`, >= 1).
char32_t decode_code_point(std::string_view s, size_t i, size_t& n);
// Byte offset of each code point, plus s.size() at the end.
std::vector<size_t> code_point_offsets(std::string_view s);
size_t code_point_count(std::string_view s);

// str.isspace() for one code point.
bool is_space(char32_t cp);

// str.strip / lstrip / rstrip; `chars` empty: whitespace.
std::string_view strip(std::string_view s, std::optional<std::string_view> chars, bool left,
                       bool right);
// str.split(sep, maxsplit) / str.rsplit; no sep: runs of whitespace.
std::vector<std::string> split(std::string_view s, std::optional<std::string_view> sep,
                               long long maxsplit, bool from_right);
std::vector<std::string> split_lines(std::string_view s, bool keep_ends);
// str.replace(old, new, count); count < 0 replaces all.
std::string replace(std::string_view s, std::string_view from, std::string_view to,
                    long long count);

// Case mapping for ASCII, Latin-1, Latin Extended-A, Greek and Cyrillic.
std::string to_upper(std::string_view s);
std::string to_lower(std::string_view s);
std::string to_title(std::string_view s);    // str.title()
std::string capitalize(std::string_view s);  // str.capitalize()
bool is_cased(char32_t cp);
char32_t upper_of(char32_t cp);
char32_t lower_of(char32_t cp);

}  // namespace tessera::jinja
