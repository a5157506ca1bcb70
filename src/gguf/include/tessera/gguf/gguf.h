// GGUF v2/v3 reader (read-only memory map, zero-copy views) and writer.
//
// Everything a File hands out (key names, strings, arrays, tensor data) is a
// view into the mapped bytes and lives as long as the File. Parsing validates
// the whole header before returning: a File that exists is well-formed, the
// well-known keys have their expected types, and every tensor's bytes lie
// inside the file without overlapping another tensor.
//
// Allocation: every count and length is checked against the bytes left in
// the file before anything is reserved. String arrays cost one u64 per
// element (each element takes at least 8 bytes on disk), so a real model or
// vocab file costs about its size plus a small constant. The worst case is a
// file made only of tiny keys: a KeyValue and an index entry (about 104 bytes)
// per 16-byte record on disk, about 7x the file size.
//
// Errors: Error(kInvalidFile) with "[gguf NAME @ 0xOFFSET] WHAT: found X,
// expected Y", where OFFSET is the byte offset of the offending field.
// Nested arrays (an array whose elements are arrays) are refused, as
// llama.cpp refuses them.
#pragma once

#include <array>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "tessera/core/dtype.h"

namespace tessera::gguf {

inline constexpr uint32_t kMagic = 0x46554747;  // "GGUF" read as little-endian u32
inline constexpr uint32_t kDefaultAlignment = 32;
inline constexpr int kMaxDims = 4;
inline constexpr uint64_t kMaxKeyLength = 65536;
inline constexpr uint64_t kMaxTensorNameLength = 63;  // GGML_MAX_NAME (64) minus the NUL

enum class ValueType : uint32_t {
  kU8 = 0,
  kI8 = 1,
  kU16 = 2,
  kI16 = 3,
  kU32 = 4,
  kI32 = 5,
  kF32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kU64 = 10,
  kI64 = 11,
  kF64 = 12,
};

std::string_view value_type_name(ValueType type);  // "u32", "string", "array", ...
// Bytes of one element on disk: 1..8 for scalars, 0 for string and array.
size_t value_type_size(ValueType type);

namespace detail {
struct ValueBuilder;
// Where a value came from, for error messages.
struct Site {
  const std::string* file = nullptr;
  std::string_view key;
  uint64_t offset = 0;  // of the key-value record (its key's length field)
};
}  // namespace detail

// An array value: `size()` elements of `element_type()`, viewed in place.
class ArrayView {
 public:
  ValueType element_type() const { return element_type_; }
  uint64_t size() const { return count_; }

  // Element i of a numeric or bool array, converted to T. Throws
  // Error(kInvalidFile) when the elements are strings or the value does not
  // fit T, Error(kInvalidArgument) when i is out of range. Integer T accepts
  // integer and bool elements; floating T accepts integer and float ones;
  // bool T accepts bool ones.
  template <class T>
  T number(uint64_t i) const {
    static_assert(std::is_arithmetic_v<T>);
    if constexpr (std::is_same_v<T, bool>) {
      return number_as_bool(i);
    } else if constexpr (std::is_floating_point_v<T>) {
      return static_cast<T>(number_as_double(i));
    } else if constexpr (std::is_signed_v<T>) {
      return static_cast<T>(
          number_as_int(i, std::numeric_limits<T>::min(), std::numeric_limits<T>::max()));
    } else {
      return static_cast<T>(number_as_uint(i, std::numeric_limits<T>::max()));
    }
  }
  // Element i of a string array. Throws Error if not a string array.
  std::string_view string(uint64_t i) const;
  // The raw little-endian elements of a numeric or bool array.
  std::span<const uint8_t> raw_bytes() const;

 private:
  friend struct detail::ValueBuilder;
  friend class Value;
  ArrayView() = default;

  void check_index(uint64_t i) const;
  bool number_as_bool(uint64_t i) const;
  double number_as_double(uint64_t i) const;
  int64_t number_as_int(uint64_t i, int64_t lo, int64_t hi) const;
  uint64_t number_as_uint(uint64_t i, uint64_t hi) const;
  [[noreturn]] void fail_element(uint64_t i, std::string_view found,
                                 std::string_view expected) const;

