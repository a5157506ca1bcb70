#include "jinja/value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

#include <fmt/format.h>

#include "jinja/strings.h"

namespace tessera::jinja {
namespace {

// Values nest no deeper than this when printed, compared or read from JSON;
// a template can build deeper lists in a loop, and recursion over them must
// not exhaust the stack.
constexpr int kMaxValueDepth = 256;

void check_depth(int depth) {
  if (depth > kMaxValueDepth) {
    throw Failure(fmt::format("found a value nested deeper than {} levels, expected less nesting",
                              kMaxValueDepth));
  }
}

template <class Json>
Value from_json_at(const Json& j, int depth) {
  check_depth(depth);
  switch (j.type()) {
    case nlohmann::json::value_t::null:
      return Value::none();
    case nlohmann::json::value_t::boolean:
      return Value(j.template get<bool>());
    case nlohmann::json::value_t::number_integer:
      return Value(j.template get<int64_t>());
    case nlohmann::json::value_t::number_unsigned: {
      const auto u = j.template get<uint64_t>();
      if (u <= static_cast<uint64_t>(INT64_MAX)) return Value(static_cast<int64_t>(u));
      return Value(static_cast<double>(u));
    }
    case nlohmann::json::value_t::number_float:
      return Value(j.template get<double>());
    case nlohmann::json::value_t::string:
      return Value(j.template get_ref<const std::string&>());
    case nlohmann::json::value_t::array: {
      List items;
      items.reserve(j.size());
      for (const auto& e : j) items.push_back(from_json_at(e, depth + 1));
      return Value(std::move(items));
    }
    case nlohmann::json::value_t::object: {
      std::vector<std::pair<std::string, Value>> entries;
      entries.reserve(j.size());
      for (auto it = j.begin(); it != j.end(); ++it) {
        entries.emplace_back(it.key(), from_json_at(it.value(), depth + 1));
      }
      return make_dict(std::move(entries));
    }
    case nlohmann::json::value_t::binary:
    case nlohmann::json::value_t::discarded:
      break;
  }
  throw Failure("found binary JSON data, expected text, numbers, lists or objects");
}

// Python's repr of a str: single quotes unless the text has ' and no ".
void append_quoted(std::string_view s, std::string& out) {
  const char quote =
      s.find('\'') != std::string_view::npos && s.find('"') == std::string_view::npos ? '"' : '\'';
  out += quote;
  for (const char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (c == quote || c == '\\') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (u < 0x20 || u == 0x7F) {
      out += fmt::format("\\x{:02x}", u);
    } else {
      out += c;
    }
  }
  out += quote;
}

void append_str_at(const Value& v, std::string& out, bool quoted, int depth) {
  check_depth(depth);
  switch (v.type()) {
    case Value::Type::kUndefined:
      return;
    case Value::Type::kNone:
      out += "None";
      return;
    case Value::Type::kBool:
      out += v.as_bool() ? "True" : "False";
      return;
    case Value::Type::kInt:
      out += fmt::format("{}", v.as_int());
      return;
    case Value::Type::kFloat:
      out += format_float(v.as_float());
      return;
    case Value::Type::kString:
      if (quoted) {
        append_quoted(v.as_string(), out);
      } else {
        out += v.as_string();
      }
      return;
    case Value::Type::kList: {
      out += '[';
      bool first = true;
      for (const Value& e : v.as_list()) {
        if (!first) out += ", ";
        first = false;
        append_str_at(e, out, true, depth + 1);
      }
      out += ']';
      return;
    }
    case Value::Type::kDict: {
      if (v.as_dict().is_namespace) out += "<Namespace ";
      out += '{';
      bool first = true;
      for (const auto& [k, e] : v.as_dict().entries()) {
        if (!first) out += ", ";
        first = false;
        append_quoted(k, out);
        out += ": ";
        append_str_at(e, out, true, depth + 1);
      }
      out += '}';
      if (v.as_dict().is_namespace) out += '>';
      return;
    }
    case Value::Type::kCallable:
      out += fmt::format("<function {}>", v.as_callable().name);
      return;
  }
}

void append_json_string(std::string_view s, std::string& out, bool ensure_ascii) {
  out += '"';
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    const auto u = static_cast<unsigned char>(c);
    switch (c) {
      case '"':
        out += "\\\"";
        continue;
      case '\\':
        out += "\\\\";
        continue;
      case '\n':
        out += "\\n";
        continue;
      case '\r':
        out += "\\r";
        continue;
      case '\t':
        out += "\\t";
        continue;
      case '\b':
        out += "\\b";
        continue;
      case '\f':
        out += "\\f";
        continue;
      default:
        break;
    }
    if (u < 0x20) {
      out += fmt::format("\\u{:04x}", u);
    } else if (u >= 0x80 && ensure_ascii) {
      size_t n = 0;
      const char32_t cp = decode_code_point(s, i, n);
      if (cp >= 0x10000) {
        const char32_t v = cp - 0x10000;
        out += fmt::format("\\u{:04x}\\u{:04x}", 0xD800 + (v >> 10), 0xDC00 + (v & 0x3FF));
      } else {
        out += fmt::format("\\u{:04x}", static_cast<uint32_t>(cp));
      }
      i += n - 1;
    } else {
      out += c;
    }
  }
  out += '"';
}

void append_newline_indent(std::string& out, int indent, int level) {
  out += '\n';
  out.append(static_cast<size_t>(indent) * static_cast<size_t>(level), ' ');
}

}  // namespace

