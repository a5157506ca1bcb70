// JSON schema to GBNF. Each schema (and each $ref target) becomes a rule;
// the output is compact JSON with optional whitespace (bounded, so a model
// cannot loop on spaces). Keywords that would constrain the output and are
// not implemented are errors naming their JSON pointer.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <optional>
#include <map>
#include <set>

#include <fmt/format.h>

#include "tessera/grammar/grammar.h"

namespace tessera::grammar {
namespace {

using json = nlohmann::ordered_json;

constexpr const char* kPrimitives = R"(ws ::= | " " | "\n" [ \t]{0,20}
json-char ::= [^"\\\x7F\x00-\x1F] | "\\" (["\\/bfnrt] | "u" [0-9a-fA-F]{4})
json-string ::= "\"" json-char* "\"" ws
json-number ::= "-"? ("0" | [1-9] [0-9]{0,15}) ("." [0-9]{1,16})? ([eE] [-+]? [0-9]{1,4})? ws
json-integer ::= "-"? ("0" | [1-9] [0-9]{0,15}) ws
json-boolean ::= ("true" | "false") ws
json-null ::= "null" ws
json-value ::= json-object | json-array | json-string | json-number | json-boolean | json-null
json-object ::= "{" ws (json-string ":" ws json-value ("," ws json-string ":" ws json-value)*)? "}" ws
json-array ::= "[" ws (json-value ("," ws json-value)*)? "]" ws
json-date ::= [0-9]{4} "-" (json-month31 "-" json-day31 | json-month30 "-" json-day30 | "02-" json-day28) | json-leap-year "-02-29"
json-month31 ::= "0" [13578] | "1" [02]
json-month30 ::= "0" [469] | "11"
json-day31 ::= "0" [1-9] | [12] [0-9] | "3" [01]
json-day30 ::= "0" [1-9] | [12] [0-9] | "30"
json-day28 ::= "0" [1-9] | "1" [0-9] | "2" [0-8]
json-leap-year ::= [0-9] [0-9] ([02468] [48] | [13579] [26] | [2468] "0") | ([02468] [048] | [13579] [26]) "00"
json-time ::= ([01] [0-9] | "2" [0-3]) ":" [0-5] [0-9] ":" [0-5] [0-9] ("." [0-9]{1,6})? ("Z" | [+-] ([01] [0-9] | "2" [0-3]) ":" [0-5] [0-9])
json-uuid ::= [0-9a-fA-F]{8} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{12}
)";

// Keywords that only describe.
const std::set<std::string> kNotes = {"title", "description", "$schema", "$id", "$comment",
                                      "examples", "default", "deprecated", "readOnly", "writeOnly"};

std::string literal(const std::string& text) {
  std::string out = "\"";
  for (unsigned char c : text) {
    if (c == '"' || c == '\\') out += '\\', out += static_cast<char>(c);
    else if (c == '\n') out += "\\n";
    else if (c == '\r') out += "\\r";
    else if (c == '\t') out += "\\t";
    else if (c < 0x20 || c == 0x7F) out += fmt::format("\\x{:02X}", c);
    else out += static_cast<char>(c);
  }
  return out + "\"";
}

std::string nines(size_t n) { return std::string(n, '9'); }

// Decimal strings of equal length, lo <= hi, as GBNF.
std::string same_length(const std::string& lo, const std::string& hi) {
  if (lo.empty()) return "";
  if (lo[0] == hi[0]) {
    const std::string rest = same_length(lo.substr(1), hi.substr(1));
    return literal(lo.substr(0, 1)) + (rest.empty() ? "" : " " + rest);
  }
  const size_t n = lo.size() - 1;
  const bool lo_floor = lo.substr(1) == std::string(n, '0');
  const bool hi_ceil = hi.substr(1) == nines(n);
  auto tail = [&](size_t k) { return k == 0 ? std::string() : fmt::format(" [0-9]{{{}}}", k); };
  std::vector<std::string> parts;
  char from = lo[0], to = hi[0];
  if (!lo_floor) {
    parts.push_back(literal(lo.substr(0, 1)) + " " + same_length(lo.substr(1), nines(n)));
    ++from;
  }
  if (!hi_ceil) --to;
  if (from <= to) parts.push_back(fmt::format("[{}-{}]", from, to) + tail(n));
  if (!hi_ceil) parts.push_back(literal(hi.substr(0, 1)) + " " + same_length(std::string(n, '0'), hi.substr(1)));
  std::string out = "(";
  for (size_t i = 0; i < parts.size(); ++i) out += (i ? " | " : "") + parts[i];
  return out + ")";
}