  ValueType element_type_ = ValueType::kU8;
  uint64_t count_ = 0;
  const uint8_t* data_ = nullptr;             // first element in the file
  const uint64_t* string_offsets_ = nullptr;  // string arrays: element i's length at data_ + [i]
  detail::Site site_;
};

class Value {
 public:
  ValueType type() const { return type_; }
  bool is_integer() const;  // any of u8..i64 (not bool)

  // Typed accessors; each throws Error(kInvalidFile) naming the key when the
  // stored value cannot be returned as asked
  // ("[gguf m.gguf @ 0x1a2b] key 'general.alignment': found f32, expected u32").
  uint32_t u32() const;  // any integer type whose value fits
  uint64_t u64() const;  // any unsigned integer type, or a signed one >= 0
  int64_t i64() const;   // any integer type that fits
  float f32() const;     // f32 or f64
  double f64() const;    // f32 or f64
  bool boolean() const;
  std::string_view string() const;
  const ArrayView& array() const;

  std::string_view key() const { return view_.site_.key; }
  uint64_t offset() const { return view_.site_.offset; }

  // A short human rendering: 42, 1e-05, true, "text", [1, 2, ...] (512 x i32).
  std::string to_display_string(size_t max_array_items = 8) const;

 private:
  friend struct detail::ValueBuilder;
  Value() = default;
  [[noreturn]] void fail_type(std::string_view expected) const;

  ValueType type_ = ValueType::kU8;
  // Scalars: view_.data_ points at the value; strings: at the bytes, with
  // view_.count_ the length; arrays: the array itself.
  ArrayView view_;
};

struct KeyValue {
  std::string_view key;
  Value value;
  uint64_t offset;  // byte offset of the key's length field in the file
};

struct TensorInfo {
  std::string_view name;
  DType type;
  int n_dims;
  std::array<int64_t, kMaxDims> ne;  // ne[0] fastest-varying; unused dims are 1
  uint64_t offset;                   // relative to the data section
  uint64_t nbytes;
  uint64_t info_offset;  // byte offset of this tensor's info record in the file
  int64_t n_elements() const { return ne[0] * ne[1] * ne[2] * ne[3]; }
};

// A parsed GGUF file. Move-only.
class File {
 public:
  // Opens and memory-maps `path` read-only and parses it. Throws Error:
  // kIo when the file cannot be opened or mapped, kInvalidFile (naming the
  // field and byte offset) when its bytes break the format (an empty file too).
  static File open(const std::filesystem::path& path);
  // Parses bytes owned by the caller, which must outlive the File.
  static File from_bytes(std::span<const uint8_t> bytes, std::string name = "<memory>");

  File(File&&) noexcept;
  File& operator=(File&&) noexcept;
  ~File();

  const std::string& name() const;  // the path or the name given
  uint32_t version() const;
  uint64_t file_size() const;
  uint32_t alignment() const;
  // End of the tensor infos: the header's size, before padding.
  uint64_t header_size() const;
  // Start of the data section: header_size() rounded up to alignment(). A
  // vocab-only file (no tensors) may end before it, as llama.cpp writes them.
  uint64_t data_offset() const;

  std::span<const KeyValue> kvs() const;
  const Value* find(std::string_view key) const;  // nullptr when absent

  std::span<const TensorInfo> tensors() const;
  const TensorInfo* find_tensor(std::string_view name) const;  // nullptr when absent
  // The tensor's bytes in the file. `info` must come from this file.
  std::span<const uint8_t> tensor_data(const TensorInfo& info) const;
  // Tells the kernel this process is done with the tensor's bytes for now:
  // the whole pages they cover leave the process's memory (the page cache
  // keeps them), so a loader that copied a tensor does not hold the file
  // beside its copy. tensor_data(info) stays valid; reading it again maps
  // the pages back. Nothing for a from_bytes file.
  void release(const TensorInfo& info) const;
  // Asks the kernel to read `part` (a span of tensor_data) into the page
  // cache now, without waiting: a loader about to read it from a cold cache
  // gets large reads ahead of its copies instead of a fault at a time.
  // Nothing for a from_bytes file.
  void will_need(std::span<const uint8_t> part) const;

