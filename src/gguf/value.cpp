// Value and ArrayView: typed reads of metadata viewed in the file's bytes.
#include <cstring>
#include <limits>

#include "parse.h"
#include "tessera/core/error.h"

namespace tessera::gguf {
namespace {

template <class T>
T load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

bool is_signed_int(ValueType t) {
  return t == ValueType::kI8 || t == ValueType::kI16 || t == ValueType::kI32 ||
         t == ValueType::kI64;
}
bool is_unsigned_int(ValueType t) {
  return t == ValueType::kU8 || t == ValueType::kU16 || t == ValueType::kU32 ||
         t == ValueType::kU64;
}
bool is_float(ValueType t) {
  return t == ValueType::kF32 || t == ValueType::kF64;
}

// An integer element as (negative?, magnitude) so that every integer type
// compares without overflow.
struct Integer {
  bool negative;
  uint64_t magnitude;
};

Integer load_integer(ValueType t, const uint8_t* p) {
  int64_t s = 0;
  switch (t) {
    case ValueType::kU8:
      return {false, load<uint8_t>(p)};
    case ValueType::kU16:
      return {false, load<uint16_t>(p)};
    case ValueType::kU32:
      return {false, load<uint32_t>(p)};
    case ValueType::kU64:
      return {false, load<uint64_t>(p)};
    case ValueType::kBool:
      return {false, load<uint8_t>(p) != 0 ? 1u : 0u};
    case ValueType::kI8:
      s = load<int8_t>(p);
      break;
    case ValueType::kI16:
      s = load<int16_t>(p);
      break;
    case ValueType::kI32:
      s = load<int32_t>(p);
      break;
    case ValueType::kI64:
      s = load<int64_t>(p);
      break;
    default:
      return {false, 0};
  }
  if (s >= 0) return {false, static_cast<uint64_t>(s)};
  return {true, 0 - static_cast<uint64_t>(s)};
}

std::string integer_text(Integer v) {
  return v.negative ? fmt::format("-{}", v.magnitude) : std::to_string(v.magnitude);
}

double load_double(ValueType t, const uint8_t* p) {
  if (t == ValueType::kF32) return load<float>(p);
  if (t == ValueType::kF64) return load<double>(p);
  const Integer v = load_integer(t, p);
  const auto m = static_cast<double>(v.magnitude);
  return v.negative ? -m : m;
}

// One element rendered for display and error messages.
std::string scalar_text(ValueType t, const uint8_t* p) {
  if (t == ValueType::kBool) return load<uint8_t>(p) != 0 ? "true" : "false";
  if (t == ValueType::kF32) return fmt::format("{}", load<float>(p));
  if (t == ValueType::kF64) return fmt::format("{}", load<double>(p));
  return integer_text(load_integer(t, p));
}

std::string quoted(std::string_view s) {
  return fmt::format("\"{}\"", detail::printable(s, 64));
}

}  // namespace

std::string_view value_type_name(ValueType type) {
  switch (type) {
    case ValueType::kU8:
      return "u8";
    case ValueType::kI8:
      return "i8";
    case ValueType::kU16:
      return "u16";
    case ValueType::kI16:
      return "i16";
    case ValueType::kU32:
      return "u32";
    case ValueType::kI32:
      return "i32";
    case ValueType::kF32:
      return "f32";
    case ValueType::kBool:
      return "bool";
    case ValueType::kString:
      return "string";
    case ValueType::kArray:
      return "array";
    case ValueType::kU64:
      return "u64";
    case ValueType::kI64:
      return "i64";
    case ValueType::kF64:
      return "f64";
  }
  return "unknown";
}

size_t value_type_size(ValueType type) {
  switch (type) {
    case ValueType::kU8:
    case ValueType::kI8:
    case ValueType::kBool:
      return 1;
    case ValueType::kU16:
    case ValueType::kI16:
      return 2;
    case ValueType::kU32:
    case ValueType::kI32:
    case ValueType::kF32:
      return 4;
    case ValueType::kU64:
    case ValueType::kI64:
    case ValueType::kF64:
      return 8;
    case ValueType::kString:
    case ValueType::kArray:
      return 0;
  }
  return 0;
}

namespace detail {

Value ValueBuilder::scalar(ValueType type, const uint8_t* data, const Site& site) {
  Value v;
  v.type_ = type;
  v.view_.element_type_ = type;
  v.view_.count_ = 1;
  v.view_.data_ = data;
  v.view_.site_ = site;
  return v;
}

Value ValueBuilder::string(const uint8_t* data, uint64_t length, const Site& site) {
  Value v;
  v.type_ = ValueType::kString;
  v.view_.element_type_ = ValueType::kU8;
  v.view_.count_ = length;
  v.view_.data_ = data;
  v.view_.site_ = site;
  return v;
}

Value ValueBuilder::array(ValueType element_type, uint64_t count, const uint8_t* data,
                          const uint64_t* string_offsets, const Site& site) {
  Value v;
  v.type_ = ValueType::kArray;
  v.view_.element_type_ = element_type;
  v.view_.count_ = count;
  v.view_.data_ = data;
  v.view_.string_offsets_ = string_offsets;
  v.view_.site_ = site;
  return v;
}

}  // namespace detail

// ---- ArrayView ----

void ArrayView::fail_element(uint64_t i, std::string_view found, std::string_view expected) const {
  detail::fail_field(*site_.file, site_.offset,
                     fmt::format("key '{}' element {}", detail::printable(site_.key), i), found,
                     expected);
}

void ArrayView::check_index(uint64_t i) const {
  if (i >= count_) {
    fail(ErrorCategory::kInvalidArgument,
         "[gguf {} @ {:#x}] key '{}' element: found index {}, expected < {}", *site_.file,
         site_.offset, detail::printable(site_.key), i, count_);
  }
}

std::string_view ArrayView::string(uint64_t i) const {
  check_index(i);
  if (element_type_ != ValueType::kString) {
    fail_element(i, value_type_name(element_type_), "string");
  }
  const uint8_t* p = data_ + string_offsets_[i];
  // Lengths were checked against the file when it was parsed.
  return {reinterpret_cast<const char*>(p + 8), load<uint64_t>(p)};
}

std::span<const uint8_t> ArrayView::raw_bytes() const {
  if (element_type_ == ValueType::kString) {
    fail_element(0, "string", "a numeric or bool array (raw_bytes)");
  }
  return {data_, count_ * value_type_size(element_type_)};
}

bool ArrayView::number_as_bool(uint64_t i) const {
  check_index(i);
  if (element_type_ != ValueType::kBool) fail_element(i, value_type_name(element_type_), "bool");
  return load<uint8_t>(data_ + i) != 0;
}

double ArrayView::number_as_double(uint64_t i) const {
  check_index(i);
  if (!is_float(element_type_) && !is_signed_int(element_type_) &&
      !is_unsigned_int(element_type_)) {
    fail_element(i, value_type_name(element_type_), "a number");
  }
  return load_double(element_type_, data_ + i * value_type_size(element_type_));
}

int64_t ArrayView::number_as_int(uint64_t i, int64_t lo, int64_t hi) const {
  check_index(i);
  if (!is_signed_int(element_type_) && !is_unsigned_int(element_type_) &&
      element_type_ != ValueType::kBool) {
    fail_element(i, value_type_name(element_type_), "an integer");
  }
  const Integer v = load_integer(element_type_, data_ + i * value_type_size(element_type_));
  const bool fits = v.negative ? v.magnitude <= 0 - static_cast<uint64_t>(lo)
                               : v.magnitude <= static_cast<uint64_t>(hi);
  if (!fits) fail_element(i, integer_text(v), fmt::format("a value in {}..{}", lo, hi));
  return v.negative ? static_cast<int64_t>(0 - v.magnitude) : static_cast<int64_t>(v.magnitude);
}

uint64_t ArrayView::number_as_uint(uint64_t i, uint64_t hi) const {
  check_index(i);
  if (!is_signed_int(element_type_) && !is_unsigned_int(element_type_) &&
      element_type_ != ValueType::kBool) {
    fail_element(i, value_type_name(element_type_), "an integer");
  }
  const Integer v = load_integer(element_type_, data_ + i * value_type_size(element_type_));
  if (v.negative || v.magnitude > hi) {
    fail_element(i, integer_text(v), fmt::format("a value in 0..{}", hi));
  }
  return v.magnitude;
}

// ---- Value ----

void Value::fail_type(std::string_view expected) const {
  std::string found(value_type_name(type_));
  if (type_ == ValueType::kArray) {
    found = fmt::format("array of {}", value_type_name(view_.element_type_));
  } else if (type_ != ValueType::kString) {
    found = fmt::format("{} {}", found, scalar_text(type_, view_.data_));
  }
  detail::fail_field(*view_.site_.file, view_.site_.offset,
                     fmt::format("key '{}'", detail::printable(view_.site_.key)), found, expected);
}

bool Value::is_integer() const {
  return is_signed_int(type_) || is_unsigned_int(type_);
}

uint32_t Value::u32() const {
  if (!is_integer()) fail_type("u32");
  const Integer v = load_integer(type_, view_.data_);
  if (v.negative || v.magnitude > std::numeric_limits<uint32_t>::max()) fail_type("u32");
  return static_cast<uint32_t>(v.magnitude);
}

uint64_t Value::u64() const {
  if (!is_integer()) fail_type("u64");
  const Integer v = load_integer(type_, view_.data_);
  if (v.negative) fail_type("u64");
  return v.magnitude;
}

int64_t Value::i64() const {
  if (!is_integer()) fail_type("i64");
  const Integer v = load_integer(type_, view_.data_);
  constexpr auto kMax = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
  if (v.negative ? v.magnitude > kMax + 1 : v.magnitude > kMax) fail_type("i64");
  return v.negative ? static_cast<int64_t>(0 - v.magnitude) : static_cast<int64_t>(v.magnitude);
}

float Value::f32() const {
  if (!is_float(type_)) fail_type("f32");
  return static_cast<float>(load_double(type_, view_.data_));
}

double Value::f64() const {
  if (!is_float(type_)) fail_type("f64");
  return load_double(type_, view_.data_);
}

bool Value::boolean() const {
  if (type_ != ValueType::kBool) fail_type("bool");
  return load<uint8_t>(view_.data_) != 0;
}

std::string_view Value::string() const {
  if (type_ != ValueType::kString) fail_type("string");
  return {reinterpret_cast<const char*>(view_.data_), view_.count_};
}

const ArrayView& Value::array() const {
  if (type_ != ValueType::kArray) fail_type("array");
  return view_;
}

std::string Value::to_display_string(size_t max_array_items) const {
  if (type_ == ValueType::kString) return quoted(string());
  if (type_ != ValueType::kArray) return scalar_text(type_, view_.data_);
  std::string out = "[";
  const uint64_t shown = std::min<uint64_t>(view_.count_, max_array_items);
  const size_t element_bytes = value_type_size(view_.element_type_);
  for (uint64_t i = 0; i < shown; ++i) {
    if (i > 0) out += ", ";
    out += view_.element_type_ == ValueType::kString
               ? quoted(view_.string(i))
               : scalar_text(view_.element_type_, view_.data_ + i * element_bytes);
  }
  if (shown < view_.count_) out += shown > 0 ? ", ..." : "...";
  out += fmt::format("] ({} x {})", view_.count_, value_type_name(view_.element_type_));
  return out;
}

}  // namespace tessera::gguf