const void* Value::identity() const {
  switch (type()) {
    case Type::kString:
      return std::get<5>(v_).get();
    case Type::kList:
      return std::get<6>(v_).get();
    case Type::kDict:
      return std::get<7>(v_).get();
    case Type::kCallable:
      return std::get<8>(v_).get();
    default:
      return nullptr;
  }
}

bool Value::truthy() const {
  switch (type()) {
    case Type::kUndefined:
    case Type::kNone:
      return false;
    case Type::kBool:
      return as_bool();
    case Type::kInt:
      return as_int() != 0;
    case Type::kFloat:
      return as_float() != 0.0;
    case Type::kString:
      return !as_string().empty();
    case Type::kList:
      return !as_list().empty();
    case Type::kDict:
      return as_dict().size() != 0;
    case Type::kCallable:
      return true;
  }
  return false;
}

std::string_view Value::type_name() const {
  static constexpr std::string_view kNames[] = {"undefined", "none", "bool", "int",     "float",
                                                "string",    "list", "dict", "function"};
  return kNames[static_cast<size_t>(type())];
}

const Value* Dict::find(std::string_view key) const {
  if (index_.empty()) {
    for (const auto& [k, v] : entries_) {
      if (k == key) return &v;
    }
    return nullptr;
  }
  const auto it = index_.find(key);
  return it == index_.end() ? nullptr : &entries_[it->second].second;
}

void Dict::set(std::string key, Value value) {
  constexpr size_t kIndexFrom = 16;  // linear search below this size
  if (index_.empty()) {
    for (auto& [k, v] : entries_) {
      if (k == key) {
        v = std::move(value);
        return;
      }
    }
  } else if (const auto it = index_.find(key); it != index_.end()) {
    entries_[it->second].second = std::move(value);
    return;
  }
  entries_.emplace_back(std::move(key), std::move(value));
  if (entries_.size() == kIndexFrom) {
    for (size_t i = 0; i < entries_.size(); ++i) index_.emplace(entries_[i].first, i);
  } else if (!index_.empty()) {
    index_.emplace(entries_.back().first, entries_.size() - 1);
  }
}

Value make_dict(std::vector<std::pair<std::string, Value>> entries, bool is_namespace) {
  auto d = std::make_shared<Dict>();
  d->is_namespace = is_namespace;
  for (auto& [k, v] : entries) d->set(std::move(k), std::move(v));
  return Value(std::move(d));
}

Value from_json(const nlohmann::ordered_json& j) {
  return from_json_at(j, 0);
}
Value from_json(const nlohmann::json& j) {
  return from_json_at(j, 0);
}

std::string to_str(const Value& v) {
  if (v.is_string()) return v.as_string();
  std::string out;
  append_str_at(v, out, false, 0);
  return out;
}

void append_str(const Value& v, std::string& out) {
  append_str_at(v, out, false, 0);
}
void append_repr(const Value& v, std::string& out) {
  append_str_at(v, out, true, 0);
}

std::string format_float(double f) {
  if (std::isnan(f)) return "nan";
  if (std::isinf(f)) return f > 0 ? "inf" : "-inf";
  // Shortest round-trip digits and exponent, then Python's layout (repr):
  // positional for 1e-4 <= |f| < 1e16, scientific otherwise.
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof(buf), f, std::chars_format::scientific);
  const std::string_view sci(buf, static_cast<size_t>(r.ptr - buf));
  const size_t e_pos = sci.find('e');
  std::string mantissa(sci.substr(0, e_pos));
  const int exponent = std::stoi(std::string(sci.substr(e_pos + 1)));
  const bool negative = mantissa[0] == '-';
  if (negative) mantissa.erase(0, 1);
  std::string digits;
  for (const char c : mantissa) {
    if (c != '.') digits += c;
  }
  std::string out = negative ? "-" : "";
  if (exponent < -4 || exponent >= 16) {
    out += digits[0];
    if (digits.size() > 1) {
      out += '.';
      out += digits.substr(1);
    }
    out += fmt::format("e{}{:02d}", exponent < 0 ? '-' : '+', std::abs(exponent));
    return out;
  }
  if (exponent < 0) {
    out += "0.";
    out.append(static_cast<size_t>(-exponent - 1), '0');
    out += digits;
    return out;
  }
  const size_t int_digits = static_cast<size_t>(exponent) + 1;
  if (digits.size() <= int_digits) {
    out += digits;
    out.append(int_digits - digits.size(), '0');
    out += ".0";
  } else {
    out += digits.substr(0, int_digits);
    out += '.';
    out += digits.substr(int_digits);
  }
  return out;
}

