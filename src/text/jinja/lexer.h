// Jinja source to tokens: text between tags, tag delimiters, and the
// expression tokens inside tags, with HF's whitespace rules applied to the
// text (trim_blocks, lstrip_blocks, `-` and `+` markers, one trailing
// newline of the source dropped, newlines normalised to "\n").
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tessera::jinja {

struct Loc {
  uint32_t line = 0;    // 1-based
  uint32_t column = 0;  // 1-based, in bytes
};

enum class TokenKind : uint8_t {
  kText,        // text: the output text
  kVarBegin,    // {{
  kVarEnd,      // }}
  kBlockBegin,  // {%
  kBlockEnd,    // %}
  kName,        // text: the identifier
  kString,      // text: the value, escapes resolved
  kInteger,     // integer
  kFloat,       // number
  kOperator,    // text: + - * / // % ** ~ ( ) [ ] { } == != < <= > >= = . : | , ;
  kEnd,         // end of the source
};

struct Token {
  TokenKind kind;
  Loc loc;
  std::string text;
  int64_t integer = 0;
  double number = 0.0;
};

// Throws ChatTemplateError (kInvalidFile) for an unterminated tag, comment or
// string, or a character that cannot start a token. `name` is used in errors.
std::vector<Token> tokenize(std::string_view source, std::string_view name);

// "'}}'", "name 'endfor'", "end of template": a token as errors name it.
std::string describe(const Token& token);

}  // namespace tessera::jinja
