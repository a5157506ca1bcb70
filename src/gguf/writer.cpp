// Writer: builds a GGUF v3 file (metadata, tensor infos, aligned data).
#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <system_error>
#include <unordered_map>
#include <unordered_set>

#include "cursor.h"
#include "tessera/core/error.h"
#include "tessera/gguf/gguf.h"

namespace tessera::gguf {
namespace {

constexpr uint32_t kVersion = 3;

template <class T>
void append(std::vector<uint8_t>& out, T v) {
  const size_t at = out.size();
  out.resize(at + sizeof(T));
  std::memcpy(out.data() + at, &v, sizeof(T));
}

void append_bytes(std::vector<uint8_t>& out, std::span<const uint8_t> bytes) {
  out.insert(out.end(), bytes.begin(), bytes.end());
}

void append_string(std::vector<uint8_t>& out, std::string_view s) {
  append<uint64_t>(out, s.size());
  append_bytes(out, {reinterpret_cast<const uint8_t*>(s.data()), s.size()});
}

void pad_to(std::vector<uint8_t>& out, uint64_t alignment) {
  out.resize((out.size() + alignment - 1) / alignment * alignment, 0);
}

[[noreturn]] void fail_arg(std::string_view what, std::string_view found,
                           std::string_view expected) {
  fail(ErrorCategory::kInvalidArgument, "[gguf writer] {}: found {}, expected {}", what, found,
       expected);
}

void check_key(std::string_view key) {
  if (key.empty() || key.size() > kMaxKeyLength) {
    fail_arg(fmt::format("key '{}' length", detail::printable(key)), std::to_string(key.size()),
             fmt::format("1..{}", kMaxKeyLength));
  }
}

}  // namespace

struct Writer::Impl {
  struct Entry {
    std::string key;
    std::vector<uint8_t> encoded;  // u32 type, then the value
  };
  struct Tensor {
    std::string name;
    DType type;
    std::vector<int64_t> shape;
    uint64_t nbytes;
    std::vector<uint8_t> data;  // when fill is empty
    TensorFill fill;
  };
  std::vector<Entry> entries;
  std::unordered_map<std::string, size_t> entry_index;  // key -> entries[i]
  std::vector<Tensor> tensors;
  std::unordered_set<std::string> tensor_names;

  void set(std::string_view key, ValueType type, std::vector<uint8_t> value) {
    check_key(key);
    std::vector<uint8_t> encoded;
    encoded.reserve(4 + value.size());
    append<uint32_t>(encoded, static_cast<uint32_t>(type));
    append_bytes(encoded, value);
    auto [it, inserted] = entry_index.try_emplace(std::string(key), entries.size());
    if (!inserted) {
      entries[it->second].encoded = std::move(encoded);
      return;
    }
    entries.push_back({std::string(key), std::move(encoded)});
  }

  template <class T>
  void set_scalar(std::string_view key, ValueType type, T v) {
    std::vector<uint8_t> value;
    append<T>(value, v);
    set(key, type, std::move(value));
  }

  template <class Strings>
  void set_strings(std::string_view key, const Strings& v) {
    std::vector<uint8_t> value;
    append<uint32_t>(value, static_cast<uint32_t>(ValueType::kString));
    append<uint64_t>(value, v.size());
    for (const auto& s : v) append_string(value, s);
    set(key, ValueType::kArray, std::move(value));
  }