 private:
  struct Impl;
  explicit File(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Builds a GGUF v3 file and writes it. Values are copied in; tensor data is
// either copied in or produced by a callback when the file is written, one
// tensor at a time (a model larger than memory streams through).
// Setting an existing key replaces its value in place (order kept). Misuse
// (empty or oversized keys and names, bad shapes, wrong data sizes) throws
// Error(kInvalidArgument).
class Writer {
 public:
  Writer();
  ~Writer();
  Writer(Writer&&) noexcept;
  Writer& operator=(Writer&&) noexcept;

  void set_u8(std::string_view key, uint8_t v);
  void set_i8(std::string_view key, int8_t v);
  void set_u16(std::string_view key, uint16_t v);
  void set_i16(std::string_view key, int16_t v);
  void set_u32(std::string_view key, uint32_t v);
  void set_i32(std::string_view key, int32_t v);
  void set_u64(std::string_view key, uint64_t v);
  void set_i64(std::string_view key, int64_t v);
  void set_f32(std::string_view key, float v);
  void set_f64(std::string_view key, double v);
  void set_bool(std::string_view key, bool v);
  void set_string(std::string_view key, std::string_view v);
  void set_array_strings(std::string_view key, std::span<const std::string> v);
  void set_array_strings(std::string_view key, std::span<const std::string_view> v);
  void set_array_f32(std::string_view key, std::span<const float> v);
  void set_array_i32(std::string_view key, std::span<const int32_t> v);
  void set_array_u32(std::string_view key, std::span<const uint32_t> v);
  // An array of any scalar element type: T is one of uint8_t..int64_t,
  // float, double, bool.
  template <class T>
  void set_array(std::string_view key, std::span<const T> v) {
    static_assert(std::is_arithmetic_v<T>);
    set_array_raw(key, element_type_of<T>(), v.size(),
                  {reinterpret_cast<const uint8_t*>(v.data()), v.size_bytes()});
  }
  // Copies a value (scalar or array) from a parsed file.
  void set_value(std::string_view key, const Value& v);

  // Adds a tensor; `data` must hold exactly the tensor's bytes. Copied.
  void add_tensor(std::string_view name, DType type, std::span<const int64_t> shape,
                  std::span<const uint8_t> data);
  // Adds a tensor whose bytes `fill` writes into `out` (exactly the tensor's
  // size, zeroed) when the file is written or to_bytes() runs; called once
  // per write, in the order the tensors were added.
  using TensorFill = std::function<void(std::span<uint8_t> out)>;
  void add_tensor(std::string_view name, DType type, std::span<const int64_t> shape,
                  TensorFill fill);
  size_t tensor_count() const;
  // A non-zero power of two; also written as general.alignment. Setting the
  // general.alignment key directly has the same effect.
  void set_alignment(uint32_t alignment);

  std::vector<uint8_t> to_bytes() const;
  // Writes to `path`.tmp, streaming the tensors one at a time, then renames
  // it over `path`. `progress(i, n, name)` is called before tensor i of n.
  // Throws Error(kIo); a failed write leaves no file behind.
  using Progress = std::function<void(size_t index, size_t count, std::string_view name)>;
  void write(const std::filesystem::path& path, const Progress& progress = {}) const;

 private:
  template <class T>
  static constexpr ValueType element_type_of() {
    if constexpr (std::is_same_v<T, bool>)
      return ValueType::kBool;
    else if constexpr (std::is_same_v<T, float>)
      return ValueType::kF32;
    else if constexpr (std::is_same_v<T, double>)
      return ValueType::kF64;
    else if constexpr (std::is_signed_v<T>) {
      static_assert(sizeof(T) <= 8);
      return sizeof(T) == 1   ? ValueType::kI8
             : sizeof(T) == 2 ? ValueType::kI16
             : sizeof(T) == 4 ? ValueType::kI32
                              : ValueType::kI64;
    } else {
      static_assert(sizeof(T) <= 8);
      return sizeof(T) == 1   ? ValueType::kU8
             : sizeof(T) == 2 ? ValueType::kU16
             : sizeof(T) == 4 ? ValueType::kU32
                              : ValueType::kU64;
    }
  }
  // `bytes` holds `count` little-endian elements of `type` (bools as 0/1 bytes).
  void set_array_raw(std::string_view key, ValueType type, uint64_t count,
                     std::span<const uint8_t> bytes);
  uint64_t check_tensor(std::string_view name, DType type, std::span<const int64_t> shape) const;
  std::vector<uint8_t> header_bytes() const;

  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tessera::gguf
