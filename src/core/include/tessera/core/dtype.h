// Element types and their block layouts, numbered exactly as GGUF (ggml_type)
// numbers them. A quantized type stores `block_size` elements in `block_bytes`
// bytes; a row of a quantized tensor must be a whole number of blocks.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace tessera {

enum class DType : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  // 4 and 5 were Q4_2 / Q4_3, removed from the format.
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ8_0 = 8,
  kQ8_1 = 9,
  kQ2_K = 10,
  kQ3_K = 11,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kQ8_K = 15,
  kIQ2_XXS = 16,
  kIQ2_XS = 17,
  kIQ3_XXS = 18,
  kIQ1_S = 19,
  kIQ4_NL = 20,
  kIQ3_S = 21,
  kIQ2_S = 22,
  kIQ4_XS = 23,
  kI8 = 24,
  kI16 = 25,
  kI32 = 26,
  kI64 = 27,
  kF64 = 28,
  kIQ1_M = 29,
  kBF16 = 30,
  // 31..33 were the Q4_0_4_4 family, removed from the format.
  kTQ1_0 = 34,
  kTQ2_0 = 35,
  kMXFP4 = 39,
};

struct DTypeInfo {
  std::string_view name;  // as ggml spells it: "q4_0", "f16", ...
  int64_t block_size;     // elements per block (1 for plain types)
  size_t block_bytes;     // bytes per block
  bool quantized;
  // tessera can convert this type to and from f32 (dequantize_row works);
  // the others are known so that files holding them can be inspected.
  bool has_dequantize;
  bool has_quantize;
};

// Info for a known type. `type` must be valid (see dtype_from_raw).
const DTypeInfo& dtype_info(DType type);
inline std::string_view dtype_name(DType type) { return dtype_info(type).name; }

// Maps a raw GGUF type id to a DType; nullopt for ids that name no type.
std::optional<DType> dtype_from_raw(uint32_t raw);
// Case-insensitive lookup by name ("Q4_0", "f16").
std::optional<DType> dtype_from_name(std::string_view name);

// Bytes of `n` elements of `type`; nullopt if n is not a whole number of
// blocks or the byte count overflows.
std::optional<size_t> row_bytes(DType type, int64_t n);

// Scalar references: convert `n` elements (n a multiple of the block size).
// Throw Error(kUnsupported) for types without a reference.
void dequantize_row(DType type, const void* src, float* dst, int64_t n);
void quantize_row(DType type, const float* src, void* dst, int64_t n);

}  // namespace tessera
