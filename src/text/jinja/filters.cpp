// Filters (Jinja2's built-ins as HF configures them: tojson without HTML
// escaping, with ensure_ascii, indent and sort_keys).
#include <algorithm>
#include <cmath>
#include <unordered_map>

#include <fmt/format.h>

#include "jinja/builtin_util.h"
#include "jinja/interpreter.h"
#include "jinja/strings.h"

namespace tessera::jinja {
namespace {

using FilterFn = Value (*)(Interpreter&, const Value&, const Args&);

// A list's items, a dict's keys, a string's characters; undefined is empty.
List items_of(Interpreter& in, const Value& v, std::string_view what) {
  switch (v.type()) {
    case Value::Type::kUndefined:
      return {};
    case Value::Type::kList:
      in.step(v.as_list().size());
      return v.as_list();
    case Value::Type::kDict: {
      List keys;
      for (const auto& [k, e] : v.as_dict().entries()) keys.emplace_back(k);
      in.step(keys.size());
      return keys;
    }
    case Value::Type::kString: {
      List chars;
      const std::string& s = v.as_string();
      const std::vector<size_t> offsets = code_point_offsets(s);
      for (size_t i = 0; i + 1 < offsets.size(); ++i) {
        chars.emplace_back(s.substr(offsets[i], offsets[i + 1] - offsets[i]));
      }
      in.step(chars.size());
      return chars;
    }
    default:
      throw Failure(
          fmt::format("found {} for {}, expected a list, dict or string", v.type_name(), what));
  }
}

// "a.b.0": attribute a, then b, then item 0 (Jinja2's make_attrgetter).
Value attribute_path(const Value& v, std::string_view path) {
  Value cur = v;
  size_t pos = 0;
  for (;;) {
    const size_t dot = path.find('.', pos);
    const std::string_view part = path.substr(pos, dot == std::string_view::npos ? dot : dot - pos);
    if (cur.is_dict()) {
      const Value* next = cur.as_dict().find(part);
      cur = next != nullptr ? *next : Value();
    } else if (cur.is_list() && !part.empty() && std::all_of(part.begin(), part.end(), ::isdigit)) {
      const size_t i = std::stoul(std::string(part));
      cur = i < cur.as_list().size() ? cur.as_list()[i] : Value();
    } else {
      cur = Value();
    }
    if (dot == std::string_view::npos) return cur;
    pos = dot + 1;
  }
}

Args rest_args(const Args& args, size_t from) {
  Args rest;
  for (size_t i = from; i < args.positional.size(); ++i)
    rest.positional.push_back(args.positional[i]);
  rest.keyword = args.keyword;
  return rest;
}

// ---- filters ------------------------------------------------------------------------------

Value f_trim(Interpreter&, const Value& v, const Args& args) {
  args.check("trim", 1, {"chars"});
  const Value* chars = args.get(0, "chars");
  const std::string s = to_str(v);
  std::optional<std::string_view> set;
  if (chars != nullptr && !chars->is_none()) set = need_string(*chars, "trim's chars");
  return Value(strip(s, set, true, true));
}

Value f_length(Interpreter&, const Value& v, const Args&) {
  switch (v.type()) {
    case Value::Type::kUndefined:
      return Value(0);
    case Value::Type::kString:
      return Value(static_cast<int64_t>(code_point_count(v.as_string())));
    case Value::Type::kList:
      return Value(static_cast<int64_t>(v.as_list().size()));
    case Value::Type::kDict:
      return Value(static_cast<int64_t>(v.as_dict().size()));
    default:
      throw Failure(
          fmt::format("found {} for length, expected a string, list or dict", v.type_name()));
  }
}

Value f_upper(Interpreter&, const Value& v, const Args&) {
  return Value(to_upper(to_str(v)));
}
Value f_lower(Interpreter&, const Value& v, const Args&) {
  return Value(to_lower(to_str(v)));
}
Value f_title(Interpreter&, const Value& v, const Args&) {
  return Value(to_title(to_str(v)));
}
Value f_capitalize(Interpreter&, const Value& v, const Args&) {
  return Value(capitalize(to_str(v)));
}
Value f_string(Interpreter&, const Value& v, const Args&) {
  return Value(to_str(v));
}
Value f_safe(Interpreter&, const Value& v, const Args&) {
  return v;
}

Value f_escape(Interpreter& in, const Value& v, const Args&) {
  std::string out;
  for (const char c : to_str(v)) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&#34;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  in.charge_string(out.size());
  return Value(std::move(out));
}

// HF's tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False).
Value f_tojson(Interpreter& in, const Value& v, const Args& args) {
  args.check("tojson", 4, {"ensure_ascii", "indent", "separators", "sort_keys"});
  const Value* indent = args.get(1, "indent");
  int width = -1;
  if (indent != nullptr && !indent->is_none()) {
    if (!indent->is_int() || indent->as_int() < 0 || indent->as_int() > 64) {
      throw Failure("found a tojson indent outside 0..64, expected a small integer");
    }
    width = static_cast<int>(indent->as_int());
  }
  std::string out;
  append_json(v, out, width, flag(args, 0, "ensure_ascii"), flag(args, 3, "sort_keys"));
  in.charge_string(out.size());
  in.step(out.size() / 64);
  return Value(std::move(out));
}

Value f_join(Interpreter& in, const Value& v, const Args& args) {
  args.check("join", 2, {"d", "attribute"});
  const Value* sep = args.get(0, "d");
  const Value* attribute = args.get(1, "attribute");
  const std::string separator = sep != nullptr ? to_str(*sep) : std::string();
  std::string out;
  bool first = true;
  for (const Value& item : items_of(in, v, "join")) {
    if (!first) out += separator;
    first = false;
    append_str(attribute != nullptr ? attribute_path(item, to_str(*attribute)) : item, out);
    in.check_string_size(out.size());
  }
  in.charge_string(out.size());
  return Value(std::move(out));
}

Value f_default(Interpreter&, const Value& v, const Args& args) {
  args.check("default", 2, {"default_value", "boolean"});
  const Value* fallback = args.get(0, "default_value");
  const bool use = v.is_undefined() || (flag(args, 1, "boolean") && !v.truthy());
  if (!use) return v;
  return fallback != nullptr ? *fallback : Value(std::string());
}

Value f_first(Interpreter& in, const Value& v, const Args&) {
  if (v.is_list()) return v.as_list().empty() ? Value() : v.as_list().front();
  const List items = items_of(in, v, "first");
  return items.empty() ? Value() : items.front();
}

Value f_last(Interpreter& in, const Value& v, const Args&) {
  if (v.is_list()) return v.as_list().empty() ? Value() : v.as_list().back();
  const List items = items_of(in, v, "last");
  return items.empty() ? Value() : items.back();
}

Value f_list(Interpreter& in, const Value& v, const Args&) {
  return Value(items_of(in, v, "list"));
}

Value f_items(Interpreter& in, const Value& v, const Args&) {
  if (v.is_undefined()) return Value(List{});
  if (!v.is_dict())
    throw Failure(fmt::format("found {} for items, expected a dict", v.type_name()));
  Value result;
  call_method(in, v, "items", {}, result);
  return result;
}

Value f_int(Interpreter&, const Value& v, const Args& args) {
  args.check("int", 2, {"default", "base"});
  const Value* fallback = args.get(0, "default");
  const Value def = fallback != nullptr ? *fallback : Value(0);
  if (v.is_int() || v.is_bool()) return Value(v.as_int());
  if (v.is_float()) {
    const double f = v.as_float();
    if (!std::isfinite(f) || std::fabs(f) >= 9.2e18) return def;
    return Value(static_cast<int64_t>(f));
  }
  if (v.is_string()) {
    const std::string s(strip(v.as_string(), std::nullopt, true, true));
    char* end = nullptr;
    errno = 0;
    const long long i = std::strtoll(s.c_str(), &end, 10);
    if (!s.empty() && end == s.c_str() + s.size() && errno == 0)
      return Value(static_cast<int64_t>(i));
    const double f = std::strtod(s.c_str(), &end);
    if (!s.empty() && end == s.c_str() + s.size() && std::isfinite(f) && std::fabs(f) < 9.2e18) {
      return Value(static_cast<int64_t>(f));
    }
  }
  return def;
}

Value f_float(Interpreter&, const Value& v, const Args& args) {
  args.check("float", 1, {"default"});
  const Value* fallback = args.get(0, "default");
  if (v.is_number()) return Value(v.as_float());
  if (v.is_string()) {
    const std::string s(strip(v.as_string(), std::nullopt, true, true));
    char* end = nullptr;
    const double f = std::strtod(s.c_str(), &end);
    if (!s.empty() && end == s.c_str() + s.size()) return Value(f);
  }
  return fallback != nullptr ? *fallback : Value(0.0);
}

Value f_abs(Interpreter&, const Value& v, const Args&) {
  if (v.is_float()) return Value(std::fabs(v.as_float()));
  if (v.is_int() || v.is_bool()) {
    if (v.as_int() == INT64_MIN)
      throw Failure("found an integer overflow, expected a smaller number");
    return Value(v.as_int() < 0 ? -v.as_int() : v.as_int());
  }
  throw Failure(fmt::format("found {} for abs, expected a number", v.type_name()));
}

Value f_round(Interpreter&, const Value& v, const Args& args) {
  args.check("round", 2, {"precision", "method"});
  if (!v.is_number())
    throw Failure(fmt::format("found {} for round, expected a number", v.type_name()));
  const Value* p = args.get(0, "precision");
  const Value* m = args.get(1, "method");
  const int64_t precision =
      p != nullptr && p->is_int() ? std::clamp<int64_t>(p->as_int(), -300, 300) : 0;
  const std::string method = m != nullptr ? to_str(*m) : "common";
  const double scale = std::pow(10.0, static_cast<double>(precision));
  const double x = v.as_float() * scale;
  const double r = method == "ceil"    ? std::ceil(x)
                   : method == "floor" ? std::floor(x)
                                       : std::round(x);
  return Value(r / scale);
}

Value f_replace(Interpreter& in, const Value& v, const Args& args) {
  Value result;
  call_method(in, Value(to_str(v)), "replace", args, result);
  return result;
}

Value f_wordcount(Interpreter&, const Value& v, const Args&) {
  return Value(static_cast<int64_t>(split(to_str(v), std::nullopt, -1, false).size()));
}

Value f_indent(Interpreter& in, const Value& v, const Args& args) {
  args.check("indent", 3, {"width", "first", "blank"});
  const Value* w = args.get(0, "width");
  std::string pad = "    ";
  if (w != nullptr && w->is_string()) {
    pad = w->as_string();
  } else if (w != nullptr) {
    if (!w->is_int() || w->as_int() < 0 || w->as_int() > 256)
      throw Failure("found an indent width outside 0..256, expected a small integer");
    pad = std::string(static_cast<size_t>(w->as_int()), ' ');
  }
  const bool first = flag(args, 1, "first");
  const bool blank = flag(args, 2, "blank");
  const std::string s = to_str(v);
  std::string out;
  size_t line = 0;
  for (size_t pos = 0; pos <= s.size(); ++line) {
    const size_t nl = s.find('\n', pos);
    const std::string_view text =
        std::string_view(s).substr(pos, nl == std::string::npos ? std::string::npos : nl - pos);
    if ((line > 0 || first) && (blank || !strip(text, std::nullopt, true, true).empty()))
      out += pad;
    out += text;
    in.check_string_size(out.size());
    if (nl == std::string::npos) {
      in.charge_string(out.size());
      break;
    }
    out += '\n';
    pos = nl + 1;
  }
  return Value(std::move(out));
}

Value f_center(Interpreter& in, const Value& v, const Args& args) {
  args.check("center", 1, {"width"});
  const Value* w = args.get(0, "width");
  const int64_t width = w != nullptr && w->is_int() ? w->as_int() : 80;
  const std::string s = to_str(v);
  const auto len = static_cast<int64_t>(code_point_count(s));
  if (width <= len) return Value(s);
  in.charge_string(static_cast<size_t>(width));
  const int64_t left = (width - len) / 2 + ((width - len) % 2 & width % 2);
  return Value(std::string(static_cast<size_t>(left), ' ') + s +
               std::string(static_cast<size_t>(width - len - left), ' '));
}

bool run_test(Interpreter& in, const Value& item, const Args& args, size_t name_at) {
  if (args.positional.size() <= name_at) return item.truthy();
  return in.test(need_string(args.positional[name_at], "a test name"), item,
                 rest_args(args, name_at + 1));
}

Value select_like(Interpreter& in, const Value& v, const Args& args, bool by_attr, bool keep) {
  const std::string_view what =
      by_attr ? (keep ? "selectattr" : "rejectattr") : (keep ? "select" : "reject");
  std::string attr;
  if (by_attr) attr = need_string(required(args, 0, "attribute", what), "an attribute name");
  List out;
  for (const Value& item : items_of(in, v, what)) {
    const Value probe = by_attr ? attribute_path(item, attr) : item;
    if (run_test(in, probe, args, by_attr ? 1 : 0) == keep) out.push_back(item);
  }
  return Value(std::move(out));
}

Value f_select(Interpreter& in, const Value& v, const Args& a) {
  return select_like(in, v, a, false, true);
}
Value f_reject(Interpreter& in, const Value& v, const Args& a) {
  return select_like(in, v, a, false, false);
}
Value f_selectattr(Interpreter& in, const Value& v, const Args& a) {
  return select_like(in, v, a, true, true);
}
Value f_rejectattr(Interpreter& in, const Value& v, const Args& a) {
  return select_like(in, v, a, true, false);
}

Value f_map(Interpreter& in, const Value& v, const Args& args) {
  List out;
  const Value* attribute = nullptr;
  for (const auto& [k, a] : args.keyword) {
    if (k == "attribute") attribute = &a;
  }
  const List items = items_of(in, v, "map");
  if (attribute != nullptr) {
    const Value* fallback = nullptr;
    for (const auto& [k, a] : args.keyword) {
      if (k == "default") fallback = &a;
    }
    const std::string path = to_str(*attribute);
    for (const Value& item : items) {
      Value r = attribute_path(item, path);
      out.push_back(r.is_undefined() && fallback != nullptr ? *fallback : r);
    }
    return Value(std::move(out));
  }
  if (args.positional.empty())
    throw Failure("found map() without a filter name or attribute=, expected one");
  const std::string& name = need_string(args.positional[0], "map's filter name");
  const Args rest = rest_args(args, 1);
  for (const Value& item : items) out.push_back(in.filter(name, item, rest));
  return Value(std::move(out));
}

Value f_unique(Interpreter& in, const Value& v, const Args& args) {
  args.check("unique", 2, {"case_sensitive", "attribute"});
  const Value* attribute = args.get(1, "attribute");
  List out;
  std::vector<Value> seen;
  const bool case_sensitive = flag(args, 0, "case_sensitive");
  for (const Value& item : items_of(in, v, "unique")) {
    Value key = attribute != nullptr ? attribute_path(item, to_str(*attribute)) : item;
    if (!case_sensitive && key.is_string()) key = Value(to_lower(key.as_string()));
    in.step(seen.size());
    if (std::none_of(seen.begin(), seen.end(), [&](const Value& s) { return equals(s, key); })) {
      seen.push_back(key);
      out.push_back(item);
    }
  }
  return Value(std::move(out));
}

Value sorted(Interpreter& in, List items, bool reverse, bool case_sensitive,
             const Value* attribute) {
  const auto key = [&](const Value& item) {
    Value k = attribute != nullptr ? attribute_path(item, to_str(*attribute)) : item;
    if (!case_sensitive && k.is_string()) k = Value(to_lower(k.as_string()));
    return k;
  };
  std::vector<std::pair<Value, Value>> keyed;
  for (Value& item : items) keyed.emplace_back(key(item), std::move(item));
  in.step(keyed.size() * 8);
  std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& a, const auto& b) {
    return reverse ? compare(b.first, a.first) < 0 : compare(a.first, b.first) < 0;
  });
  List out;
  for (auto& [k, item] : keyed) out.push_back(std::move(item));
  return Value(std::move(out));
}

