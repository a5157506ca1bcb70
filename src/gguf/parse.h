// Internal: the parsed contents of a GGUF file and the parsing steps that
// fill them, in file order (header, key-values, tensor infos, layout).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "cursor.h"
#include "tessera/gguf/gguf.h"

namespace tessera::gguf::detail {

// Smallest possible records on disk, used to bound counts before reserving.
inline constexpr uint64_t kMinKvBytes = 8 + 1 + 4 + 1;  // key len, key, type, u8 value
inline constexpr uint64_t kMinTensorInfoBytes = 8 + 1 + 4 + 8 + 4 + 8;  // name, dims, type, offset
inline constexpr uint64_t kMinStringBytes = 8;                          // length only

struct FileData {
  std::string name;
  std::span<const uint8_t> bytes;
  uint32_t version = 0;
  uint32_t alignment = kDefaultAlignment;
  uint64_t header_size = 0;
  uint64_t data_offset = 0;
  std::vector<KeyValue> kvs;
  std::vector<size_t> kv_order;                             // indices into kvs, sorted by key
  std::vector<std::unique_ptr<uint64_t[]>> string_offsets;  // one block per string array
  std::vector<TensorInfo> tensors;
  std::vector<size_t> tensor_order;  // indices into tensors, sorted by name
};

struct ValueBuilder {
  static Value scalar(ValueType type, const uint8_t* data, const Site& site);
  static Value string(const uint8_t* data, uint64_t length, const Site& site);
  static Value array(ValueType element_type, uint64_t count, const uint8_t* data,
                     const uint64_t* string_offsets, const Site& site);
};

// Parses the whole file into `out` (out.name and out.bytes set by the caller).
void parse_file(FileData& out);

// Steps of parse_file, each in its own file.
void parse_kvs(Cursor& cur, uint64_t n_kv, FileData& out);                // kv_parser.cpp
void check_known_keys(FileData& out);                                     // known_keys.cpp
void parse_tensor_infos(Cursor& cur, uint64_t n_tensors, FileData& out);  // tensor_parser.cpp
void check_tensor_layout(const Cursor& cur, FileData& out);               // tensor_parser.cpp

}  // namespace tessera::gguf::detail
