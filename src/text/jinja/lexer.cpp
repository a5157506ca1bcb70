#include "jinja/lexer.h"

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdlib>

#include <fmt/format.h>

#include "jinja/error.h"
#include "jinja/strings.h"
#include "unicode.h"

namespace tessera::jinja {

[[noreturn]] void fail_at(ErrorCategory category, std::string_view name, Loc loc,
                          std::string_view message) {
  throw ChatTemplateError(category,
                          fmt::format("[{} {}:{}] {}", name, loc.line, loc.column, message),
                          loc.line, loc.column);
}

namespace {

constexpr std::array<std::string_view, 6> kTwoCharOperators = {"**", "//", "==", "!=", "<=", ">="};
constexpr std::string_view kOneCharOperators = "+-*/%~()[]{}<>=.:|,;";

bool is_name_start(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}
bool is_digit(char c) {
  return c >= '0' && c <= '9';
}
bool is_name_char(char c) {
  return is_name_start(c) || is_digit(c);
}
bool is_tag_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

// Newlines as "\n", and one trailing newline dropped (Jinja2's
// keep_trailing_newline=False).
std::string normalize(std::string_view source) {
  std::string out;
  out.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      out += '\n';
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      out += source[i];
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

// Only whitespace other than newlines (lstrip_blocks' test).
bool is_blank(std::string_view s) {
  if (s.empty()) return false;
  for (size_t i = 0; i < s.size();) {
    size_t n = 0;
    const char32_t cp = decode_code_point(s, i, n);
    if (cp == '\n' || !is_space(cp)) return false;
    i += n;
  }
  return true;
}

class Lexer {
 public:
  Lexer(std::string_view source, std::string_view name) : src_(normalize(source)), name_(name) {
    line_starts_.push_back(0);
    for (size_t i = 0; i < src_.size(); ++i) {
      if (src_[i] == '\n') line_starts_.push_back(i + 1);
    }
  }

  std::vector<Token> run() {
    size_t pos = 0;
    bool strip_leading = false;
    for (;;) {
      const size_t open = find_open(pos);
      const size_t text_end = open == std::string::npos ? src_.size() : open;
      const bool line_starting = pos == 0 || src_[pos - 1] == '\n';
      std::string_view text(src_.data() + pos, text_end - pos);
      size_t text_pos = pos;
      if (strip_leading) {
        const std::string_view rest = strip(text, std::nullopt, true, false);
        text_pos += text.size() - rest.size();
        text = rest;
      }
      if (open == std::string::npos) {
        emit_text(text, text_pos);
        break;
      }
      const char kind = src_[open + 1];
      const char marker = open + 2 < src_.size() ? src_[open + 2] : '\0';
      if (marker == '-') {
        text = strip(text, std::nullopt, false, true);
      } else if (marker != '+' && kind != '{') {  // lstrip_blocks
        const size_t nl = text.rfind('\n');
        const size_t line = nl == std::string_view::npos ? 0 : nl + 1;
        if ((line > 0 || (line_starting && text_pos == pos)) && is_blank(text.substr(line))) {
          text = text.substr(0, line);
        }
      }
      emit_text(text, text_pos);
      pos = open + 2 + (marker == '-' || marker == '+' ? 1 : 0);
      Close close;
      if (kind == '#') {
        close = skip_comment(open, pos);
      } else if (kind == '%' && is_raw(pos)) {
        close = lex_raw(open, pos);
      } else {
        close = lex_tag(open, pos, kind);
      }
      pos = close.end;
      strip_leading = close.marker == '-';
      if (close.marker == '\0' && kind != '{' && pos < src_.size() && src_[pos] == '\n') {
        ++pos;  // trim_blocks
      }
    }
    tokens_.push_back({TokenKind::kEnd, loc_of(src_.size()), {}});
    return std::move(tokens_);
  }

 private:
  struct Close {
    size_t end;   // just after the closing delimiter
    char marker;  // '-', '+' or '\0' before it
  };

  Loc loc_of(size_t offset) const {
    const auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), offset);
    const size_t line = static_cast<size_t>(it - line_starts_.begin());
    return {static_cast<uint32_t>(line),
            static_cast<uint32_t>(offset - line_starts_[line - 1] + 1)};
  }

  [[noreturn]] void fail(size_t offset, std::string_view message) const {
    fail_parse(name_, loc_of(offset), message);
  }

  size_t find_open(size_t pos) const {
    for (size_t i = src_.find('{', pos); i != std::string::npos; i = src_.find('{', i + 1)) {
      if (i + 1 < src_.size() && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#')) {
        return i;
      }
    }
    return std::string::npos;
  }

  void emit_text(std::string_view text, size_t offset) {
    if (!text.empty()) tokens_.push_back({TokenKind::kText, loc_of(offset), std::string(text)});
  }

