// Binary operators with Python's semantics on the value types templates use.
#include <cmath>
#include <optional>

#include <fmt/format.h>

#include "jinja/interpreter.h"

namespace tessera::jinja {
namespace {

[[noreturn]] void fail_types(std::string_view op, const Value& a, const Value& b,
                             std::string_view expected) {
  throw Failure(
      fmt::format("found {} {} {}, expected {}", a.type_name(), op, b.type_name(), expected));
}

[[noreturn]] void fail_overflow() {
  throw Failure("found an integer overflow, expected results within 64 bits");
}

// `overflowed` from a __builtin_*_overflow call that wrote `r`.
void check_overflow(bool overflowed) {
  if (overflowed) fail_overflow();
}

// Python's floor division and modulo: the remainder takes the divisor's sign.
int64_t floor_div(int64_t a, int64_t b) {
  if (a == INT64_MIN && b == -1) fail_overflow();
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

int64_t floor_mod(int64_t a, int64_t b) {
  if (b == -1) return 0;
  int64_t r = a % b;
  if (r != 0 && ((r < 0) != (b < 0))) r += b;
  return r;
}

Value power(const Value& a, const Value& b) {
  if (a.is_float() || b.is_float() || b.as_int() < 0) {
    return Value(std::pow(a.as_float(), b.as_float()));
  }
  int64_t base = a.as_int();
  int64_t exp = b.as_int();
  int64_t result = 1;
  while (exp > 0) {
    if (exp & 1) check_overflow(__builtin_mul_overflow(result, base, &result));
    exp >>= 1;
    if (exp > 0) check_overflow(__builtin_mul_overflow(base, base, &base));
  }
  return Value(result);
}

Value arithmetic(Interpreter& in, std::string_view op, const Value& a, const Value& b) {
  if (op == "*") {
    // Repetition: 'ab' * 3, [x] * 3.
    const bool str_left = a.is_string() || a.is_list();
    const Value& seq = str_left ? a : b;
    const Value& count = str_left ? b : a;
    if ((seq.is_string() || seq.is_list()) && (count.is_int() || count.is_bool())) {
      const int64_t n = std::max<int64_t>(0, count.as_int());
      if (seq.is_string()) {
        const size_t len = seq.as_string().size();
        if (len != 0 && static_cast<uint64_t>(n) > UINT64_MAX / len) in.check_string_size(SIZE_MAX);
        in.charge_string(len * static_cast<size_t>(n));
        in.step(len * static_cast<size_t>(n) / 64);
        std::string out;
        out.reserve(len * static_cast<size_t>(n));
        for (int64_t i = 0; i < n; ++i) out += seq.as_string();
        return Value(std::move(out));
      }
      const size_t len = seq.as_list().size();
      if (len != 0 && static_cast<uint64_t>(n) > UINT64_MAX / len) in.check_list_size(SIZE_MAX);
      in.check_list_size(len * static_cast<size_t>(n));
      in.step(len * static_cast<size_t>(n));
      List out;
      out.reserve(len * static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i)
        out.insert(out.end(), seq.as_list().begin(), seq.as_list().end());
      return Value(std::move(out));
    }
  }
  if (!a.is_number() || !b.is_number()) fail_types(op, a, b, "two numbers");
  const bool floating = a.is_float() || b.is_float();
  if (op == "/") {
    if (b.as_float() == 0.0) throw Failure("found a division by zero, expected a non-zero divisor");
    return Value(a.as_float() / b.as_float());
  }
  if (op == "**") return power(a, b);
  if (floating) {
    const double x = a.as_float();
    const double y = b.as_float();
    if (op == "+") return Value(x + y);
    if (op == "-") return Value(x - y);
    if (op == "*") return Value(x * y);
    if (y == 0.0) throw Failure("found a division by zero, expected a non-zero divisor");
    if (op == "//") return Value(std::floor(x / y));
    const double r = std::fmod(x, y);
    return Value(r != 0.0 && ((r < 0) != (y < 0)) ? r + y : r);  // %
  }
  const int64_t x = a.as_int();
  const int64_t y = b.as_int();
  int64_t r = 0;
  if (op == "+" || op == "-" || op == "*") {
    check_overflow(op == "+"   ? __builtin_add_overflow(x, y, &r)
                   : op == "-" ? __builtin_sub_overflow(x, y, &r)
                               : __builtin_mul_overflow(x, y, &r));
    return Value(r);
  }
  if (y == 0) throw Failure("found a division by zero, expected a non-zero divisor");
  if (op == "//") return Value(floor_div(x, y));
  return Value(floor_mod(x, y));  // %
}

}  // namespace

bool contains(const Value& container, const Value& item) {
  switch (container.type()) {
    case Value::Type::kUndefined:
      return false;
    case Value::Type::kString:
      if (!item.is_string()) {
        throw Failure(
            fmt::format("found {} in a string, expected a string to look for", item.type_name()));
      }
      return container.as_string().find(item.as_string()) != std::string::npos;
    case Value::Type::kList:
      for (const Value& v : container.as_list()) {
        if (equals(v, item)) return true;
      }
      return false;
    case Value::Type::kDict:
      return item.is_string() && container.as_dict().find(item.as_string()) != nullptr;
    default:
      throw Failure(
          fmt::format("found 'in' {}, expected a string, list or dict", container.type_name()));
  }
}

Value binary_op(Interpreter& in, std::string_view op, const Value& a, const Value& b) {
  if (op == "==") return Value(equals(a, b));
  if (op == "!=") return Value(!equals(a, b));
  if (op == "<") return Value(compare(a, b) < 0);
  if (op == "<=") return Value(compare(a, b) <= 0);
  if (op == ">") return Value(compare(a, b) > 0);
  if (op == ">=") return Value(compare(a, b) >= 0);
  if (op == "in") return Value(contains(b, a));
  if (op == "not in") return Value(!contains(b, a));
  if (op == "~") {
    std::string out = to_str(a);
    append_str(b, out);
    in.charge_string(out.size());
    return Value(std::move(out));
  }
  if (op == "+") {
    if (a.is_string() && b.is_string()) {
      in.charge_string(a.as_string().size() + b.as_string().size());
      return Value(a.as_string() + b.as_string());
    }
    if (a.is_list() && b.is_list()) {
      in.check_list_size(a.as_list().size() + b.as_list().size());
      in.step(a.as_list().size() + b.as_list().size());
      List out = a.as_list();
      out.insert(out.end(), b.as_list().begin(), b.as_list().end());
      return Value(std::move(out));
    }
    if (a.is_string() || b.is_string() || a.is_list() || b.is_list()) {
      fail_types(op, a, b,
                 "two numbers, two strings or two lists (use ~ to join text to other values)");
    }
  }
  return arithmetic(in, op, a, b);
}

std::vector<size_t> slice_indices(size_t size, const Value& start, const Value& stop,
                                  const Value& step) {
  const auto n = static_cast<int64_t>(size);
  const auto as_index = [](const Value& v, std::string_view what) -> std::optional<int64_t> {
    if (v.is_none() || v.is_undefined()) return std::nullopt;
    if (!v.is_int() && !v.is_bool()) {
      throw Failure(fmt::format("found a {} slice {}, expected an integer", v.type_name(), what));
    }
    return v.as_int();
  };
  const int64_t stride = as_index(step, "step").value_or(1);
  if (stride == 0) throw Failure("found a slice step of 0, expected a non-zero step");
  // Python's PySlice_AdjustIndices.
  const auto adjust = [&](std::optional<int64_t> v, int64_t fallback) {
    if (!v) return fallback;
    int64_t i = *v;
    if (i < 0) {
      i += n;
      if (i < 0) i = stride < 0 ? -1 : 0;
    } else if (i >= n) {
      i = stride < 0 ? n - 1 : n;
    }
    return i;
  };
  const int64_t first = adjust(as_index(start, "start"), stride < 0 ? n - 1 : 0);
  const int64_t last = adjust(as_index(stop, "stop"), stride < 0 ? -1 : n);
  std::vector<size_t> out;
  for (int64_t i = first; stride > 0 ? i < last : i > last;) {
    out.push_back(static_cast<size_t>(i));
    if (__builtin_add_overflow(i, stride, &i)) break;
  }
  return out;
}

}  // namespace tessera::jinja
