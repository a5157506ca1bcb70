// UTF-8 helpers and the GPT-2 byte-level map used by the tokenizers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace tessera::text {

// Bytes in the well-formed UTF-8 sequence starting at s[i] (1..4), or 0 when
// s[i] does not start one (stray continuation, overlong form, surrogate,
// above U+10FFFF, truncated). `i` must be < s.size().
size_t utf8_sequence_length(std::string_view s, size_t i);

// `s` with every byte that is not part of a well-formed sequence replaced by
// U+FFFD, one per byte (llama.cpp's rule for BPE input).
std::string sanitize_utf8(std::string_view s);

void append_utf8(std::string& out, char32_t cp);

// GPT-2's reversible byte -> code point map: printable Latin-1 bytes map to
// themselves, the other 68 bytes to U+0100.. in byte order.
char32_t byte_to_code_point(uint8_t byte);
// The inverse; -1 for code points outside the map.
int code_point_to_byte(char32_t cp);

// Appends the byte-level encoding of `bytes` (each byte as its mapped code point).
void append_byte_encoded(std::string& out, std::string_view bytes);

// Undoes the byte-level encoding of a token's text. Code points outside the
// map (tokens not made by the byte-level converter) are kept as UTF-8.
void append_byte_decoded(std::string& out, std::string_view text);

}  // namespace tessera::text
