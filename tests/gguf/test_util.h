// Helpers for the GGUF tests: hand-built files and error expectations.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/core/error.h"
#include "tessera/gguf/gguf.h"
#include "test_data.h"

namespace tessera::gguf::testing {

// Builds GGUF bytes field by field, so tests can break any one of them.
class Bytes {
 public:
  template <class T>
  Bytes& put(T v) {
    const size_t at = data_.size();
    data_.resize(at + sizeof(T));
    std::memcpy(data_.data() + at, &v, sizeof(T));
    return *this;
  }
  Bytes& u8(uint8_t v) { return put(v); }
  Bytes& u32(uint32_t v) { return put(v); }
  Bytes& u64(uint64_t v) { return put(v); }
  Bytes& raw(std::string_view s) {
    data_.insert(data_.end(), s.begin(), s.end());
    return *this;
  }
  Bytes& str(std::string_view s) { return u64(s.size()).raw(s); }
  Bytes& zeros(size_t n) {
    data_.resize(data_.size() + n, 0);
    return *this;
  }
  Bytes& pad_to(size_t alignment) {
    data_.resize((data_.size() + alignment - 1) / alignment * alignment, 0);
    return *this;
  }

  Bytes& header(uint64_t n_tensors, uint64_t n_kv, uint32_t version = 3) {
    return u32(kMagic).u32(version).u64(n_tensors).u64(n_kv);
  }
  Bytes& kv_type(std::string_view key, ValueType type) {
    return str(key).u32(static_cast<uint32_t>(type));
  }
  Bytes& kv_u32(std::string_view key, uint32_t v) { return kv_type(key, ValueType::kU32).u32(v); }
  Bytes& kv_string(std::string_view key, std::string_view v) {
    return kv_type(key, ValueType::kString).str(v);
  }
  Bytes& array_header(std::string_view key, ValueType element, uint64_t count) {
    return kv_type(key, ValueType::kArray).u32(static_cast<uint32_t>(element)).u64(count);
  }
  Bytes& tensor_info(std::string_view name, std::vector<uint64_t> dims, DType type,
                     uint64_t offset) {
    str(name).u32(static_cast<uint32_t>(dims.size()));
    for (uint64_t d : dims) u64(d);
    return u32(static_cast<uint32_t>(type)).u64(offset);
  }

  size_t size() const { return data_.size(); }
  const std::vector<uint8_t>& data() const& { return data_; }
  std::vector<uint8_t> data() && { return std::move(data_); }
  std::vector<uint8_t> head(size_t n) const {
    return {data_.begin(), data_.begin() + static_cast<std::ptrdiff_t>(std::min(n, size()))};
  }

 private:
  std::vector<uint8_t> data_;
};

// The File views `bytes`, so they must outlive it: temporaries are refused.
inline File parse(const std::vector<uint8_t>& bytes, std::string name = "test.gguf") {
  return File::from_bytes(bytes, std::move(name));
}
File parse(std::vector<uint8_t>&& bytes, std::string name = "test.gguf") = delete;

// Parsing must fail with kInvalidFile, a message holding `phrase`, and the
// byte offset `offset` ("@ 0x1a2b").
inline void expect_invalid(const std::vector<uint8_t>& bytes, std::string_view phrase,
                           uint64_t offset) {
  try {
    parse(bytes);
    ADD_FAILURE() << "parsed without error; expected \"" << phrase << "\"";
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_EQ(e.category(), ErrorCategory::kInvalidFile) << message;
    EXPECT_NE(message.find(phrase), std::string::npos)
        << "missing \"" << phrase << "\" in " << message;
    const std::string at = fmt::format("[gguf test.gguf @ {:#x}]", offset);
    EXPECT_EQ(message.rfind(at, 0), 0u) << "expected prefix " << at << " in " << message;
  }
}

using tessera::testing::fixtures_dir;
using tessera::testing::models_dir;

}  // namespace tessera::gguf::testing
