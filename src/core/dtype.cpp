#include "tessera/core/dtype.h"

#include <array>
#include <cctype>
#include <limits>

#include "tessera/core/error.h"

namespace tessera {
namespace {

constexpr int64_t kQK = 32;   // elements in a legacy quant block
constexpr int64_t kQKK = 256; // elements in a K-quant super-block

struct Entry {
  DType type;
  DTypeInfo info;
};

// name, block_size, block_bytes, quantized, has_dequantize, has_quantize
constexpr std::array kTable = {
    Entry{DType::kF32, {"f32", 1, 4, false, true, true}},
    Entry{DType::kF16, {"f16", 1, 2, false, true, true}},
    Entry{DType::kQ4_0, {"q4_0", kQK, 18, true, true, true}},
    Entry{DType::kQ4_1, {"q4_1", kQK, 20, true, true, true}},
    Entry{DType::kQ5_0, {"q5_0", kQK, 22, true, true, true}},
    Entry{DType::kQ5_1, {"q5_1", kQK, 24, true, true, true}},
    Entry{DType::kQ8_0, {"q8_0", kQK, 34, true, true, true}},
    Entry{DType::kQ8_1, {"q8_1", kQK, 36, true, false, false}},
    Entry{DType::kQ2_K, {"q2_k", kQKK, 84, true, true, true}},
    Entry{DType::kQ3_K, {"q3_k", kQKK, 110, true, true, true}},
    Entry{DType::kQ4_K, {"q4_k", kQKK, 144, true, true, true}},
    Entry{DType::kQ5_K, {"q5_k", kQKK, 176, true, true, true}},
    Entry{DType::kQ6_K, {"q6_k", kQKK, 210, true, true, true}},
    Entry{DType::kQ8_K, {"q8_k", kQKK, 292, true, true, true}},
    Entry{DType::kIQ2_XXS, {"iq2_xxs", kQKK, 66, true, false, false}},
    Entry{DType::kIQ2_XS, {"iq2_xs", kQKK, 74, true, false, false}},
    Entry{DType::kIQ3_XXS, {"iq3_xxs", kQKK, 98, true, false, false}},
    Entry{DType::kIQ1_S, {"iq1_s", kQKK, 50, true, false, false}},
    Entry{DType::kIQ4_NL, {"iq4_nl", kQK, 18, true, true, true}},
    Entry{DType::kIQ3_S, {"iq3_s", kQKK, 110, true, false, false}},
    Entry{DType::kIQ2_S, {"iq2_s", kQKK, 82, true, false, false}},
    Entry{DType::kIQ4_XS, {"iq4_xs", kQKK, 136, true, true, true}},
    Entry{DType::kI8, {"i8", 1, 1, false, false, false}},
    Entry{DType::kI16, {"i16", 1, 2, false, false, false}},
    Entry{DType::kI32, {"i32", 1, 4, false, false, false}},
    Entry{DType::kI64, {"i64", 1, 8, false, false, false}},
    Entry{DType::kF64, {"f64", 1, 8, false, false, false}},
    Entry{DType::kIQ1_M, {"iq1_m", kQKK, 56, true, false, false}},
    Entry{DType::kBF16, {"bf16", 1, 2, false, true, true}},
    Entry{DType::kTQ1_0, {"tq1_0", kQKK, 54, true, false, false}},
    Entry{DType::kTQ2_0, {"tq2_0", kQKK, 66, true, false, false}},
    Entry{DType::kMXFP4, {"mxfp4", kQK, 17, true, true, true}},
};

const Entry* find_entry(uint32_t raw) {
  for (const Entry& e : kTable) {
    if (static_cast<uint32_t>(e.type) == raw) return &e;
  }
  return nullptr;
}

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(a[i])) !=
        std::tolower(static_cast<unsigned char>(b[i]))) {
      return false;
    }
  }
  return true;
}

}  // namespace

const DTypeInfo& dtype_info(DType type) {
  const Entry* e = find_entry(static_cast<uint32_t>(type));
  TESSERA_CHECK(e != nullptr, "unknown dtype {}", static_cast<uint32_t>(type));
  return e->info;
}

std::optional<DType> dtype_from_raw(uint32_t raw) {
  const Entry* e = find_entry(raw);
  if (e == nullptr) return std::nullopt;
  return e->type;
}

std::optional<DType> dtype_from_name(std::string_view name) {
  for (const Entry& e : kTable) {
    if (iequals(e.info.name, name)) return e.type;
  }
  return std::nullopt;
}

std::optional<size_t> row_bytes(DType type, int64_t n) {
  const DTypeInfo& info = dtype_info(type);
  if (n < 0 || n % info.block_size != 0) return std::nullopt;
  const uint64_t blocks = static_cast<uint64_t>(n / info.block_size);
  if (blocks > std::numeric_limits<size_t>::max() / info.block_bytes) return std::nullopt;
  return static_cast<size_t>(blocks) * info.block_bytes;
}

}  // namespace tessera