// Non-negative integers in [lo, hi] (hi < 0: no upper bound), no leading zeros.
std::string non_negative(int64_t lo, int64_t hi) {
  const std::string a = std::to_string(lo);
  std::vector<std::string> parts;
  const size_t max_len = hi < 0 ? 18 : std::to_string(hi).size();
  for (size_t d = a.size(); d <= max_len; ++d) {
    const std::string low = d == a.size() ? a : "1" + std::string(d - 1, '0');
    const std::string high = hi >= 0 && d == max_len ? std::to_string(hi) : nines(d);
    parts.push_back(same_length(low, high));
  }
  if (hi < 0) parts.push_back("[1-9] [0-9]{18,}");
  std::string out = "(";
  for (size_t i = 0; i < parts.size(); ++i) out += (i ? " | " : "") + parts[i];
  return out + ")";
}

// Integers in [lo, hi]; either bound may be absent.
std::string integer_range(std::optional<int64_t> lo, std::optional<int64_t> hi) {
  std::vector<std::string> parts;
  const int64_t kBig = int64_t{1} << 62;
  const int64_t l = lo.value_or(-kBig), h = hi.value_or(kBig);
  if (l < 0) {  // negatives: "-" and magnitudes [max(1, -h), -l]
    const int64_t mag_lo = std::max<int64_t>(1, h < 0 ? -h : 1);
    parts.push_back("\"-\" " + non_negative(mag_lo, lo ? -l : -1));
  }
  if (h >= 0) parts.push_back(non_negative(std::max<int64_t>(l, 0), hi ? h : -1));
  std::string out = "(";
  for (size_t i = 0; i < parts.size(); ++i) out += (i ? " | " : "") + parts[i];
  return out + ")";
}

class Converter {
 public:
  explicit Converter(const json& root) : root_(root) {}

  std::string run() {
    const std::string top = visit(root_, "", "root");
    std::string out = fmt::format("root ::= ws {}\n", top);
    for (const auto& [name, body] : rules_) out += fmt::format("{} ::= {}\n", name, body);
    return out + kPrimitives;
  }

 private:
  [[noreturn]] static void unsupported(const std::string& at, const std::string& what) {
    fail(ErrorCategory::kInvalidArgument, "[json schema] at '{}': {}", at.empty() ? "/" : at, what);
  }

  // A count keyword (minLength, maxItems, ...): absent gives `dflt`; otherwise a whole number no larger
  // than `cap` (a float such as 3e29 must not reach an integer conversion).
  static int64_t count(const json& s, const char* key, int64_t dflt, int64_t cap, const std::string& at) {
    if (!s.contains(key)) return dflt;
    const json& v = s[key];
    if (!v.is_number()) unsupported(at + "/" + key, "expected a whole number");
    const double d = v.get<double>();
    if (!(d >= 0 && d <= static_cast<double>(cap)) || d != std::floor(d)) {
      unsupported(at + "/" + key, fmt::format("expected a whole number from 0 to {}", cap));
    }
    return static_cast<int64_t>(d);
  }

  static std::string escape_pointer(const std::string& key) {
    std::string out;
    for (char c : key) out += c == '~' ? "~0" : c == '/' ? "~1" : std::string(1, c);
    return out;
  }

  std::string add_rule(const std::string& hint, const std::string& body) {
    std::string base;
    for (char c : hint) base += std::isalnum(static_cast<unsigned char>(c)) ? c : '-';
    if (base.size() > 64) base.resize(64);  // names come from property names, which may be long
    // Names the grammar keeps for itself (root, ws, the json-* primitives,
    // wrap-*) get a prefix: numbering such a base would never leave its prefix.
    if (base.empty()) {
      base = "schema";
    } else if (base == "root" || base == "ws" || base.starts_with("json-") || base.starts_with("wrap-")) {
      base = "schema-" + base;
    }
    // The next free number per base: a search from 2 each time would make
    // n rules of one base cost n^2.
    int& i = next_number_[base];
    std::string name = i == 0 ? base : fmt::format("{}-{}", base, i);
    while (rules_.contains(name)) name = fmt::format("{}-{}", base, i = std::max(i + 1, 2));
    if (i == 0) i = 2;
    rules_[name] = body;
    return name;
  }