Value f_sort(Interpreter& in, const Value& v, const Args& args) {
  args.check("sort", 3, {"reverse", "case_sensitive", "attribute"});
  return sorted(in, items_of(in, v, "sort"), flag(args, 0, "reverse"),
                flag(args, 1, "case_sensitive"), args.get(2, "attribute"));
}

Value f_dictsort(Interpreter& in, const Value& v, const Args& args) {
  args.check("dictsort", 3, {"case_sensitive", "by", "reverse"});
  if (!v.is_dict())
    throw Failure(fmt::format("found {} for dictsort, expected a dict", v.type_name()));
  Value pairs;
  call_method(in, v, "items", {}, pairs);
  const Value* by = args.get(1, "by");
  const Value index(by != nullptr && to_str(*by) == "value" ? "1" : "0");
  return sorted(in, pairs.as_list(), flag(args, 2, "reverse"), flag(args, 0, "case_sensitive"),
                &index);
}

Value f_reverse(Interpreter& in, const Value& v, const Args&) {
  if (v.is_string()) {
    const std::vector<size_t> offsets = code_point_offsets(v.as_string());
    std::string out;
    for (size_t i = offsets.size() - 1; i-- > 0;)
      out.append(v.as_string(), offsets[i], offsets[i + 1] - offsets[i]);
    return Value(std::move(out));
  }
  List items = items_of(in, v, "reverse");
  std::reverse(items.begin(), items.end());
  return Value(std::move(items));
}

