// Methods of str, dict and list that templates call: message.content.strip(),
// message.get('x'), tool.items().
#include <fmt/format.h>

#include "jinja/interpreter.h"
#include "jinja/strings.h"

namespace tessera::jinja {
namespace {

const std::string& string_arg(const Args& args, size_t i, std::string_view name,
                              std::string_view method) {
  const Value* v = args.get(i, name);
  if (v == nullptr || !v->is_string()) {
    throw Failure(fmt::format("found {} for argument '{}' of {}(), expected a string",
                              v == nullptr ? "nothing" : v->type_name(), name, method));
  }
  return v->as_string();
}

// An optional string argument; none and missing read as "not given".
std::optional<std::string_view> optional_string(const Args& args, size_t i, std::string_view name,
                                                std::string_view method) {
  const Value* v = args.get(i, name);
  if (v == nullptr || v->is_none()) return std::nullopt;
  return string_arg(args, i, name, method);
}

long long int_arg(const Args& args, size_t i, std::string_view name, long long fallback) {
  const Value* v = args.get(i, name);
  if (v == nullptr || v->is_none()) return fallback;
  if (!v->is_int() && !v->is_bool()) {
    throw Failure(
        fmt::format("found {} for argument '{}', expected an integer", v->type_name(), name));
  }
  return v->as_int();
}

Value string_list(const std::vector<std::string>& parts) {
  List items;
  items.reserve(parts.size());
  for (const std::string& p : parts) items.emplace_back(p);
  return Value(std::move(items));
}

// startswith/endswith take one string or a tuple (list) of them.
bool affix_matches(const Value& arg, const std::string& s, bool prefix, std::string_view method) {
  const auto one = [&](const Value& v) {
    if (!v.is_string()) {
      throw Failure(fmt::format("found {} in {}(), expected a string or a list of strings",
                                v.type_name(), method));
    }
    const std::string& a = v.as_string();
    if (a.size() > s.size()) return false;
    return prefix ? s.compare(0, a.size(), a) == 0
                  : s.compare(s.size() - a.size(), a.size(), a) == 0;
  };
  if (arg.is_list()) {
    for (const Value& v : arg.as_list()) {
      if (one(v)) return true;
    }
    return false;
  }
  return one(arg);
}

template <class Pred>
bool all_code_points(const std::string& s, Pred pred) {
  if (s.empty()) return false;
  for (size_t i = 0; i < s.size();) {
    size_t n = 0;
    if (!pred(decode_code_point(s, i, n))) return false;
    i += n;
  }
  return true;
}

bool string_method(Interpreter& in, const std::string& s, std::string_view name, const Args& args,
                   Value& result) {
  const auto strip_like = [&](bool left, bool right) {
    args.check(name, 1, {"chars"});
    result = Value(strip(s, optional_string(args, 0, "chars", name), left, right));
  };
  in.step(s.size() / 64);
  if (name == "strip") {
    strip_like(true, true);
  } else if (name == "lstrip") {
    strip_like(true, false);
  } else if (name == "rstrip") {
    strip_like(false, true);
  } else if (name == "split" || name == "rsplit") {
    args.check(name, 2, {"sep", "maxsplit"});
    const auto sep = optional_string(args, 0, "sep", name);
    if (sep && sep->empty())
      throw Failure(fmt::format("found an empty separator in {}(), expected text", name));
    const std::vector<std::string> parts =
        split(s, sep, int_arg(args, 1, "maxsplit", -1), name == "rsplit");
    in.check_list_size(parts.size());
    result = string_list(parts);
  } else if (name == "splitlines") {
    args.check(name, 1, {"keepends"});
    const Value* keep = args.get(0, "keepends");
    result = string_list(split_lines(s, keep != nullptr && keep->truthy()));
  } else if (name == "startswith" || name == "endswith") {
    args.check(name, 1, {});
    if (args.positional.empty())
      throw Failure(fmt::format("found no argument to {}(), expected one", name));
    result = Value(affix_matches(args.positional[0], s, name == "startswith", name));
  } else if (name == "upper") {
    result = Value(to_upper(s));
  } else if (name == "lower") {
    result = Value(to_lower(s));
  } else if (name == "title") {
    result = Value(to_title(s));
  } else if (name == "capitalize") {
    result = Value(capitalize(s));
  } else if (name == "replace") {
    args.check(name, 3, {"old", "new", "count"});
    const std::string& from = string_arg(args, 0, "old", name);
    const std::string& to = string_arg(args, 1, "new", name);
    const long long count = int_arg(args, 2, "count", -1);
    // Bound the result before building it.
    const size_t hits = from.empty() ? code_point_count(s) + 1 : s.size() / from.size();
    if (to.size() > from.size()) in.check_string_size(s.size() + hits * (to.size() - from.size()));
    std::string out = replace(s, from, to, count);
    in.charge_string(out.size());
    result = Value(std::move(out));
  } else if (name == "find" || name == "rfind" || name == "count") {
    args.check(name, 1, {});
    const std::string& sub = string_arg(args, 0, "sub", name);
    if (name == "count") {
      int64_t n = 0;
      if (sub.empty()) {
        n = static_cast<int64_t>(code_point_count(s)) + 1;
      } else {
        for (size_t pos = s.find(sub); pos != std::string::npos;
             pos = s.find(sub, pos + sub.size()))
          ++n;
      }
      result = Value(n);
    } else {
      const size_t pos = name == "find" ? s.find(sub) : s.rfind(sub);
      result = Value(pos == std::string::npos
                         ? int64_t{-1}
                         : static_cast<int64_t>(code_point_count(s.substr(0, pos))));
    }
  } else if (name == "join") {
    args.check(name, 1, {});
    const Value* items = args.get(0, "iterable");
    if (items == nullptr || !items->is_list())
      throw Failure("found no list in join(), expected a list of strings");
    std::string out;
    bool first = true;
    for (const Value& v : items->as_list()) {
      if (!v.is_string())
        throw Failure(fmt::format("found {} in join(), expected strings", v.type_name()));
      if (!first) out += s;
      first = false;
      out += v.as_string();
      in.check_string_size(out.size());
    }
    in.step(items->as_list().size());
    in.charge_string(out.size());
    result = Value(std::move(out));
  } else if (name == "isdigit") {
    result = Value(all_code_points(s, [](char32_t c) { return c >= '0' && c <= '9'; }));
  } else if (name == "isalpha") {
    result = Value(
        all_code_points(s, [](char32_t c) { return is_cased(c) || (c >= 0x3040 && c <= 0x9FFF); }));
  } else if (name == "isalnum") {
    result =
        Value(all_code_points(s, [](char32_t c) { return (c >= '0' && c <= '9') || is_cased(c); }));
  } else if (name == "isspace") {
    result = Value(all_code_points(s, is_space));
  } else if (name == "islower" || name == "isupper") {
    const bool want_lower = name == "islower";
    bool any_cased = false;
    bool ok = true;
    for (size_t i = 0; i < s.size();) {
      size_t n = 0;
      const char32_t c = decode_code_point(s, i, n);
      if (is_cased(c)) {
        any_cased = true;
        ok = ok && (want_lower ? lower_of(c) == c : upper_of(c) == c);
      }
      i += n;
    }
    result = Value(ok && any_cased);
  } else {
    return false;
  }
  return true;
}

bool dict_method(Interpreter& in, const Dict& d, std::string_view name, const Args& args,
                 Value& result) {
  if (name == "items" || name == "keys" || name == "values") {
    args.check(name, 0, {});
    in.step(d.size());
    List out;
    out.reserve(d.size());
    for (const auto& [k, v] : d.entries()) {
      if (name == "items") {
        out.emplace_back(List{Value(k), v});
      } else {
        out.push_back(name == "keys" ? Value(k) : v);
      }
    }
    result = Value(std::move(out));
    return true;
  }
  if (name == "get") {
    args.check(name, 2, {"key", "default"});
    const Value* key = args.get(0, "key");
    if (key == nullptr) throw Failure("found get() with no key, expected a key");
    const Value* v = key->is_string() ? d.find(key->as_string()) : nullptr;
    const Value* fallback = args.get(1, "default");
    result = v != nullptr ? *v : (fallback != nullptr ? *fallback : Value::none());
    return true;
  }
  return false;
}

bool list_method(Interpreter& in, const List& items, std::string_view name, const Args& args,
                 Value& result) {
  if (name == "count" || name == "index") {
    args.check(name, 1, {});
    if (args.positional.empty())
      throw Failure(fmt::format("found no argument to {}(), expected one", name));
    in.step(items.size());
    int64_t n = 0;
    for (size_t i = 0; i < items.size(); ++i) {
      if (!equals(items[i], args.positional[0])) continue;
      if (name == "index") {
        result = Value(static_cast<int64_t>(i));
        return true;
      }
      ++n;
    }
    if (name == "index")
      throw Failure("found no such item in index(), expected an item of the list");
    result = Value(n);
    return true;
  }
  if (name == "append" || name == "extend" || name == "pop" || name == "insert" ||
      name == "remove" || name == "clear" || name == "sort" || name == "reverse") {
    throw Failure(
        fmt::format("found list.{}(), expected no changes to lists (templates run in an "
                    "immutable sandbox; build a new list with + or filters)",
                    name));
  }
  return false;
}

}  // namespace

bool call_method(Interpreter& in, const Value& object, std::string_view name, const Args& args,
                 Value& result) {
  switch (object.type()) {
    case Value::Type::kString:
      return string_method(in, object.as_string(), name, args, result);
    case Value::Type::kDict:
      if (object.as_dict().is_namespace) return false;
      if (object.as_dict().find(name) != nullptr && object.as_dict().find(name)->is_callable()) {
        return false;  // a macro stored under that key
      }
      return dict_method(in, object.as_dict(), name, args, result);
    case Value::Type::kList:
      return list_method(in, object.as_list(), name, args, result);
    default:
      return false;
  }
}

}  // namespace tessera::jinja