void append_json(const Value& v, std::string& out, int indent, bool ensure_ascii, bool sort_keys,
                 int level) {
  check_depth(level);
  switch (v.type()) {
    case Value::Type::kUndefined:
      throw Failure("tojson found an undefined value, expected JSON data");
    case Value::Type::kCallable:
      throw Failure("tojson found a function, expected JSON data");
    case Value::Type::kNone:
      out += "null";
      return;
    case Value::Type::kBool:
      out += v.as_bool() ? "true" : "false";
      return;
    case Value::Type::kInt:
      out += fmt::format("{}", v.as_int());
      return;
    case Value::Type::kFloat: {
      const double f = v.as_float();
      out += std::isnan(f)   ? "NaN"
             : std::isinf(f) ? (f > 0 ? "Infinity" : "-Infinity")
                             : format_float(f);
      return;
    }
    case Value::Type::kString:
      append_json_string(v.as_string(), out, ensure_ascii);
      return;
    case Value::Type::kList: {
      const List& items = v.as_list();
      if (items.empty()) {
        out += "[]";
        return;
      }
      out += '[';
      for (size_t i = 0; i < items.size(); ++i) {
        if (i > 0) out += indent >= 0 ? "," : ", ";
        if (indent >= 0) append_newline_indent(out, indent, level + 1);
        append_json(items[i], out, indent, ensure_ascii, sort_keys, level + 1);
      }
      if (indent >= 0) append_newline_indent(out, indent, level);
      out += ']';
      return;
    }
    case Value::Type::kDict: {
      std::vector<const std::pair<std::string, Value>*> entries;
      for (const auto& e : v.as_dict().entries()) entries.push_back(&e);
      if (entries.empty()) {
        out += "{}";
        return;
      }
      if (sort_keys) {
        std::stable_sort(entries.begin(), entries.end(),
                         [](const auto* a, const auto* b) { return a->first < b->first; });
      }
      out += '{';
      for (size_t i = 0; i < entries.size(); ++i) {
        if (i > 0) out += indent >= 0 ? "," : ", ";
        if (indent >= 0) append_newline_indent(out, indent, level + 1);
        append_json_string(entries[i]->first, out, ensure_ascii);
        out += ": ";
        append_json(entries[i]->second, out, indent, ensure_ascii, sort_keys, level + 1);
      }
      if (indent >= 0) append_newline_indent(out, indent, level);
      out += '}';
      return;
    }
  }
}

namespace {

bool equals_at(const Value& a, const Value& b, int depth) {
  check_depth(depth);
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_float() == b.as_float();
    return a.as_int() == b.as_int();
  }
  if (a.type() != b.type()) return false;
  switch (a.type()) {
    case Value::Type::kUndefined:
    case Value::Type::kNone:
      return true;
    case Value::Type::kString:
      return a.as_string() == b.as_string();
    case Value::Type::kList: {
      const List& x = a.as_list();
      const List& y = b.as_list();
      if (x.size() != y.size()) return false;
      for (size_t i = 0; i < x.size(); ++i) {
        if (!equals_at(x[i], y[i], depth + 1)) return false;
      }
      return true;
    }
    case Value::Type::kDict: {
      const Dict& x = a.as_dict();
      const Dict& y = b.as_dict();
      if (x.size() != y.size()) return false;
      for (const auto& [k, v] : x.entries()) {
        const Value* other = y.find(k);
        if (other == nullptr || !equals_at(v, *other, depth + 1)) return false;
      }
      return true;
    }
    case Value::Type::kCallable:
      return a.identity() == b.identity();
    default:
      return false;
  }
}

int compare_at(const Value& a, const Value& b, int depth) {
  check_depth(depth);
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) {
      const double x = a.as_float();
      const double y = b.as_float();
      return x < y ? -1 : (x > y ? 1 : 0);
    }
    const int64_t x = a.as_int();
    const int64_t y = b.as_int();
    return x < y ? -1 : (x > y ? 1 : 0);
  }
  if (a.is_string() && b.is_string()) {
    const int c = a.as_string().compare(b.as_string());
    return c < 0 ? -1 : (c > 0 ? 1 : 0);
  }
  if (a.is_list() && b.is_list()) {
    const List& x = a.as_list();
    const List& y = b.as_list();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (const int c = compare_at(x[i], y[i], depth + 1); c != 0) return c;
    }
    return x.size() < y.size() ? -1 : (x.size() > y.size() ? 1 : 0);
  }
  throw Failure(fmt::format("found {} compared with {}, expected two numbers, strings or lists",
                            a.type_name(), b.type_name()));
}

}  // namespace

bool equals(const Value& a, const Value& b) {
  return equals_at(a, b, 0);
}
int compare(const Value& a, const Value& b) {
  return compare_at(a, b, 0);
}

}  // namespace tessera::jinja