Value f_sum(Interpreter& in, const Value& v, const Args& args) {
  args.check("sum", 2, {"attribute", "start"});
  const Value* attribute = args.get(0, "attribute");
  const Value* start = args.get(1, "start");
  Value total = start != nullptr ? *start : Value(0);
  for (const Value& item : items_of(in, v, "sum")) {
    total = binary_op(in, "+", total,
                      attribute != nullptr ? attribute_path(item, to_str(*attribute)) : item);
  }
  return total;
}

Value min_max(Interpreter& in, const Value& v, const Args& args, bool want_max) {
  args.check(want_max ? "max" : "min", 2, {"case_sensitive", "attribute"});
  const Value s = sorted(in, items_of(in, v, want_max ? "max" : "min"), want_max,
                         flag(args, 0, "case_sensitive"), args.get(1, "attribute"));
  return s.as_list().empty() ? Value() : s.as_list().front();
}

Value f_min(Interpreter& in, const Value& v, const Args& a) {
  return min_max(in, v, a, false);
}
Value f_max(Interpreter& in, const Value& v, const Args& a) {
  return min_max(in, v, a, true);
}

const std::unordered_map<std::string_view, FilterFn>& filters() {
  static const std::unordered_map<std::string_view, FilterFn> table = {
      {"abs", f_abs},
      {"capitalize", f_capitalize},
      {"center", f_center},
      {"count", f_length},
      {"d", f_default},
      {"default", f_default},
      {"dictsort", f_dictsort},
      {"e", f_escape},
      {"escape", f_escape},
      {"first", f_first},
      {"float", f_float},
      {"forceescape", f_escape},
      {"indent", f_indent},
      {"int", f_int},
      {"items", f_items},
      {"join", f_join},
      {"last", f_last},
      {"length", f_length},
      {"list", f_list},
      {"lower", f_lower},
      {"map", f_map},
      {"max", f_max},
      {"min", f_min},
      {"reject", f_reject},
      {"rejectattr", f_rejectattr},
      {"replace", f_replace},
      {"reverse", f_reverse},
      {"round", f_round},
      {"safe", f_safe},
      {"select", f_select},
      {"selectattr", f_selectattr},
      {"sort", f_sort},
      {"string", f_string},
      {"sum", f_sum},
      {"title", f_title},
      {"tojson", f_tojson},
      {"trim", f_trim},
      {"unique", f_unique},
      {"upper", f_upper},
      {"wordcount", f_wordcount},
  };
  return table;
}

}  // namespace

Value Interpreter::filter(std::string_view name, const Value& input, const Args& args) {
  return apply_filter(*this, name, input, args);
}

Value apply_filter(Interpreter& in, std::string_view name, const Value& input, const Args& args) {
  const auto it = filters().find(name);
  if (it == filters().end()) {
    throw Failure(
        fmt::format("found unknown filter '{}', expected a filter chat templates use "
                    "(trim, tojson, join, default, length, map, selectattr, ...)",
                    name));
  }
  return it->second(in, input, args);
}

bool has_filter(std::string_view name) {
  return filters().contains(name);
}

}  // namespace tessera::jinja