  Close skip_comment(size_t open, size_t pos) const {
    const size_t end = src_.find("#}", pos);
    if (end == std::string::npos) fail(open, "found an unterminated comment, expected '#}'");
    const char marker =
        end > pos && (src_[end - 1] == '-' || src_[end - 1] == '+') ? src_[end - 1] : '\0';
    return {end + 2, marker};
  }

  // `{% raw %}`: after the opening delimiter, `\s*raw\s*[-]?%}`.
  bool is_raw(size_t pos) const {
    while (pos < src_.size() && is_tag_space(src_[pos])) ++pos;
    if (src_.compare(pos, 3, "raw") != 0) return false;
    pos += 3;
    while (pos < src_.size() && is_tag_space(src_[pos])) ++pos;
    if (pos < src_.size() && src_[pos] == '-') ++pos;
    return src_.compare(pos, 2, "%}") == 0;
  }

  Close lex_raw(size_t open, size_t pos) {
    const size_t close = src_.find("%}", pos);
    const bool strip_after_open = src_[close - 1] == '-';
    size_t body = close + 2;
    // Find `{%[-+]? *endraw *[-+]?%}`.
    for (size_t at = src_.find("{%", body); at != std::string::npos; at = src_.find("{%", at + 2)) {
      size_t p = at + 2;
      const char open_marker =
          p < src_.size() && (src_[p] == '-' || src_[p] == '+') ? src_[p++] : '\0';
      while (p < src_.size() && is_tag_space(src_[p])) ++p;
      if (src_.compare(p, 6, "endraw") != 0) continue;
      p += 6;
      while (p < src_.size() && is_tag_space(src_[p])) ++p;
      const char close_marker =
          p < src_.size() && (src_[p] == '-' || src_[p] == '+') ? src_[p++] : '\0';
      if (src_.compare(p, 2, "%}") != 0) continue;
      std::string_view text(src_.data() + body, at - body);
      if (strip_after_open) {
        const std::string_view rest = strip(text, std::nullopt, true, false);
        body += text.size() - rest.size();
        text = rest;
      }
      if (open_marker == '-') text = strip(text, std::nullopt, false, true);
      emit_text(text, body);
      return {p + 2, close_marker};
    }
    fail(open, "found an unterminated '{% raw %}' block, expected '{% endraw %}'");
  }

  Close lex_tag(size_t open, size_t pos, char kind) {
    const std::string_view closer = kind == '{' ? "}}" : "%}";
    tokens_.push_back(
        {kind == '{' ? TokenKind::kVarBegin : TokenKind::kBlockBegin, loc_of(open), {}});
    int depth = 0;
    for (;;) {
      while (pos < src_.size() && is_tag_space(src_[pos])) ++pos;
      if (pos >= src_.size()) {
        fail(open, fmt::format("found an unterminated '{{{}' tag, expected '{}'", kind, closer));
      }
      if (depth == 0) {
        const char c = src_[pos];
        if ((c == '-' || c == '+') && src_.compare(pos + 1, 2, closer) == 0) {
          tokens_.push_back(end_token(kind, pos));
          return {pos + 3, c};
        }
        if (src_.compare(pos, 2, closer) == 0) {
          tokens_.push_back(end_token(kind, pos));
          return {pos + 2, '\0'};
        }
      }
      pos = lex_token(pos, depth);
    }
  }

  Token end_token(char kind, size_t pos) const {
    return {kind == '{' ? TokenKind::kVarEnd : TokenKind::kBlockEnd, loc_of(pos), {}};
  }

  size_t lex_token(size_t pos, int& depth) {
    const char c = src_[pos];
    if (is_name_start(c)) {
      size_t end = pos;
      while (end < src_.size() && is_name_char(src_[end])) ++end;
      tokens_.push_back({TokenKind::kName, loc_of(pos), src_.substr(pos, end - pos)});
      return end;
    }
    if (is_digit(c)) return lex_number(pos);
    if (c == '\'' || c == '"') return lex_string(pos);
    for (const std::string_view op : kTwoCharOperators) {
      if (src_.compare(pos, 2, op) == 0) {
        tokens_.push_back({TokenKind::kOperator, loc_of(pos), std::string(op)});
        return pos + 2;
      }
    }
    if (kOneCharOperators.find(c) != std::string_view::npos) {
      if (c == '(' || c == '[' || c == '{') ++depth;
      if ((c == ')' || c == ']' || c == '}') && depth > 0) --depth;
      tokens_.push_back({TokenKind::kOperator, loc_of(pos), std::string(1, c)});
      return pos + 1;
    }
    size_t n = 0;
    decode_code_point(src_, pos, n);
    fail(pos, fmt::format("found '{}' inside a tag, expected a name, number, string or operator",
                          src_.substr(pos, n)));
  }

  size_t digits(size_t pos) const {
    // \d+(_\d+)*
    while (pos < src_.size() &&
           (is_digit(src_[pos]) ||
            (src_[pos] == '_' && pos + 1 < src_.size() && is_digit(src_[pos + 1])))) {
      ++pos;
    }
    return pos;
  }

