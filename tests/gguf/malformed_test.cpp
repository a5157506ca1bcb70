// One hand-built file per malformed class (docs/engine.md, "GGUF reader"). Each
// must be refused with Error(kInvalidFile) naming the field and its offset.
#include <gtest/gtest.h>

#include <limits>

#include "gguf/test_util.h"

namespace tessera::gguf::testing {
namespace {

constexpr uint64_t kU64Max = std::numeric_limits<uint64_t>::max();
constexpr uint64_t kFirstKv = 24;  // right after magic, version and the two counts

// ---- header ----

TEST(GgufMalformed, EmptyFile) {
  expect_invalid({}, "empty file", 0);
}

TEST(GgufMalformed, TruncatedHeader) {
  const Bytes full = Bytes().header(0, 0);
  expect_invalid(full.head(3), "magic: found 3 bytes left, expected 4 (file truncated)", 0);
  expect_invalid(full.head(6), "version: found 2 bytes left", 4);
  expect_invalid(full.head(8), "n_tensors: found 0 bytes left", 8);
  expect_invalid(full.head(20), "n_kv: found 4 bytes left", 16);
}

TEST(GgufMalformed, BadMagic) {
  expect_invalid(Bytes().raw("GGML").u32(3).u64(0).u64(0).data(), "not a GGUF file", 0);
  expect_invalid(Bytes()
                     .raw("\x7f"
                          "ELF")
                     .u32(3)
                     .u64(0)
                     .u64(0)
                     .data(),
                 "\".ELF\"", 0);
}

TEST(GgufMalformed, Version0) {
  expect_invalid(Bytes().header(0, 0, 0).data(), "version: found 0", 4);
}

TEST(GgufMalformed, Version1IsNotSupported) {
  expect_invalid(Bytes().header(0, 0, 1).data(), "GGUF v1 is not supported", 4);
}

TEST(GgufMalformed, FutureVersion) {
  expect_invalid(Bytes().header(0, 0, 4).data(), "version: found 4, expected 2 or 3", 4);
  expect_invalid(Bytes().header(0, 0, 0xffffffff).data(), "found 4294967295", 4);
}

TEST(GgufMalformed, BigEndianIsRecognised) {
  // A big-endian writer stores the magic as bytes but the version swapped.
  const Bytes v3 = Bytes().header(0, 0, 0x03000000);
  expect_invalid(v3.data(), "found 0x03000000", 4);
  expect_invalid(v3.data(), "big-endian is not supported", 4);
  expect_invalid(Bytes().header(0, 0, 0x02000000).data(), "big-endian GGUF v2", 4);
}

TEST(GgufMalformed, TensorCountExceedsFile) {
  expect_invalid(Bytes().header(kU64Max, 0).data(), "n_tensors: found 18446744073709551615", 8);
  // 33 bytes left hold one tensor info at most.
  expect_invalid(Bytes().header(2, 0).zeros(33).data(), "n_tensors: found 2, expected at most 1",
                 8);
}

TEST(GgufMalformed, KvCountExceedsFile) {
  expect_invalid(Bytes().header(0, kU64Max).data(), "n_kv: found 18446744073709551615", 16);
  expect_invalid(Bytes().header(0, 2).zeros(20).data(), "n_kv: found 2, expected at most 1", 16);
  // The tensor infos' share of the bytes is not available to key-values.
  expect_invalid(Bytes().header(1, 1).zeros(40).data(), "n_kv: found 1, expected at most 0", 16);
}

// ---- keys and values ----

TEST(GgufMalformed, EmptyKey) {
  expect_invalid(Bytes().header(0, 1).kv_u32("", 1).data(),
                 "key 0 length: found 0, expected 1..65536", kFirstKv);
}

TEST(GgufMalformed, KeyLengthTooLarge) {
  expect_invalid(Bytes().header(0, 1).u64(kU64Max).zeros(20).data(),
                 "key 0 length: found 18446744073709551615, expected 1..65536", kFirstKv);
  const std::string long_key(kMaxKeyLength + 1, 'k');
  expect_invalid(Bytes().header(0, 1).kv_u32(long_key, 1).data(), "found 65537, expected 1..65536",
                 kFirstKv);
}

TEST(GgufMalformed, KeyLongerThanFile) {
  expect_invalid(Bytes().header(0, 1).u64(20).raw("general.na").data(),
                 "key 0 length: found 20, expected at most 10", kFirstKv);
}

TEST(GgufMalformed, TruncatedValue) {
  const Bytes b = Bytes().header(0, 1).kv_type("a.b", ValueType::kU64).u32(0);
  expect_invalid(b.data(), "key 'a.b' u64 value: found 4 bytes left, expected 8 (file truncated)",
                 kFirstKv + 8 + 3 + 4);
}

TEST(GgufMalformed, StringLongerThanFile) {
  const Bytes b = Bytes().header(0, 1).kv_type("a.b", ValueType::kString).u64(100).raw("short");
  expect_invalid(b.data(), "key 'a.b' string length: found 100, expected at most 5",
                 kFirstKv + 8 + 3 + 4);
  const Bytes huge = Bytes().header(0, 1).kv_type("a.b", ValueType::kString).u64(kU64Max).zeros(4);
  expect_invalid(huge.data(), "string length: found 18446744073709551615", kFirstKv + 8 + 3 + 4);
}

TEST(GgufMalformed, UnknownValueType) {
  const Bytes b = Bytes().header(0, 1).str("a.b").u32(13).u32(0);
  expect_invalid(b.data(), "key 'a.b' type: found 13, expected a value type 0..12",
                 kFirstKv + 8 + 3);
}

TEST(GgufMalformed, ArrayCountExceedsFile) {
  const uint64_t count_at = kFirstKv + 8 + 3 + 4 + 4;
  Bytes b = Bytes().header(0, 1).array_header("a.b", ValueType::kU32, 10).u32(1).u32(2).u32(3);
  expect_invalid(b.data(), "key 'a.b' array count: found 10, expected at most 3", count_at);
  // count * element size overflows 64 bits.
  b = Bytes().header(0, 1).array_header("a.b", ValueType::kU64, uint64_t{1} << 61).zeros(16);
  expect_invalid(b.data(), "array count: found 2305843009213693952", count_at);
  // A string array is refused before one offset per element is reserved.
  b = Bytes().header(0, 1).array_header("a.b", ValueType::kString, uint64_t{1} << 60).zeros(16);
  expect_invalid(b.data(), "array count: found 1152921504606846976, expected at most 2", count_at);
}

TEST(GgufMalformed, TruncatedStringArrayElement) {
  const Bytes b = Bytes()
                      .header(0, 1)
                      .array_header("a.b", ValueType::kString, 2)
                      .str("first")
                      .u64(50)
                      .raw("second");
  expect_invalid(b.data(), "key 'a.b' element 1 length: found 50, expected at most 6",
                 kFirstKv + 8 + 3 + 4 + 4 + 8 + 13);
}

TEST(GgufMalformed, UnknownArrayElementType) {
  const Bytes b = Bytes().header(0, 1).str("a.b").u32(9).u32(13).u64(0);
  expect_invalid(b.data(), "key 'a.b' array element type: found 13", kFirstKv + 8 + 3 + 4);
}

TEST(GgufMalformed, NestedArrayIsRefused) {
  const Bytes b = Bytes().header(0, 1).str("a.b").u32(9).u32(9).u64(1).u32(4).u64(0);
  expect_invalid(b.data(), "nested arrays are not supported", kFirstKv + 8 + 3 + 4);
}

TEST(GgufMalformed, DuplicateKey) {
  Bytes b = Bytes().header(0, 3).kv_u32("a.x", 1).kv_u32("a.y", 2);
  const uint64_t second = b.size();
  b.kv_u32("a.x", 3);
  expect_invalid(b.data(),
                 "key 'a.x': found a duplicate key, expected each key once (first @ 0x18)", second);
}

TEST(GgufMalformed, AlignmentNotPowerOfTwo) {
  for (uint32_t alignment : {0u, 13u, 48u}) {
    expect_invalid(
        Bytes().header(0, 1).kv_u32("general.alignment", alignment).data(),
        fmt::format("key 'general.alignment': found {}, expected a non-zero power of two",
                    alignment),
        kFirstKv);
  }
}

// ---- well-known keys with the wrong type ----

struct WrongType {
  std::string key;
  ValueType type;        // written with a zero value of this type
  ValueType element;     // for arrays
  std::string expected;  // the message's "found ..., expected ..." part
};

Bytes with_wrong_type(const WrongType& c, uint64_t* offset) {
  Bytes b = Bytes().header(0, 2).kv_string("general.architecture", "llama");
  *offset = b.size();
  if (c.key == "general.architecture") {
    b = Bytes().header(0, 1);
    *offset = b.size();
  }
  if (c.type == ValueType::kArray) {
    b.array_header(c.key, c.element, 1);
    b.zeros(c.element == ValueType::kString ? 8 : value_type_size(c.element));
  } else if (c.type == ValueType::kString) {
    b.kv_string(c.key, "x");
  } else {
    b.kv_type(c.key, c.type).zeros(value_type_size(c.type));
  }
  return b;
}

TEST(GgufMalformed, WellKnownKeysWithWrongType) {
  using VT = ValueType;
  const std::vector<WrongType> cases = {
      {"general.alignment", VT::kI32, VT::kU8, "found i32, expected u32"},
      {"general.alignment", VT::kU64, VT::kU8, "found u64, expected u32"},
      {"general.architecture", VT::kU32, VT::kU8, "found u32, expected string"},
      {"general.name", VT::kArray, VT::kString, "found array of string, expected string"},
      {"general.file_type", VT::kI32, VT::kU8, "found i32, expected u32"},
      {"general.quantization_version", VT::kF32, VT::kU8, "found f32, expected u32"},
      {"tokenizer.ggml.model", VT::kU8, VT::kU8, "found u8, expected string"},
      {"tokenizer.ggml.pre", VT::kBool, VT::kU8, "found bool, expected string"},
      {"tokenizer.ggml.tokens", VT::kArray, VT::kI32,
       "found array of i32, expected array of string"},
      {"tokenizer.ggml.tokens", VT::kString, VT::kU8, "found string, expected array of string"},
      {"tokenizer.ggml.scores", VT::kArray, VT::kF64, "found array of f64, expected array of f32"},
      {"tokenizer.ggml.token_type", VT::kArray, VT::kU32,
       "found array of u32, expected array of i32"},
      {"tokenizer.ggml.merges", VT::kArray, VT::kU8, "found array of u8, expected array of string"},
      {"tokenizer.ggml.bos_token_id", VT::kI32, VT::kU8, "found i32, expected u32"},
      {"tokenizer.ggml.eos_token_id", VT::kU64, VT::kU8, "found u64, expected u32"},
      {"tokenizer.ggml.unknown_token_id", VT::kI64, VT::kU8, "found i64, expected u32"},
      {"tokenizer.ggml.seperator_token_id", VT::kString, VT::kU8, "found string, expected u32"},
      {"tokenizer.ggml.padding_token_id", VT::kF32, VT::kU8, "found f32, expected u32"},
      {"tokenizer.ggml.add_bos_token", VT::kU8, VT::kU8, "found u8, expected bool"},
      {"tokenizer.ggml.add_eos_token", VT::kU32, VT::kU8, "found u32, expected bool"},
      {"llama.context_length", VT::kI32, VT::kU8, "found i32, expected an unsigned integer"},
      {"llama.embedding_length", VT::kF32, VT::kU8, "found f32, expected an unsigned integer"},
      {"llama.block_count", VT::kArray, VT::kU32,
       "found array of u32, expected an unsigned integer"},
      {"llama.feed_forward_length", VT::kArray, VT::kF32,
       "found array of f32, expected an unsigned integer or an array of integers"},
      {"llama.attention.head_count", VT::kString, VT::kU8,
       "found string, expected an unsigned integer or an array of integers"},
      {"llama.attention.head_count_kv", VT::kI8, VT::kU8,
       "found i8, expected an unsigned integer or an array of integers"},
      {"llama.rope.freq_base", VT::kF64, VT::kU8, "found f64, expected f32"},
      {"llama.attention.layer_norm_rms_epsilon", VT::kU32, VT::kU8, "found u32, expected f32"},
  };
  for (const WrongType& c : cases) {
    SCOPED_TRACE(c.key);
    uint64_t offset = 0;
    const Bytes b = with_wrong_type(c, &offset);
    expect_invalid(b.data(), fmt::format("key '{}': {}", c.key, c.expected), offset);
  }
}

// ---- tensor infos ----

// A file whose only tensor info is written by `info`, followed by padding
// and enough data for a small tensor.
template <class Info>
Bytes one_tensor(Info info, uint64_t data_bytes = 64) {
  Bytes b = Bytes().header(1, 0);
  info(b);
  return b.pad_to(32).zeros(data_bytes);
}

TEST(GgufMalformed, TensorNameLength) {
  expect_invalid(one_tensor([](Bytes& b) { b.tensor_info("", {4}, DType::kF32, 0); }).data(),
                 "tensor 0 name length: found 0, expected 1..63", kFirstKv);
  const std::string name64(64, 'n');
  expect_invalid(one_tensor([&](Bytes& b) { b.tensor_info(name64, {4}, DType::kF32, 0); }).data(),
                 "tensor 0 name length: found 64, expected 1..63", kFirstKv);
  expect_invalid(Bytes().header(1, 0).u64(kU64Max).zeros(40).data(),
                 "found 18446744073709551615, expected 1..63", kFirstKv);
}

TEST(GgufMalformed, TruncatedTensorInfo) {
  // 33 bytes: a full info except its offset.
  const Bytes b = Bytes().header(1, 0).str("w").u32(2).u64(4).u64(4).u32(0);
  expect_invalid(b.data(), "tensor 'w' offset: found 0 bytes left, expected 8 (file truncated)",
                 kFirstKv + 33);
}

TEST(GgufMalformed, NDims) {
  for (uint32_t n_dims : {0u, 5u, 0xffffffffu}) {
    const Bytes b = one_tensor([&](Bytes& x) { x.str("w").u32(n_dims).u64(4).u32(0).u64(0); });
    expect_invalid(b.data(), fmt::format("tensor 'w' n_dims: found {}, expected 1..4", n_dims),
                   kFirstKv + 9);
  }
}

TEST(GgufMalformed, ZeroOrNegativeDim) {
  const uint64_t dim1_at = kFirstKv + 9 + 4 + 8;
  expect_invalid(one_tensor([](Bytes& b) {
                   b.tensor_info("w", {4, 0}, DType::kF32, 0);
                 }).data(),
                 "tensor 'w' dim 1: found 0, expected a size > 0", dim1_at);
  expect_invalid(one_tensor([](Bytes& b) {
                   b.tensor_info("w", {4, kU64Max}, DType::kF32, 0);
                 }).data(),
                 "tensor 'w' dim 1: found -1, expected a size > 0", dim1_at);
  expect_invalid(
      one_tensor([](Bytes& b) { b.tensor_info("w", {uint64_t{1} << 63}, DType::kF32, 0); }).data(),
      "dim 0: found -9223372036854775808", dim1_at - 8);
}

TEST(GgufMalformed, ElementCountOverflows) {
  const Bytes b = one_tensor([](Bytes& x) {
    x.tensor_info("w", {uint64_t{1} << 32, uint64_t{1} << 32}, DType::kF32, 0);
  });
  expect_invalid(b.data(), "tensor 'w' dim 1: found 4294967296", kFirstKv + 9 + 4 + 8);
  expect_invalid(b.data(), "element count overflows", kFirstKv + 9 + 4 + 8);
}

TEST(GgufMalformed, ByteSizeOverflows) {
  // 2^20 * (2^42 + 1) elements fit in int64; as f32 bytes they do not fit in 64 bits.
  const std::string name = "blk.3.attn_q.weight";
  const uint64_t dim1_at = kFirstKv + 8 + name.size() + 4 + 8;
  const Bytes b = one_tensor([&](Bytes& x) {
    x.tensor_info(name, {uint64_t{1} << 20, 4398046511105}, DType::kF32, 0);
  });
  expect_invalid(b.data(), "tensor 'blk.3.attn_q.weight' dim 1: found 4398046511105", dim1_at);
  expect_invalid(b.data(), "byte size overflows", dim1_at);
  // A single row whose byte size overflows.
  const Bytes row =
      one_tensor([](Bytes& x) { x.tensor_info("w", {uint64_t{1} << 62}, DType::kF32, 0); });
  expect_invalid(row.data(), "dim 0: found 4611686018427387904", kFirstKv + 9 + 4);
  expect_invalid(row.data(), "byte size overflows", kFirstKv + 9 + 4);
}

TEST(GgufMalformed, UnknownTensorType) {
  for (uint32_t type : {4u, 5u, 31u, 36u, 1000u, 0xffffffffu}) {
    const Bytes b = one_tensor([&](Bytes& x) { x.str("w").u32(1).u64(32).u32(type).u64(0); });
    expect_invalid(b.data(),
                   fmt::format("tensor 'w' type: found {}, expected a ggml type id", type),
                   kFirstKv + 9 + 4 + 8);
  }
}

TEST(GgufMalformed, QuantizedRowNotWholeBlocks) {
  const Bytes b = one_tensor([](Bytes& x) { x.tensor_info("w", {33, 2}, DType::kQ4_0, 0); });
  expect_invalid(b.data(), "tensor 'w' dim 0: found 33, expected a multiple of 32", kFirstKv + 13);
  const Bytes k = one_tensor([](Bytes& x) { x.tensor_info("w", {128}, DType::kQ4_K, 0); });
  expect_invalid(k.data(), "found 128, expected a multiple of 256 (q4_k", kFirstKv + 13);
}

TEST(GgufMalformed, TensorOffsetNotAligned) {
  const Bytes b = one_tensor([](Bytes& x) { x.tensor_info("w", {4}, DType::kF32, 16); });
  expect_invalid(b.data(), "tensor 'w' offset: found 16, expected a multiple of the alignment 32",
                 kFirstKv + 9 + 4 + 8 + 4);
  // The alignment comes from general.alignment.
  Bytes c = Bytes().header(1, 1).kv_u32("general.alignment", 64);
  const uint64_t info_at = c.size();
  c.tensor_info("w", {4}, DType::kF32, 32).pad_to(64).zeros(128);
  expect_invalid(c.data(), "offset: found 32, expected a multiple of the alignment 64",
                 info_at + 9 + 4 + 8 + 4);
}

TEST(GgufMalformed, TensorDataOutsideFile) {
  // 16 f32 = 64 bytes, but only 32 bytes of data follow.
  const Bytes b = one_tensor([](Bytes& x) { x.tensor_info("w", {16}, DType::kF32, 0); }, 32);
  expect_invalid(b.data(),
                 "tensor 'w' data: found offset 0 + 64 bytes after the data section at 64",
                 kFirstKv);
  expect_invalid(b.data(), "expected to end within the file size 96", kFirstKv);
  // An offset near 2^64 must not wrap around.
  const Bytes wrap =
      one_tensor([](Bytes& x) { x.tensor_info("w", {4}, DType::kF32, kU64Max - 31); });
  expect_invalid(wrap.data(), "tensor 'w' data: found offset 18446744073709551584", kFirstKv);
  // No data section at all.
  Bytes none = Bytes().header(1, 0).tensor_info("w", {4}, DType::kF32, 0);
  expect_invalid(none.data(), "expected to end within the file size 57", kFirstKv);
}

TEST(GgufMalformed, OverlappingTensors) {
  Bytes b = Bytes().header(2, 0).tensor_info("a", {16}, DType::kF32, 0);
  const uint64_t second = b.size();
  b.tensor_info("b", {8}, DType::kF32, 32).pad_to(32).zeros(128);
  expect_invalid(b.data(),
                 "tensor 'b' offset: found 32, expected at least 64 (it overlaps tensor 'a')",
                 second);
  // Listed in the other order: still found after sorting by offset.
  Bytes r = Bytes().header(2, 0).tensor_info("b", {8}, DType::kF32, 32);
  r.tensor_info("a", {16}, DType::kF32, 0).pad_to(32).zeros(128);
  expect_invalid(r.data(), "overlaps tensor 'a'", kFirstKv);
  // Two tensors at the same offset.
  Bytes same = Bytes().header(2, 0).tensor_info("a", {8}, DType::kF32, 0);
  const uint64_t same_second = same.size();
  same.tensor_info("b", {8}, DType::kF32, 0).pad_to(32).zeros(64);
  expect_invalid(same.data(), "overlaps tensor 'a'", same_second);
}

TEST(GgufMalformed, DuplicateTensorName) {
  Bytes b = Bytes().header(2, 0).tensor_info("w", {8}, DType::kF32, 0);
  const uint64_t second = b.size();
  b.tensor_info("w", {8}, DType::kF32, 32).pad_to(32).zeros(64);
  expect_invalid(b.data(), "tensor 'w' name: found a duplicate name, expected unique tensor names",
                 second);
}

// ---- every prefix of a valid file ----

TEST(GgufMalformed, EveryTruncationIsRefused) {
  Writer w;
  w.set_string("general.architecture", "llama");
  w.set_u32("llama.block_count", 1);
  w.set_f32("llama.rope.freq_base", 10000.0f);
  const std::vector<std::string> tokens = {"<unk>", "a", "bc"};
  w.set_array_strings("tokenizer.ggml.tokens", tokens);
  const std::vector<float> scores = {0.0f, -1.0f, -2.0f};
  w.set_array_f32("tokenizer.ggml.scores", scores);
  w.set_bool("tokenizer.ggml.add_bos_token", true);
  const std::vector<uint8_t> data(4 * 8, 1);
  const int64_t shape[] = {4, 2};
  w.add_tensor("a", DType::kF32, shape, data);
  w.add_tensor("b", DType::kF32, shape, data);
  const std::vector<uint8_t> full = w.to_bytes();
  ASSERT_NO_THROW(parse(full));
  for (size_t n = 0; n < full.size(); ++n) {
    const std::vector<uint8_t> head(full.begin(), full.begin() + static_cast<std::ptrdiff_t>(n));
    try {
      parse(head);
      ADD_FAILURE() << "a " << n << "-byte prefix parsed";
    } catch (const Error& e) {
      EXPECT_EQ(e.category(), ErrorCategory::kInvalidFile) << e.what();
      EXPECT_NE(std::string(e.what()).find("@ 0x"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace tessera::gguf::testing