  const json& resolve(const std::string& ref, const std::string& at) {
    if (!ref.starts_with("#")) unsupported(at + "/$ref", "only local references (#/...) are supported");
    const json* node = &root_;
    std::string path = ref.substr(1);
    size_t pos = 0;
    while (pos < path.size()) {
      if (path[pos] != '/') unsupported(at + "/$ref", "a malformed JSON pointer: " + ref);
      const size_t next = path.find('/', pos + 1);
      std::string key = path.substr(pos + 1, next == std::string::npos ? std::string::npos : next - pos - 1);
      for (size_t i; (i = key.find("~1")) != std::string::npos;) key.replace(i, 2, "/");
      for (size_t i; (i = key.find("~0")) != std::string::npos;) key.replace(i, 2, "~");
      if (!node->is_object() || !node->contains(key)) unsupported(at + "/$ref", "no target for " + ref);
      node = &(*node)[key];
      pos = next == std::string::npos ? path.size() : next;
    }
    return *node;
  }

  // The GBNF expression for `s` at JSON pointer `at`.
  std::string visit(const json& s, const std::string& at, const std::string& hint) {
    // The body's JSON nests 64 deep at most, but a chain of $refs (or a
    // schema given as a string) nests as deep as it likes.
    struct Deeper {
      size_t& depth;
      explicit Deeper(size_t& d) : depth(++d) {}
      ~Deeper() { --depth; }
    } deeper(depth_);
    if (depth_ > kMaxDepth) {
      unsupported(at, fmt::format("schemas nest deeper than {} levels, $ref chains counted", kMaxDepth));
    }
    if (s.is_boolean()) {
      if (!s.get<bool>()) unsupported(at, "the schema 'false' matches nothing");
      return "json-value";
    }
    if (!s.is_object()) unsupported(at, "a schema must be an object or a boolean");
    for (const auto& [key, _] : s.items()) {
      static const std::set<std::string> kKnown = {
          "type", "properties", "required", "additionalProperties", "items", "prefixItems",
          "minItems", "maxItems", "enum", "const", "anyOf", "oneOf", "allOf", "$ref", "$defs",
          "definitions", "minLength", "maxLength", "format", "minimum", "maximum",
          "exclusiveMinimum", "exclusiveMaximum"};
      if (!kKnown.contains(key) && !kNotes.contains(key)) {
        unsupported(at + "/" + escape_pointer(key), fmt::format("'{}' is not supported", key));
      }
    }
    if (s.contains("$ref")) {
      const std::string ref = s["$ref"].get<std::string>();
      if (const auto it = refs_.find(ref); it != refs_.end()) return it->second;
      const std::string name = add_rule(ref.substr(ref.rfind('/') + 1), "json-value");
      refs_[ref] = name;  // before visiting: a recursive schema refers to itself
      rules_[name] = visit(resolve(ref, at), ref.substr(1), name);
      return name;
    }
    if (s.contains("const")) return literal(s["const"].dump()) + " ws";
    if (s.contains("enum")) {
      if (!s["enum"].is_array() || s["enum"].empty()) unsupported(at + "/enum", "expected a non-empty array");
      std::string out = "(";
      for (size_t i = 0; i < s["enum"].size(); ++i) out += (i ? " | " : "") + literal(s["enum"][i].dump());
      return out + ") ws";
    }
    for (const char* key : {"anyOf", "oneOf"}) {
      if (!s.contains(key)) continue;
      const json& alts = s[key];
      if (!alts.is_array() || alts.empty()) unsupported(at + "/" + key, "expected a non-empty array");
      std::string out = "(";
      for (size_t i = 0; i < alts.size(); ++i) {
        out += (i ? " | " : "") + visit(alts[i], fmt::format("{}/{}/{}", at, key, i), hint);
      }
      return add_rule(hint, out + ")");
    }
    if (s.contains("allOf")) return visit(merge_all_of(s, at), at, hint);
    if (s.contains("type") && s["type"].is_array()) {
      std::string out = "(";
      for (size_t i = 0; i < s["type"].size(); ++i) {
        json one = s;
        one["type"] = s["type"][i];
        if (one["type"] != "integer") {  // bounds belong to the integer branch
          for (const char* key : {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"}) one.erase(key);
        }
        out += (i ? " | " : "") + visit(one, at, hint);
      }
      return add_rule(hint, out + ")");
    }
    const std::string type = s.contains("type") ? s["type"].get<std::string>()
                             : s.contains("properties") ? "object"
                             : s.contains("items") || s.contains("prefixItems") ? "array"
                                                                                 : "";
    if (type != "integer") {
      for (const char* key : {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"}) {
        if (s.contains(key)) unsupported(at + "/" + key, fmt::format("'{}' is supported on integers only", key));
      }
    }
    if (type == "string") return string_rule(s, at, hint);
    if (type == "integer") return integer_rule(s, at, hint);
    if (type == "number") return "json-number";
    if (type == "boolean") return "json-boolean";
    if (type == "null") return "json-null";
    if (type == "object") return object_rule(s, at, hint);
    if (type == "array") return array_rule(s, at, hint);
    if (type.empty()) return "json-value";
    unsupported(at + "/type", fmt::format("unknown type '{}'", type));
  }

  static void absorb(json& merged, const json& p) {
    const json props = p.value("properties", json::object());
    for (const auto& [k, v] : props.items()) merged["properties"][k] = v;
    const json required = p.value("required", json::array());
    for (const auto& r : required) merged["required"].push_back(r);
    if (p.contains("additionalProperties")) merged["additionalProperties"] = p["additionalProperties"];
  }

  json merge_all_of(const json& s, const std::string& at) {
    json merged = {{"type", "object"}, {"properties", json::object()}, {"required", json::array()}};
    const json& parts = s["allOf"];
    if (!parts.is_array()) unsupported(at + "/allOf", "expected an array");
    for (size_t i = 0; i < parts.size(); ++i) {
      const std::string where = fmt::format("{}/allOf/{}", at, i);
      if (!parts[i].is_object()) unsupported(where, "allOf is supported for object schemas only");
      const json& p = parts[i].contains("$ref") ? resolve(parts[i]["$ref"], where) : parts[i];
      if (!p.is_object() || p.value("type", "object") != "object") {
        unsupported(where, "allOf is supported for object schemas only");
      }
      absorb(merged, p);
    }
    absorb(merged, s);  // properties beside allOf count too
    return merged;
  }

  std::string string_rule(const json& s, const std::string& at, const std::string& hint) {
    if (s.contains("format")) {
      const std::string f = s["format"].get<std::string>();
      const std::map<std::string, std::string> formats = {
          {"date", "json-date"}, {"time", "json-time"}, {"date-time", "json-date \"T\" json-time"},
          {"uuid", "json-uuid"}};
      const auto it = formats.find(f);
      if (it == formats.end()) unsupported(at + "/format", fmt::format("format '{}' is not supported", f));
      return "\"\\\"\" " + it->second + " \"\\\"\" ws";
    }
    const int64_t lo = count(s, "minLength", 0, 4096, at);
    const int64_t hi = count(s, "maxLength", -1, 4096, at);
    if (hi >= 0 && hi < lo) {
      unsupported(at + "/maxLength", "lengths must satisfy 0 <= minLength <= maxLength <= 4096");
    }
    if (lo == 0 && hi < 0) return "json-string";
    const std::string count = hi < 0 ? fmt::format("{{{},}}", lo) : fmt::format("{{{},{}}}", lo, hi);
    return add_rule(hint, "\"\\\"\" json-char" + count + " \"\\\"\" ws");
  }

  std::string integer_rule(const json& s, const std::string& at, const std::string& hint) {
    std::optional<int64_t> lo, hi;
    auto bound = [&](const char* key, int64_t adjust, std::optional<int64_t>& out, bool lower) {
      if (!s.contains(key)) return;
      const json& v = s[key];
      if (!v.is_number()) unsupported(at + "/" + key, "expected a number");
      const double d = v.get<double>();
      if (std::abs(d) > 1e18) unsupported(at + "/" + key, "integer bounds beyond +-10^18 are not supported");
      int64_t b = static_cast<int64_t>(lower ? std::ceil(d) : std::floor(d)) + adjust;
      if (v.is_number_float() && adjust != 0 && d != std::floor(d)) b -= adjust;  // 2.5 exclusive -> 3 / 2
      out = out ? (lower ? std::max(*out, b) : std::min(*out, b)) : b;
    };
    bound("minimum", 0, lo, true);
    bound("exclusiveMinimum", 1, lo, true);
    bound("maximum", 0, hi, false);
    bound("exclusiveMaximum", -1, hi, false);
    if (!lo && !hi) return "json-integer";
    if (lo && hi && *lo > *hi) unsupported(at, "the integer range is empty");
    return add_rule(hint, integer_range(lo, hi) + " ws");
  }

  std::string object_rule(const json& s, const std::string& at, const std::string& hint) {
    const json props = s.value("properties", json::object());
    const json additional = s.value("additionalProperties", json());
    if (props.empty() && !s.contains("additionalProperties")) return "json-object";
    std::set<std::string> required;
    for (const auto& r : s.value("required", json::array())) required.insert(r.get<std::string>());
    for (const auto& r : required) {
      if (!props.contains(r)) unsupported(at + "/required", fmt::format("'{}' is required but not in properties", r));
    }
    std::vector<std::string> req, opt;
    for (const auto& [k, v] : props.items()) {
      const std::string kv = literal("\"" + k + "\"") + " ws \":\" ws " +
                             visit(v, at + "/properties/" + escape_pointer(k), hint + "-" + k);
      (required.contains(k) ? req : opt).push_back(kv);
    }
    std::string extra;
    if (!additional.is_null() && !(additional.is_boolean() && !additional.get<bool>())) {
      extra = "json-string \":\" ws " + visit(additional, at + "/additionalProperties", hint + "-value");
    }
    // Required properties in order, then any subset of the optional ones in
    // order, then any number of others. Two rules per optional property
    // keep the grammar linear (spelling out which may come first costs n^2/2
    // copies), and one comma before the choice of the next keeps the
    // matcher's stacks at about n, not 3n (one per property and whitespace):
    //   start_k ::= o_k rest_{k+1} | start_{k+1}      o_k or a later one first
    //   rest_k  ::= "," ws start_k |                   after one: more, or none
    // and past the last, the others: start ::= E rest, rest ::= "," ws start |.
    std::string start, rest;
    if (!extra.empty()) {
      const std::string s_name = add_rule(hint + "-start", "");
      rest = add_rule(hint + "-rest", "\",\" ws " + s_name + " | \"\"");
      rules_[s_name] = extra + " " + rest;
      start = s_name;
    }
    for (size_t k = opt.size(); k-- > 0;) {
      const std::string s_name = add_rule(hint + "-start", "");
      rules_[s_name] = opt[k] + (rest.empty() ? "" : " " + rest) + (start.empty() ? "" : " | " + start);
      rest = add_rule(hint + "-rest", "\",\" ws " + s_name + " | \"\"");
      start = s_name;
    }
    std::string body = "\"{\" ws ";
    if (!req.empty()) {
      body += req[0];
      for (size_t i = 1; i < req.size(); ++i) body += " \",\" ws " + req[i];
      if (!rest.empty()) body += " " + rest;
    } else if (!start.empty()) {
      body += "(" + start + ")?";
    }
    return add_rule(hint, body + " \"}\" ws");
  }

  std::string array_rule(const json& s, const std::string& at, const std::string& hint) {
    std::vector<std::string> prefix;
    if (s.contains("prefixItems")) {
      if (!s["prefixItems"].is_array()) unsupported(at + "/prefixItems", "expected an array");
      for (size_t i = 0; i < s["prefixItems"].size(); ++i) {
        prefix.push_back(visit(s["prefixItems"][i], fmt::format("{}/prefixItems/{}", at, i),
                               fmt::format("{}-{}", hint, i)));
      }
    }
    std::string item;
    if (s.contains("items")) {
      if (!(s["items"].is_boolean() && !s["items"].get<bool>())) {
        item = visit(s["items"], at + "/items", hint + "-item");
      }
    } else if (prefix.empty()) {
      item = "json-value";
    }
    const int64_t lo = count(s, "minItems", 0, 1024, at);
    const int64_t hi = count(s, "maxItems", -1, 1024, at);
    if (hi >= 0 && hi < lo) {
      unsupported(at + "/maxItems", "counts must satisfy 0 <= minItems <= maxItems <= 1024");
    }
    if (!prefix.empty()) {
      const auto n = static_cast<int64_t>(prefix.size());
      if (hi >= 0 && hi < n) unsupported(at + "/maxItems", "fewer items than prefixItems lists");
      if (lo > n && item.empty()) unsupported(at + "/minItems", "more items than prefixItems allow");
      std::string body = "\"[\" ws " + prefix[0];
      for (size_t i = 1; i < prefix.size(); ++i) body += " \",\" ws " + prefix[i];
      if (!item.empty()) {  // then lo - n .. hi - n more
        const int64_t more_lo = std::max<int64_t>(lo - n, 0);
        const std::string count = hi < 0 ? fmt::format("{{{},}}", more_lo) : fmt::format("{{{},{}}}", more_lo, hi - n);
        if (hi < 0 || hi > n) body += " (\",\" ws " + item + ")" + count;
      }
      return add_rule(hint, body + " \"]\" ws");
    }
    if (item.empty()) return add_rule(hint, "\"[\" ws \"]\" ws");
    std::string list;  // lo..hi items, comma-separated
    if (lo == 0) {
      const std::string more = hi < 0 ? "*" : hi <= 1 ? "" : fmt::format("{{0,{}}}", hi - 1);
      list = hi == 0 ? "" : "(" + item + (hi == 1 ? "" : " (\",\" ws " + item + ")" + more) + ")?";
    } else {
      const std::string more = hi < 0 ? fmt::format("{{{},}}", lo - 1) : fmt::format("{{{},{}}}", lo - 1, hi - 1);
      list = item + " (\",\" ws " + item + ")" + more;
    }
    return add_rule(hint, "\"[\" ws " + list + " \"]\" ws");
  }

  static constexpr size_t kMaxDepth = 128;
  const json& root_;
  std::map<std::string, std::string> rules_;
  std::map<std::string, std::string> refs_;
  std::map<std::string, int> next_number_;
  size_t depth_ = 0;
};

}  // namespace

std::string json_schema_to_grammar(const nlohmann::ordered_json& schema) {
  try {
    return Converter(schema).run();
  } catch (const nlohmann::json::exception& e) {  // a keyword's value of the wrong type
    fail(ErrorCategory::kInvalidArgument, "[json schema] a keyword has a value of the wrong type: {}", e.what());
  }
}

std::string json_schema_to_grammar(const nlohmann::json& schema) {
  return Converter(nlohmann::ordered_json(schema)).run();
}

std::string json_grammar() { return Converter(json{{"type", "object"}}).run(); }

std::optional<std::string> request_grammar(const nlohmann::ordered_json& o) {
  auto present = [&](const char* key) -> const json* {
    const auto it = o.find(key);
    return it != o.end() && !it->is_null() ? &*it : nullptr;
  };
  auto bad = [](const std::string& what) -> void { fail(ErrorCategory::kInvalidArgument, "{}", what); };
  const json* grammar = present("grammar");
  const json* schema = present("json_schema");
  if (const json* format = present("response_format")) {
    const json* type = format->is_object() ? &(*format)["type"] : nullptr;
    if (type == nullptr || !type->is_string()) bad("'response_format' must be an object with a 'type'");
    const std::string t = type->get<std::string>();
    const json* inner = nullptr;
    if (t == "json_object") {
      if (format->contains("schema") && !(*format)["schema"].is_null()) inner = &(*format)["schema"];
      else if (schema == nullptr && grammar == nullptr) return json_grammar();
    } else if (t == "json_schema") {
      if (!format->contains("json_schema") || !(*format)["json_schema"].is_object() ||
          !(*format)["json_schema"].contains("schema")) {
        bad("'response_format': type json_schema needs 'json_schema': {\"schema\": ...}");
      }
      inner = &(*format)["json_schema"]["schema"];
    } else if (t != "text") {
      bad(fmt::format("'response_format': type '{}' is not one of text, json_object, json_schema", t));
    }
    if (inner != nullptr) {
      if (schema != nullptr) bad("give either 'json_schema' or 'response_format', not both");
      schema = inner;
    }
  }
  if (grammar != nullptr && schema != nullptr) bad("give either 'grammar' or a JSON schema, not both");
  if (grammar != nullptr) {
    if (!grammar->is_string()) bad("'grammar' must be a string (GBNF)");
    return grammar->get<std::string>();
  }
  if (schema == nullptr) return std::nullopt;
  try {
    return json_schema_to_grammar(*schema);
  } catch (const Error& e) {
    bad(fmt::format("'json_schema': {}", e.what()));
  }
  return std::nullopt;
}

}  // namespace tessera::grammar
