// The dtype table against GGUF's definitions (ggml_type ids, block sizes and
// bytes as ggml's type traits give them), raw-id and name lookup, row_bytes.
#include "tessera/core/dtype.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "tessera/core/error.h"

namespace tessera {
namespace {

struct Expected {
  uint32_t raw;
  const char* name;
  int64_t block_size;
  size_t block_bytes;
};

// Written out from the format, not from dtype.cpp: the K-quant and IQ sizes are
// the sums of their blocks' fields (e.g. q4_K = 2 + 2 + 12 + 128).
const std::vector<Expected> kGguf = {
    {0, "f32", 1, 4},         {1, "f16", 1, 2},         {2, "q4_0", 32, 18},
    {3, "q4_1", 32, 20},      {6, "q5_0", 32, 22},      {7, "q5_1", 32, 24},
    {8, "q8_0", 32, 34},      {9, "q8_1", 32, 36},      {10, "q2_k", 256, 84},
    {11, "q3_k", 256, 110},   {12, "q4_k", 256, 144},   {13, "q5_k", 256, 176},
    {14, "q6_k", 256, 210},   {15, "q8_k", 256, 292},   {16, "iq2_xxs", 256, 66},
    {17, "iq2_xs", 256, 74},  {18, "iq3_xxs", 256, 98}, {19, "iq1_s", 256, 50},
    {20, "iq4_nl", 32, 18},   {21, "iq3_s", 256, 110},  {22, "iq2_s", 256, 82},
    {23, "iq4_xs", 256, 136}, {24, "i8", 1, 1},         {25, "i16", 1, 2},
    {26, "i32", 1, 4},        {27, "i64", 1, 8},        {28, "f64", 1, 8},
    {29, "iq1_m", 256, 56},   {30, "bf16", 1, 2},       {34, "tq1_0", 256, 54},
    {35, "tq2_0", 256, 66},   {39, "mxfp4", 32, 17},
};

TEST(DType, TableMatchesGguf) {
  for (const Expected& e : kGguf) {
    SCOPED_TRACE(e.name);
    const std::optional<DType> type = dtype_from_raw(e.raw);
    ASSERT_TRUE(type.has_value());
    EXPECT_EQ(static_cast<uint32_t>(*type), e.raw);
    const DTypeInfo& info = dtype_info(*type);
    EXPECT_EQ(info.name, e.name);
    EXPECT_EQ(dtype_name(*type), e.name);
    EXPECT_EQ(info.block_size, e.block_size);
    EXPECT_EQ(info.block_bytes, e.block_bytes);
    EXPECT_EQ(info.quantized, e.block_size > 1);
    // A quantizer is only useful with its dequantizer.
    EXPECT_TRUE(!info.has_quantize || info.has_dequantize);
  }
}

TEST(DType, EveryKnownRawIdIsInTheTable) {
  // Ids 0..64 not listed above must be unknown, so the table has no extras.
  for (uint32_t raw = 0; raw <= 64; ++raw) {
    bool listed = false;
    for (const Expected& e : kGguf) listed = listed || e.raw == raw;
    EXPECT_EQ(dtype_from_raw(raw).has_value(), listed) << raw;
  }
}

TEST(DType, UnknownRawIdsAreRejected) {
  for (uint32_t raw : {4u, 5u, 31u, 32u, 33u, 36u, 37u, 38u, 40u, 41u, 1000u, 0x80000000u,
                       std::numeric_limits<uint32_t>::max()}) {
    EXPECT_FALSE(dtype_from_raw(raw).has_value()) << raw;
  }
}

TEST(DType, InfoOfAnInvalidTypeThrowsInternal) {
  try {
    dtype_info(static_cast<DType>(4));
    FAIL() << "expected an Error";
  } catch (const Error& e) {
    EXPECT_EQ(e.category(), ErrorCategory::kInternal);
  }
}

TEST(DType, FromNameIsCaseInsensitive) {
  EXPECT_EQ(dtype_from_name("f32"), DType::kF32);
  EXPECT_EQ(dtype_from_name("F16"), DType::kF16);
  EXPECT_EQ(dtype_from_name("BF16"), DType::kBF16);
  EXPECT_EQ(dtype_from_name("Q4_0"), DType::kQ4_0);
  EXPECT_EQ(dtype_from_name("q4_K"), DType::kQ4_K);
  EXPECT_EQ(dtype_from_name("Q6_K"), DType::kQ6_K);
  EXPECT_EQ(dtype_from_name("IQ2_XXS"), DType::kIQ2_XXS);
  EXPECT_EQ(dtype_from_name("MXFP4"), DType::kMXFP4);
  for (const Expected& e : kGguf) {
    EXPECT_EQ(dtype_from_name(e.name), dtype_from_raw(e.raw)) << e.name;
  }
}

TEST(DType, FromNameRejectsUnknownNames) {
  for (const char* name : {"", "q4", "q4_2", "q4_0 ", " f32", "f32\n", "float", "q4_k_m", "f"}) {
    EXPECT_FALSE(dtype_from_name(name).has_value()) << '"' << name << '"';
  }
  EXPECT_FALSE(dtype_from_name(std::string_view("f16\0", 4)).has_value());
}

TEST(DType, RowBytesOfWholeBlocks) {
  EXPECT_EQ(row_bytes(DType::kF32, 0), 0u);
  EXPECT_EQ(row_bytes(DType::kF32, 7), 28u);
  EXPECT_EQ(row_bytes(DType::kF16, 4097), 8194u);
  EXPECT_EQ(row_bytes(DType::kBF16, 3), 6u);
  EXPECT_EQ(row_bytes(DType::kQ4_0, 32), 18u);
  EXPECT_EQ(row_bytes(DType::kQ4_0, 4096), 128u * 18u);
  EXPECT_EQ(row_bytes(DType::kQ8_0, 64), 68u);
  EXPECT_EQ(row_bytes(DType::kQ4_K, 4096), 16u * 144u);
  EXPECT_EQ(row_bytes(DType::kQ6_K, 256), 210u);
  EXPECT_EQ(row_bytes(DType::kMXFP4, 96), 51u);
  for (const Expected& e : kGguf) {
    const DType type = *dtype_from_raw(e.raw);
    EXPECT_EQ(row_bytes(type, 3 * e.block_size), 3 * e.block_bytes) << e.name;
  }
}

TEST(DType, RowBytesRejectsPartialBlocksAndNegatives) {
  for (const Expected& e : kGguf) {
    const DType type = *dtype_from_raw(e.raw);
    EXPECT_FALSE(row_bytes(type, -1).has_value()) << e.name;
    EXPECT_FALSE(row_bytes(type, -e.block_size).has_value()) << e.name;
    if (e.block_size > 1) {
      EXPECT_FALSE(row_bytes(type, 1).has_value()) << e.name;
      EXPECT_FALSE(row_bytes(type, e.block_size - 1).has_value()) << e.name;
      EXPECT_FALSE(row_bytes(type, e.block_size + 1).has_value()) << e.name;
      EXPECT_FALSE(row_bytes(type, 7 * e.block_size + e.block_size / 2).has_value()) << e.name;
    }
  }
}

TEST(DType, RowBytesRejectsOverflow) {
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  // Only types with more than 2 bytes per element can overflow a 64-bit size_t
  // from an int64 count. 2^62 f32 elements are 2^64 bytes: one past the limit.
  EXPECT_FALSE(row_bytes(DType::kF32, int64_t{1} << 62).has_value());
  EXPECT_FALSE(row_bytes(DType::kI32, int64_t{1} << 62).has_value());
  EXPECT_EQ(row_bytes(DType::kF32, (int64_t{1} << 62) - 1), ((size_t{1} << 62) - 1) * 4);
  EXPECT_FALSE(row_bytes(DType::kF64, int64_t{1} << 61).has_value());
  EXPECT_FALSE(row_bytes(DType::kI64, kMax).has_value());
  EXPECT_EQ(row_bytes(DType::kF64, (int64_t{1} << 61) - 1), ((size_t{1} << 61) - 1) * 8);
  // The largest quantized rows still fit and are computed without overflow.
  EXPECT_EQ(row_bytes(DType::kQ4_0, kMax / 32 * 32), static_cast<size_t>(kMax / 32) * 18);
  EXPECT_EQ(row_bytes(DType::kQ8_K, kMax / 256 * 256), static_cast<size_t>(kMax / 256) * 292);
}

}  // namespace
}  // namespace tessera