  size_t lex_number(size_t pos) {
    size_t end = digits(pos);
    bool is_float = false;
    const bool after_dot = !tokens_.empty() && tokens_.back().kind == TokenKind::kOperator &&
                           tokens_.back().text == ".";
    if (!after_dot) {
      if (end + 1 < src_.size() && src_[end] == '.' && is_digit(src_[end + 1])) {
        end = digits(end + 1);
        is_float = true;
      }
      if (end < src_.size() && (src_[end] == 'e' || src_[end] == 'E')) {
        size_t e = end + 1;
        if (e < src_.size() && (src_[e] == '+' || src_[e] == '-')) ++e;
        if (e < src_.size() && is_digit(src_[e])) {
          end = digits(e);
          is_float = true;
        }
      }
    }
    std::string text;
    for (size_t i = pos; i < end; ++i) {
      if (src_[i] != '_') text += src_[i];
    }
    Token t{is_float ? TokenKind::kFloat : TokenKind::kInteger, loc_of(pos), text};
    if (is_float) {
      t.number = std::strtod(text.c_str(), nullptr);
    } else {
      errno = 0;
      const unsigned long long v = std::strtoull(text.c_str(), nullptr, 10);
      if (errno == ERANGE || v > static_cast<unsigned long long>(INT64_MAX)) {
        fail(pos, fmt::format("found integer {}, expected at most {}", text, INT64_MAX));
      }
      t.integer = static_cast<int64_t>(v);
    }
    tokens_.push_back(std::move(t));
    return end;
  }

  static int hex_value(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  }

  // Python string escapes (Jinja2 decodes literals with "unicode-escape").
  size_t lex_string(size_t pos) {
    const char quote = src_[pos];
    std::string value;
    size_t i = pos + 1;
    for (;;) {
      if (i >= src_.size())
        fail(pos, fmt::format("found an unterminated string, expected {}", quote));
      const char c = src_[i];
      if (c == quote) break;
      if (c != '\\' || i + 1 >= src_.size()) {
        value += c;
        ++i;
        continue;
      }
      const char e = src_[i + 1];
      i += 2;
      switch (e) {
        case 'n':
          value += '\n';
          break;
        case 't':
          value += '\t';
          break;
        case 'r':
          value += '\r';
          break;
        case '\\':
          value += '\\';
          break;
        case '\'':
          value += '\'';
          break;
        case '"':
          value += '"';
          break;
        case 'a':
          value += '\a';
          break;
        case 'b':
          value += '\b';
          break;
        case 'f':
          value += '\f';
          break;
        case 'v':
          value += '\v';
          break;
        case '\n':
          break;  // line continuation
        case 'x':
        case 'u':
        case 'U': {
          const size_t width = e == 'x' ? 2 : e == 'u' ? 4 : 8;
          char32_t cp = 0;
          for (size_t k = 0; k < width; ++k) {
            const int h = i + k < src_.size() ? hex_value(src_[i + k]) : -1;
            if (h < 0)
              fail(i - 2,
                   fmt::format("found a truncated \\{} escape, expected {} hex digits", e, width));
            cp = cp * 16 + static_cast<char32_t>(h);
          }
          if (cp > 0x10FFFF) fail(i - 2, "found an escape above U+10FFFF, expected a code point");
          text::append_utf8(value, cp);
          i += width;
          break;
        }
        default:
          if (e >= '0' && e <= '7') {
            char32_t cp = static_cast<char32_t>(e - '0');
            for (int k = 0; k < 2 && i < src_.size() && src_[i] >= '0' && src_[i] <= '7';
                 ++k, ++i) {
              cp = cp * 8 + static_cast<char32_t>(src_[i] - '0');
            }
            text::append_utf8(value, cp);
          } else {
            value += '\\';  // unknown escapes stay as written
            value += e;
          }
      }
    }
    tokens_.push_back({TokenKind::kString, loc_of(pos), std::move(value)});
    return i + 1;
  }

  std::string src_;
  std::string_view name_;
  std::vector<size_t> line_starts_;
  std::vector<Token> tokens_;
};

}  // namespace

std::vector<Token> tokenize(std::string_view source, std::string_view name) {
  return Lexer(source, name).run();
}

std::string describe(const Token& token) {
  switch (token.kind) {
    case TokenKind::kText:
      return "text";
    case TokenKind::kVarBegin:
      return "'{{'";
    case TokenKind::kVarEnd:
      return "'}}'";
    case TokenKind::kBlockBegin:
      return "'{%'";
    case TokenKind::kBlockEnd:
      return "'%}'";
    case TokenKind::kName:
      return fmt::format("name '{}'", token.text);
    case TokenKind::kString:
      return "a string";
    case TokenKind::kInteger:
    case TokenKind::kFloat:
      return fmt::format("number {}", token.text);
    case TokenKind::kOperator:
      return fmt::format("'{}'", token.text);
    case TokenKind::kEnd:
      return "the end of the template";
  }
  return "?";
}

}  // namespace tessera::jinja