  uint32_t alignment() const {
    if (auto it = entry_index.find("general.alignment"); it != entry_index.end()) {
      const Entry& e = entries[it->second];
      uint32_t type = 0;
      uint32_t value = 0;
      std::memcpy(&type, e.encoded.data(), 4);
      if (type == static_cast<uint32_t>(ValueType::kU32))
        std::memcpy(&value, e.encoded.data() + 4, 4);
      if (type != static_cast<uint32_t>(ValueType::kU32) || !std::has_single_bit(value)) {
        fail_arg("general.alignment", std::to_string(value), "a u32 power of two");
      }
      return value;
    }
    return kDefaultAlignment;
  }
};

Writer::Writer() : impl_(std::make_unique<Impl>()) {}
Writer::~Writer() = default;
Writer::Writer(Writer&&) noexcept = default;
Writer& Writer::operator=(Writer&&) noexcept = default;

void Writer::set_u8(std::string_view key, uint8_t v) {
  impl_->set_scalar(key, ValueType::kU8, v);
}
void Writer::set_i8(std::string_view key, int8_t v) {
  impl_->set_scalar(key, ValueType::kI8, v);
}
void Writer::set_u16(std::string_view key, uint16_t v) {
  impl_->set_scalar(key, ValueType::kU16, v);
}
void Writer::set_i16(std::string_view key, int16_t v) {
  impl_->set_scalar(key, ValueType::kI16, v);
}
void Writer::set_u32(std::string_view key, uint32_t v) {
  impl_->set_scalar(key, ValueType::kU32, v);
}
void Writer::set_i32(std::string_view key, int32_t v) {
  impl_->set_scalar(key, ValueType::kI32, v);
}
void Writer::set_u64(std::string_view key, uint64_t v) {
  impl_->set_scalar(key, ValueType::kU64, v);
}
void Writer::set_i64(std::string_view key, int64_t v) {
  impl_->set_scalar(key, ValueType::kI64, v);
}
void Writer::set_f32(std::string_view key, float v) {
  impl_->set_scalar(key, ValueType::kF32, v);
}
void Writer::set_f64(std::string_view key, double v) {
  impl_->set_scalar(key, ValueType::kF64, v);
}
void Writer::set_bool(std::string_view key, bool v) {
  impl_->set_scalar<uint8_t>(key, ValueType::kBool, v ? 1 : 0);
}

void Writer::set_string(std::string_view key, std::string_view v) {
  std::vector<uint8_t> value;
  append_string(value, v);
  impl_->set(key, ValueType::kString, std::move(value));
}

void Writer::set_array_strings(std::string_view key, std::span<const std::string> v) {
  impl_->set_strings(key, v);
}
void Writer::set_array_strings(std::string_view key, std::span<const std::string_view> v) {
  impl_->set_strings(key, v);
}
void Writer::set_array_f32(std::string_view key, std::span<const float> v) {
  set_array(key, v);
}
void Writer::set_array_i32(std::string_view key, std::span<const int32_t> v) {
  set_array(key, v);
}
void Writer::set_array_u32(std::string_view key, std::span<const uint32_t> v) {
  set_array(key, v);
}

void Writer::set_array_raw(std::string_view key, ValueType type, uint64_t count,
                           std::span<const uint8_t> bytes) {
  const size_t element_bytes = value_type_size(type);
  if (element_bytes == 0 || bytes.size() != count * element_bytes) {
    fail_arg(fmt::format("key '{}' array", detail::printable(key)),
             fmt::format("{} bytes of {}", bytes.size(), value_type_name(type)),
             "whole scalar elements");
  }
  std::vector<uint8_t> value;
  value.reserve(12 + bytes.size());
  append<uint32_t>(value, static_cast<uint32_t>(type));
  append<uint64_t>(value, count);
  append_bytes(value, bytes);
  impl_->set(key, ValueType::kArray, std::move(value));
}

void Writer::set_value(std::string_view key, const Value& v) {
  switch (v.type()) {
    case ValueType::kU8:
      return set_u8(key, static_cast<uint8_t>(v.u64()));
    case ValueType::kI8:
      return set_i8(key, static_cast<int8_t>(v.i64()));
    case ValueType::kU16:
      return set_u16(key, static_cast<uint16_t>(v.u64()));
    case ValueType::kI16:
      return set_i16(key, static_cast<int16_t>(v.i64()));
    case ValueType::kU32:
      return set_u32(key, static_cast<uint32_t>(v.u64()));
    case ValueType::kI32:
      return set_i32(key, static_cast<int32_t>(v.i64()));
    case ValueType::kU64:
      return set_u64(key, v.u64());
    case ValueType::kI64:
      return set_i64(key, v.i64());
    case ValueType::kF32:
      return set_f32(key, v.f32());
    case ValueType::kF64:
      return set_f64(key, v.f64());
    case ValueType::kBool:
      return set_bool(key, v.boolean());
    case ValueType::kString:
      return set_string(key, v.string());
    case ValueType::kArray:
      break;
  }
  const ArrayView& a = v.array();
  if (a.element_type() != ValueType::kString) {
    return set_array_raw(key, a.element_type(), a.size(), a.raw_bytes());
  }
  std::vector<std::string_view> strings;
  strings.reserve(a.size());
  for (uint64_t i = 0; i < a.size(); ++i) strings.push_back(a.string(i));
  impl_->set_strings(key, strings);
}

// Checks a tensor's name, type and shape; returns its size in bytes.
uint64_t Writer::check_tensor(std::string_view name, DType type,
                              std::span<const int64_t> shape) const {
  const std::string what = fmt::format("tensor '{}'", detail::printable(name));
  if (name.empty() || name.size() > kMaxTensorNameLength) {
    fail_arg(what + " name length", std::to_string(name.size()),
             fmt::format("1..{}", kMaxTensorNameLength));
  }
  if (impl_->tensor_names.contains(std::string(name))) {
    fail_arg(what, "a duplicate name", "unique tensor names");
  }
  if (shape.empty() || shape.size() > static_cast<size_t>(kMaxDims)) {
    fail_arg(what + " n_dims", std::to_string(shape.size()), fmt::format("1..{}", kMaxDims));
  }
  if (!dtype_from_raw(static_cast<uint32_t>(type))) {
    fail_arg(what + " type", std::to_string(static_cast<uint32_t>(type)), "a ggml type id");
  }
  const DTypeInfo& info = dtype_info(type);
  uint64_t nbytes = 0;
  for (size_t j = 0; j < shape.size(); ++j) {
    bool ok = shape[j] > 0;
    if (ok && j == 0) {
      const std::optional<size_t> row = row_bytes(type, shape[0]);
      ok = row.has_value();
      nbytes = row.value_or(0);
    } else if (ok) {
      ok = detail::checked_mul(nbytes, static_cast<uint64_t>(shape[j]), &nbytes);
    }
    if (!ok) {
      fail_arg(fmt::format("{} dim {}", what, j), std::to_string(shape[j]),
               fmt::format("a size > 0 (dim 0 a multiple of {}) with a byte size that fits",
                           info.block_size));
    }
  }
  return nbytes;
}

void Writer::add_tensor(std::string_view name, DType type, std::span<const int64_t> shape,
                        std::span<const uint8_t> data) {
  const uint64_t nbytes = check_tensor(name, type, shape);
  if (data.size() != nbytes) {
    fail_arg(fmt::format("tensor '{}' data", detail::printable(name)),
             fmt::format("{} bytes", data.size()), fmt::format("{} bytes", nbytes));
  }
  impl_->tensor_names.emplace(name);
  impl_->tensors.push_back({std::string(name), type,
                            std::vector<int64_t>(shape.begin(), shape.end()), nbytes,
                            std::vector<uint8_t>(data.begin(), data.end()), {}});
}

void Writer::add_tensor(std::string_view name, DType type, std::span<const int64_t> shape,
                        TensorFill fill) {
  const uint64_t nbytes = check_tensor(name, type, shape);
  if (!fill) fail_arg(fmt::format("tensor '{}' fill", detail::printable(name)), "none", "a callback");
  impl_->tensor_names.emplace(name);
  impl_->tensors.push_back({std::string(name), type,
                            std::vector<int64_t>(shape.begin(), shape.end()), nbytes, {},
                            std::move(fill)});
}

size_t Writer::tensor_count() const { return impl_->tensors.size(); }

void Writer::set_alignment(uint32_t alignment) {
  if (!std::has_single_bit(alignment)) {
    fail_arg("alignment", std::to_string(alignment), "a non-zero power of two");
  }
  set_u32("general.alignment", alignment);
}

// Magic, counts, metadata and tensor infos, padded to the data section.
std::vector<uint8_t> Writer::header_bytes() const {
  const uint32_t alignment = impl_->alignment();
  std::vector<uint8_t> out;
  append<uint32_t>(out, kMagic);
  append<uint32_t>(out, kVersion);
  append<uint64_t>(out, impl_->tensors.size());
  append<uint64_t>(out, impl_->entries.size());
  for (const Impl::Entry& e : impl_->entries) {
    append_string(out, e.key);
    append_bytes(out, e.encoded);
  }
  uint64_t offset = 0;
  for (const Impl::Tensor& t : impl_->tensors) {
    append_string(out, t.name);
    append<uint32_t>(out, static_cast<uint32_t>(t.shape.size()));
    for (int64_t d : t.shape) append<uint64_t>(out, static_cast<uint64_t>(d));
    append<uint32_t>(out, static_cast<uint32_t>(t.type));
    append<uint64_t>(out, offset);
    offset = (offset + t.nbytes + alignment - 1) / alignment * alignment;
  }
  // Like llama.cpp, a file without tensors ends right after its metadata.
  if (!impl_->tensors.empty()) pad_to(out, alignment);
  return out;
}

// Tensor t's bytes: its copy, or what its callback writes into `scratch`.
static std::span<const uint8_t> tensor_bytes(const Writer::TensorFill& fill,
                                             const std::vector<uint8_t>& data, uint64_t nbytes,
                                             std::vector<uint8_t>& scratch) {
  if (!fill) return data;
  scratch.assign(nbytes, 0);
  fill(scratch);
  return scratch;
}

std::vector<uint8_t> Writer::to_bytes() const {
  const uint32_t alignment = impl_->alignment();
  std::vector<uint8_t> out = header_bytes();
  std::vector<uint8_t> scratch;
  for (const Impl::Tensor& t : impl_->tensors) {
    append_bytes(out, tensor_bytes(t.fill, t.data, t.nbytes, scratch));
    pad_to(out, alignment);
  }
  return out;
}

void Writer::write(const std::filesystem::path& path, const Progress& progress) const {
  std::filesystem::path tmp = path;
  tmp += ".tmp";
  auto fail_io = [](const std::filesystem::path& p, std::string_view what, int err) {
    fail(ErrorCategory::kIo, "[gguf write {}] {}: found \"{}\", expected success", p.string(), what,
         std::strerror(err));
  };
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (f == nullptr) fail_io(tmp, "open", errno);
  // Closes and removes the temp file on any failure, callbacks' included.
  struct Guard {
    std::FILE*& f;
    const std::filesystem::path& tmp;
    bool done = false;
    ~Guard() {
      if (done) return;
      if (f != nullptr) std::fclose(f);
      std::error_code ignored;
      std::filesystem::remove(tmp, ignored);
    }
  } guard{f, tmp};
  auto put = [&](std::span<const uint8_t> bytes) {
    if (std::fwrite(bytes.data(), 1, bytes.size(), f) != bytes.size()) fail_io(tmp, "write", errno);
  };
  const uint32_t alignment = impl_->alignment();
  put(header_bytes());
  std::vector<uint8_t> scratch;
  const std::vector<uint8_t> zeros(alignment, 0);
  for (size_t i = 0; i < impl_->tensors.size(); ++i) {
    const Impl::Tensor& t = impl_->tensors[i];
    if (progress) progress(i, impl_->tensors.size(), t.name);
    put(tensor_bytes(t.fill, t.data, t.nbytes, scratch));
    put(std::span(zeros).first((alignment - t.nbytes % alignment) % alignment));
  }
  if (std::fflush(f) != 0) fail_io(tmp, "write", errno);
  const int closed = std::fclose(f);
  f = nullptr;
  if (closed != 0) fail_io(tmp, "write", errno);
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) fail_io(path, "rename from " + tmp.string(), ec.value());
  guard.done = true;
}

}  // namespace tessera::gguf
