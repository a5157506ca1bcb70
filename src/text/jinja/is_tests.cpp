// Tests: `x is defined`, `x is not none`, `x is divisibleby 3`, ...
#include <unordered_map>

#include <fmt/format.h>

#include "jinja/interpreter.h"
#include "jinja/strings.h"

namespace tessera::jinja {
namespace {

using TestFn = bool (*)(Interpreter&, const Value&, const Args&);

// ---- tests --------------------------------------------------------------------------------

const Value& test_arg(const Args& args, std::string_view test) {
  if (args.positional.empty())
    throw Failure(fmt::format("found test '{}' without its argument, expected one", test));
  return args.positional[0];
}

bool t_defined(Interpreter&, const Value& v, const Args&) {
  return !v.is_undefined();
}
bool t_undefined(Interpreter&, const Value& v, const Args&) {
  return v.is_undefined();
}
bool t_none(Interpreter&, const Value& v, const Args&) {
  return v.is_none();
}
bool t_boolean(Interpreter&, const Value& v, const Args&) {
  return v.is_bool();
}
bool t_true(Interpreter&, const Value& v, const Args&) {
  return v.is_bool() && v.as_bool();
}
bool t_false(Interpreter&, const Value& v, const Args&) {
  return v.is_bool() && !v.as_bool();
}
bool t_integer(Interpreter&, const Value& v, const Args&) {
  return v.is_int();
}
bool t_float(Interpreter&, const Value& v, const Args&) {
  return v.is_float();
}
bool t_number(Interpreter&, const Value& v, const Args&) {
  return v.is_number();
}
bool t_string(Interpreter&, const Value& v, const Args&) {
  return v.is_string();
}
bool t_mapping(Interpreter&, const Value& v, const Args&) {
  return v.is_dict() && !v.as_dict().is_namespace;
}
// Jinja2's Undefined iterates as empty, so it counts as iterable.
bool t_iterable(Interpreter&, const Value& v, const Args&) {
  return v.is_list() || v.is_dict() || v.is_string() || v.is_undefined();
}
bool t_sequence(Interpreter&, const Value& v, const Args&) {
  return v.is_list() || v.is_dict() || v.is_string();
}
bool t_callable(Interpreter&, const Value& v, const Args&) {
  return v.is_callable();
}
bool t_eq(Interpreter&, const Value& v, const Args& a) {
  return equals(v, test_arg(a, "eq"));
}
bool t_ne(Interpreter&, const Value& v, const Args& a) {
  return !equals(v, test_arg(a, "ne"));
}
bool t_lt(Interpreter&, const Value& v, const Args& a) {
  return compare(v, test_arg(a, "lt")) < 0;
}
bool t_le(Interpreter&, const Value& v, const Args& a) {
  return compare(v, test_arg(a, "le")) <= 0;
}
bool t_gt(Interpreter&, const Value& v, const Args& a) {
  return compare(v, test_arg(a, "gt")) > 0;
}
bool t_ge(Interpreter&, const Value& v, const Args& a) {
  return compare(v, test_arg(a, "ge")) >= 0;
}
bool t_in(Interpreter&, const Value& v, const Args& a) {
  return contains(test_arg(a, "in"), v);
}
bool t_odd(Interpreter&, const Value& v, const Args&) {
  return v.is_int() && v.as_int() % 2 != 0;
}
bool t_even(Interpreter&, const Value& v, const Args&) {
  return v.is_int() && v.as_int() % 2 == 0;
}
bool t_divisibleby(Interpreter&, const Value& v, const Args& a) {
  const Value& d = test_arg(a, "divisibleby");
  if (!v.is_int() || !d.is_int() || d.as_int() == 0) return false;
  return d.as_int() == -1 || v.as_int() % d.as_int() == 0;
}
bool t_lower(Interpreter&, const Value& v, const Args&) {
  return v.is_string() && to_lower(v.as_string()) == v.as_string();
}
bool t_upper(Interpreter&, const Value& v, const Args&) {
  return v.is_string() && to_upper(v.as_string()) == v.as_string();
}
bool t_sameas(Interpreter&, const Value& v, const Args& a) {
  const Value& o = test_arg(a, "sameas");
  if (v.type() != o.type()) return false;
  if (v.is_none() || v.is_undefined()) return true;
  if (v.is_bool() || v.is_int() || v.is_float()) return equals(v, o);
  return v.identity() == o.identity();
}
bool t_escaped(Interpreter&, const Value&, const Args&) {
  return false;
}
bool t_filter(Interpreter&, const Value& v, const Args&) {
  return v.is_string() && has_filter(v.as_string());
}

const std::unordered_map<std::string_view, TestFn>& tests() {
  static const std::unordered_map<std::string_view, TestFn> table = {
      {"defined", t_defined},
      {"undefined", t_undefined},
      {"none", t_none},
      {"boolean", t_boolean},
      {"true", t_true},
      {"false", t_false},
      {"integer", t_integer},
      {"float", t_float},
      {"number", t_number},
      {"string", t_string},
      {"mapping", t_mapping},
      {"iterable", t_iterable},
      {"sequence", t_sequence},
      {"callable", t_callable},
      {"equalto", t_eq},
      {"eq", t_eq},
      {"==", t_eq},
      {"ne", t_ne},
      {"!=", t_ne},
      {"lt", t_lt},
      {"lessthan", t_lt},
      {"<", t_lt},
      {"le", t_le},
      {"<=", t_le},
      {"gt", t_gt},
      {"greaterthan", t_gt},
      {">", t_gt},
      {"ge", t_ge},
      {">=", t_ge},
      {"in", t_in},
      {"odd", t_odd},
      {"even", t_even},
      {"divisibleby", t_divisibleby},
      {"lower", t_lower},
      {"upper", t_upper},
      {"sameas", t_sameas},
      {"escaped", t_escaped},
      {"filter", t_filter},
  };
  return table;
}

}  // namespace

bool Interpreter::test(std::string_view name, const Value& input, const Args& args) {
  return apply_test(*this, name, input, args);
}

bool apply_test(Interpreter& in, std::string_view name, const Value& input, const Args& args) {
  const auto it = tests().find(name);
  if (it == tests().end()) {
    throw Failure(
        fmt::format("found unknown test '{}', expected a test chat templates use "
                    "(defined, none, string, mapping, iterable, equalto, ...)",
                    name));
  }
  return it->second(in, input, args);
}

}  // namespace tessera::jinja
