// The interpreter's values: Python's data model as far as templates see it.
// Strings, lists and dicts are shared and never changed after they are
// built, except a namespace's attributes (`{% set ns.x = ... %}`), so
// copying a Value is cheap and a list of a million references to one long
// string costs a million pointers, not a million strings.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

namespace tessera::jinja {

namespace ast {
struct Stmt;
}

// A failure without a source position; the interpreter adds the position
// of the expression that raised it.
class Failure : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class Value;
using List = std::vector<Value>;
struct Dict;
struct Callable;

class Value {
 public:
  enum class Type : uint8_t {
    kUndefined,
    kNone,
    kBool,
    kInt,
    kFloat,
    kString,
    kList,
    kDict,
    kCallable
  };

  Value() = default;  // undefined
  static Value none() { return Value(Repr(std::in_place_index<1>, nullptr)); }
  explicit Value(bool b) : v_(std::in_place_index<2>, b) {}
  explicit Value(int64_t i) : v_(std::in_place_index<3>, i) {}
  explicit Value(int i) : v_(std::in_place_index<3>, int64_t{i}) {}
  explicit Value(double f) : v_(std::in_place_index<4>, f) {}
  explicit Value(std::string s)
      : v_(std::in_place_index<5>, std::make_shared<const std::string>(std::move(s))) {}
  explicit Value(std::string_view s) : Value(std::string(s)) {}
  explicit Value(const char* s) : Value(std::string(s)) {}
  explicit Value(List items)
      : v_(std::in_place_index<6>, std::make_shared<const List>(std::move(items))) {}
  explicit Value(std::shared_ptr<Dict> d) : v_(std::in_place_index<7>, std::move(d)) {}
  explicit Value(std::shared_ptr<const Callable> c) : v_(std::in_place_index<8>, std::move(c)) {}

  Type type() const { return static_cast<Type>(v_.index()); }
  bool is_undefined() const { return type() == Type::kUndefined; }
  bool is_none() const { return type() == Type::kNone; }
  bool is_bool() const { return type() == Type::kBool; }
  bool is_int() const { return type() == Type::kInt; }
  bool is_float() const { return type() == Type::kFloat; }
  bool is_number() const { return is_int() || is_float() || is_bool(); }
  bool is_string() const { return type() == Type::kString; }
  bool is_list() const { return type() == Type::kList; }
  bool is_dict() const { return type() == Type::kDict; }
  bool is_callable() const { return type() == Type::kCallable; }

  bool as_bool() const { return std::get<2>(v_); }
  int64_t as_int() const { return is_bool() ? int64_t{as_bool()} : std::get<3>(v_); }
  double as_float() const { return is_float() ? std::get<4>(v_) : static_cast<double>(as_int()); }
  const std::string& as_string() const { return *std::get<5>(v_); }
  const List& as_list() const { return *std::get<6>(v_); }
  const Dict& as_dict() const { return *std::get<7>(v_); }
  Dict& mutable_dict() const { return *std::get<7>(v_); }
  const Callable& as_callable() const { return *std::get<8>(v_); }
  // The same object (Python's `is`) for lists, dicts and callables.
  const void* identity() const;

  // Python's truth value; undefined is false.
  bool truthy() const;
  // "undefined", "none", "bool", "int", "float", "string", "list", "dict", "function".
  std::string_view type_name() const;

 private:
  using Repr = std::variant<std::monostate, std::nullptr_t, bool, int64_t, double,
                            std::shared_ptr<const std::string>, std::shared_ptr<const List>,
                            std::shared_ptr<Dict>, std::shared_ptr<const Callable>>;
  explicit Value(Repr v) : v_(std::move(v)) {}
  Repr v_;
};

// Insertion-ordered string-keyed map (Python dicts keep insertion order).
struct Dict {
  bool is_namespace = false;  // attributes may be set: namespace(...)

  const Value* find(std::string_view key) const;
  void set(std::string key, Value value);
  size_t size() const { return entries_.size(); }
  const std::vector<std::pair<std::string, Value>>& entries() const { return entries_; }
  // Entry i's value, to update in place (the loop object each iteration).
  Value& value_at(size_t i) { return entries_[i].second; }

 private:
  std::vector<std::pair<std::string, Value>> entries_;
  std::map<std::string, size_t, std::less<>> index_;
};

// Macros and the built-in global functions.
struct Callable {
  enum class Builtin { kNone, kRaiseException, kStrftimeNow, kNamespace, kRange, kDict };
  std::string name;
  Builtin builtin = Builtin::kNone;
  const ast::Stmt* macro = nullptr;  // owned by the parsed template
};

Value make_dict(std::vector<std::pair<std::string, Value>> entries, bool is_namespace = false);

// JSON in: objects keep their key order (ordered_json) or the sorted order
// nlohmann::json stores; integers that fit int64 stay integers.
Value from_json(const nlohmann::ordered_json& j);
Value from_json(const nlohmann::json& j);

// Python's str(): None, True, 1.5, 'text' inside containers, ['a', 1], {'k': 'v'}.
std::string to_str(const Value& v);
void append_str(const Value& v, std::string& out);
// Python's repr() (strings quoted).
void append_repr(const Value& v, std::string& out);
// Python's float repr: shortest round trip, "1.0", "1e-05", "1e+16", "inf", "nan".
std::string format_float(double f);
// HF's tojson: json.dumps(x, ensure_ascii=False, indent=indent). indent < 0:
// one line with ", " and ": " separators. Throws Failure for undefined or
// functions.
void append_json(const Value& v, std::string& out, int indent, bool ensure_ascii = false,
                 bool sort_keys = false, int level = 0);

// Python's ==, with 1 == 1.0 == True and deep list/dict comparison.
bool equals(const Value& a, const Value& b);
// Python's ordering for numbers, strings and lists; Failure otherwise.
int compare(const Value& a, const Value& b);

}  // namespace tessera::jinja
