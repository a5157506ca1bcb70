// Valid files: versions, every value type, arrays, tensors, vocab-only
// files, typed accessors and File::open.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <fstream>
#include <limits>

#include "gguf/test_util.h"

namespace tessera::gguf::testing {
namespace {

using VT = ValueType;

std::filesystem::path temp_path(std::string_view name) {
  return std::filesystem::path(::testing::TempDir()) /
         fmt::format("gguf_reader_{}_{}", getpid(), name);
}

template <class F>
Error catch_error(F f) {
  try {
    f();
  } catch (const Error& e) {
    return e;
  }
  ADD_FAILURE() << "no error thrown";
  return Error(ErrorCategory::kInternal, "");
}

TEST(GgufReader, MinimalV2AndV3) {
  for (uint32_t version : {2u, 3u}) {
    const Bytes b = Bytes().header(0, 0, version);
    const File f = parse(b.data());
    EXPECT_EQ(f.version(), version);
    EXPECT_EQ(f.file_size(), 24u);
    EXPECT_EQ(f.header_size(), 24u);
    EXPECT_EQ(f.data_offset(), 32u);  // past the end: no tensors, no padding
    EXPECT_EQ(f.alignment(), kDefaultAlignment);
    EXPECT_TRUE(f.kvs().empty());
    EXPECT_TRUE(f.tensors().empty());
    EXPECT_EQ(f.find("general.name"), nullptr);
    EXPECT_EQ(f.find_tensor("w"), nullptr);
    EXPECT_EQ(f.name(), "test.gguf");
  }
}

// One key per scalar type, plus a string.
Bytes every_scalar() {
  Bytes b = Bytes().header(0, 13, 2);
  b.kv_type("t.u8", VT::kU8).u8(200);
  b.kv_type("t.i8", VT::kI8).put<int8_t>(-5);
  b.kv_type("t.u16", VT::kU16).put<uint16_t>(65535);
  b.kv_type("t.i16", VT::kI16).put<int16_t>(-30000);
  b.kv_type("t.u32", VT::kU32).u32(4000000000u);
  b.kv_type("t.i32", VT::kI32).put<int32_t>(-7);
  b.kv_type("t.f32", VT::kF32).put<float>(1.5f);
  b.kv_type("t.bool", VT::kBool).u8(1);
  b.kv_string("t.string", "héllo");
  b.kv_type("t.u64", VT::kU64).u64(std::numeric_limits<uint64_t>::max());
  b.kv_type("t.i64", VT::kI64).put<int64_t>(std::numeric_limits<int64_t>::min());
  b.kv_type("t.f64", VT::kF64).put<double>(M_PI);
  b.kv_type("t.false", VT::kBool).u8(0);
  return b;
}

TEST(GgufReader, EveryScalarType) {
  const Bytes b = every_scalar();
  const File f = parse(b.data());
  EXPECT_EQ(f.version(), 2u);
  ASSERT_EQ(f.kvs().size(), 13u);
  EXPECT_EQ(f.kvs()[0].key, "t.u8");
  EXPECT_EQ(f.kvs()[0].offset, 24u);
  EXPECT_EQ(f.kvs()[1].offset, 24u + 8 + 4 + 4 + 1);
  EXPECT_EQ(f.find("t.u8")->type(), VT::kU8);
  EXPECT_EQ(f.find("t.u8")->u32(), 200u);
  EXPECT_EQ(f.find("t.i8")->i64(), -5);
  EXPECT_EQ(f.find("t.u16")->u64(), 65535u);
  EXPECT_EQ(f.find("t.i16")->i64(), -30000);
  EXPECT_EQ(f.find("t.u32")->u32(), 4000000000u);
  EXPECT_EQ(f.find("t.i32")->i64(), -7);
  EXPECT_EQ(f.find("t.f32")->f32(), 1.5f);
  EXPECT_EQ(f.find("t.f32")->f64(), 1.5);
  EXPECT_TRUE(f.find("t.bool")->boolean());
  EXPECT_FALSE(f.find("t.false")->boolean());
  EXPECT_EQ(f.find("t.string")->string(), "héllo");
  EXPECT_EQ(f.find("t.u64")->u64(), std::numeric_limits<uint64_t>::max());
  EXPECT_EQ(f.find("t.i64")->i64(), std::numeric_limits<int64_t>::min());
  EXPECT_EQ(f.find("t.f64")->f64(), M_PI);
  EXPECT_EQ(f.find("t.f64")->f32(), static_cast<float>(M_PI));
  for (const KeyValue& kv : f.kvs()) {
    EXPECT_EQ(f.find(kv.key), &kv.value);
    EXPECT_EQ(kv.value.key(), kv.key);
    EXPECT_FALSE(kv.value.to_display_string().empty());
  }
  EXPECT_EQ(f.find("t.i16")->to_display_string(), "-30000");
  EXPECT_EQ(f.find("t.f32")->to_display_string(), "1.5");
  EXPECT_EQ(f.find("t.bool")->to_display_string(), "true");
  EXPECT_EQ(f.find("t.string")->to_display_string(), "\"h\\xc3\\xa9llo\"");
}

TEST(GgufReader, AccessorsRefuseOtherTypesNamingTheKey) {
  const Bytes b = every_scalar();
  const File f = parse(b.data());
  const Error e = catch_error([&] { (void)f.find("t.i32")->u32(); });
  EXPECT_EQ(e.category(), ErrorCategory::kInvalidFile);
  EXPECT_STREQ(e.what(), "[gguf test.gguf @ 0x75] key 't.i32': found i32 -7, expected u32");
  EXPECT_THROW((void)f.find("t.u64")->u32(), Error);  // does not fit
  EXPECT_THROW((void)f.find("t.u64")->i64(), Error);  // does not fit
  EXPECT_THROW((void)f.find("t.i64")->u64(), Error);  // negative
  EXPECT_THROW((void)f.find("t.f32")->u32(), Error);
  EXPECT_THROW((void)f.find("t.u32")->f32(), Error);
  EXPECT_THROW((void)f.find("t.u8")->boolean(), Error);
  EXPECT_THROW((void)f.find("t.u8")->string(), Error);
  EXPECT_THROW((void)f.find("t.string")->array(), Error);
  EXPECT_TRUE(f.find("t.u8")->is_integer());
  EXPECT_FALSE(f.find("t.bool")->is_integer());
  EXPECT_FALSE(f.find("t.f64")->is_integer());
}

TEST(GgufReader, ArraysOfEveryElementType) {
  Bytes b = Bytes().header(0, 13);
  b.array_header("a.u8", VT::kU8, 3).u8(1).u8(2).u8(255);
  b.array_header("a.i8", VT::kI8, 2).put<int8_t>(-128).put<int8_t>(127);
  b.array_header("a.u16", VT::kU16, 1).put<uint16_t>(65535);
  b.array_header("a.i16", VT::kI16, 1).put<int16_t>(-2);
  b.array_header("a.u32", VT::kU32, 2).u32(7).u32(4000000000u);
  b.array_header("a.i32", VT::kI32, 3).put<int32_t>(1).put<int32_t>(-1).put<int32_t>(3);
  b.array_header("a.f32", VT::kF32, 2).put<float>(0.5f).put<float>(-2.0f);
  b.array_header("a.bool", VT::kBool, 2).u8(1).u8(0);
  b.array_header("a.string", VT::kString, 3).str("x").str("").str("yz");
  b.array_header("a.u64", VT::kU64, 1).u64(std::numeric_limits<uint64_t>::max());
  b.array_header("a.i64", VT::kI64, 1).put<int64_t>(-9);
  b.array_header("a.f64", VT::kF64, 1).put<double>(0.25);
  b.array_header("a.empty", VT::kString, 0);
  const File f = parse(b.data());

  const ArrayView& u8 = f.find("a.u8")->array();
  EXPECT_EQ(u8.element_type(), VT::kU8);
  ASSERT_EQ(u8.size(), 3u);
  EXPECT_EQ(u8.number<int>(2), 255);
  EXPECT_EQ(u8.number<float>(0), 1.0f);
  EXPECT_EQ(u8.raw_bytes().size(), 3u);
  EXPECT_EQ(f.find("a.i8")->array().number<int8_t>(0), -128);
  EXPECT_EQ(f.find("a.u16")->array().number<uint16_t>(0), 65535);
  EXPECT_EQ(f.find("a.i16")->array().number<int64_t>(0), -2);
  EXPECT_EQ(f.find("a.u32")->array().number<uint32_t>(1), 4000000000u);
  EXPECT_EQ(f.find("a.i32")->array().number<int32_t>(1), -1);
  EXPECT_EQ(f.find("a.f32")->array().number<float>(1), -2.0f);
  EXPECT_TRUE(f.find("a.bool")->array().number<bool>(0));
  EXPECT_FALSE(f.find("a.bool")->array().number<bool>(1));
  EXPECT_EQ(f.find("a.u64")->array().number<uint64_t>(0), std::numeric_limits<uint64_t>::max());
  EXPECT_EQ(f.find("a.i64")->array().number<int64_t>(0), -9);
  EXPECT_EQ(f.find("a.f64")->array().number<double>(0), 0.25);
  const ArrayView& s = f.find("a.string")->array();
  ASSERT_EQ(s.size(), 3u);
  EXPECT_EQ(s.string(0), "x");
  EXPECT_EQ(s.string(1), "");
  EXPECT_EQ(s.string(2), "yz");
  EXPECT_EQ(f.find("a.empty")->array().size(), 0u);
  EXPECT_EQ(f.find("a.empty")->array().element_type(), VT::kString);

  EXPECT_EQ(f.find("a.i32")->to_display_string(2), "[1, -1, ...] (3 x i32)");
  EXPECT_EQ(f.find("a.string")->to_display_string(), "[\"x\", \"\", \"yz\"] (3 x string)");
  EXPECT_EQ(f.find("a.empty")->to_display_string(), "[] (0 x string)");
  EXPECT_EQ(f.find("a.u8")->to_display_string(0), "[...] (3 x u8)");
}

TEST(GgufReader, ArrayElementsRefuseWrongUse) {
  Bytes b = Bytes().header(0, 3);
  b.array_header("a.i32", VT::kI32, 2).put<int32_t>(-1).put<int32_t>(300);
  b.array_header("a.f32", VT::kF32, 1).put<float>(0.5f);
  b.array_header("a.s", VT::kString, 1).str("x");
  const File f = parse(b.data());
  const ArrayView& a = f.find("a.i32")->array();
  Error e = catch_error([&] { (void)a.number<uint32_t>(0); });
  EXPECT_EQ(e.category(), ErrorCategory::kInvalidFile);
  EXPECT_NE(std::string(e.what()).find("key 'a.i32' element 0: found -1, expected a value in 0.."),
            std::string::npos)
      << e.what();
  EXPECT_THROW((void)a.number<int8_t>(1), Error);  // 300 does not fit
  EXPECT_EQ(a.number<int16_t>(1), 300);
  e = catch_error([&] { (void)a.number<int32_t>(2); });
  EXPECT_EQ(e.category(), ErrorCategory::kInvalidArgument);
  EXPECT_THROW((void)a.string(0), Error);
  EXPECT_THROW((void)a.number<bool>(0), Error);
  EXPECT_THROW((void)f.find("a.f32")->array().number<int>(0), Error);
  EXPECT_THROW((void)f.find("a.s")->array().number<double>(0), Error);
  EXPECT_THROW((void)f.find("a.s")->array().raw_bytes(), Error);
  EXPECT_THROW((void)f.find("a.s")->array().string(1), Error);
}

TEST(GgufReader, VocabOnlyFileWithoutPadding) {
  Bytes b = Bytes().header(0, 3);
  b.kv_string("general.architecture", "llama");
  b.kv_string("tokenizer.ggml.model", "llama");
  b.array_header("tokenizer.ggml.tokens", VT::kString, 2).str("a").str("bcd");
  ASSERT_NE(b.size() % 32, 0u);
  const File f = parse(b.data());
  EXPECT_EQ(f.tensors().size(), 0u);
  EXPECT_EQ(f.header_size(), b.size());
  EXPECT_EQ(f.file_size(), b.size());
  EXPECT_GT(f.data_offset(), f.file_size());
  EXPECT_EQ(f.data_offset() % 32, 0u);
  EXPECT_EQ(f.find("tokenizer.ggml.tokens")->array().string(1), "bcd");
}

TEST(GgufReader, TensorsWithGapsAndQuantizedTypes) {
  Bytes b = Bytes().header(3, 1).kv_u32("general.alignment", 64);
  const uint64_t first_info = b.size();
  b.tensor_info("q", {64, 2}, DType::kQ4_0, 128);  // 2 rows x 2 blocks x 18 bytes
  b.tensor_info("f", {3, 1, 2, 1}, DType::kF32, 0);
  b.tensor_info("h", {5}, DType::kF16, 320);  // a gap before it
  b.pad_to(64);
  const uint64_t data_start = b.size();
  for (int i = 0; i < 330; ++i) b.u8(static_cast<uint8_t>(i));
  const File f = parse(b.data());
  EXPECT_EQ(f.alignment(), 64u);
  EXPECT_EQ(f.data_offset(), data_start);
  ASSERT_EQ(f.tensors().size(), 3u);
  const TensorInfo& q = f.tensors()[0];
  EXPECT_EQ(q.name, "q");
  EXPECT_EQ(q.type, DType::kQ4_0);
  EXPECT_EQ(q.n_dims, 2);
  EXPECT_EQ(q.ne, (std::array<int64_t, 4>{64, 2, 1, 1}));
  EXPECT_EQ(q.nbytes, 72u);
  EXPECT_EQ(q.n_elements(), 128);
  EXPECT_EQ(q.info_offset, first_info);
  const TensorInfo* fi = f.find_tensor("f");
  ASSERT_NE(fi, nullptr);
  EXPECT_EQ(fi->n_dims, 4);
  EXPECT_EQ(fi->nbytes, 24u);
  const TensorInfo* h = f.find_tensor("h");
  ASSERT_NE(h, nullptr);
  EXPECT_EQ(h->nbytes, 10u);
  const std::span<const uint8_t> data = f.tensor_data(*h);
  ASSERT_EQ(data.size(), 10u);
  EXPECT_EQ(data[0], 320 % 256);
  EXPECT_EQ(data.data(), b.data().data() + data_start + 320);
  EXPECT_EQ(f.find_tensor("x"), nullptr);

  const Bytes other =
      Bytes().header(1, 0).tensor_info("h", {5}, DType::kF16, 0).pad_to(32).zeros(32);
  const File g = parse(other.data());
  const Error e = catch_error([&] { (void)f.tensor_data(g.tensors()[0]); });
  EXPECT_EQ(e.category(), ErrorCategory::kInvalidArgument);
}

TEST(GgufReader, PerLayerArraysAndWideIntegersForHyperparameters) {
  Bytes b = Bytes().header(0, 5).kv_string("general.architecture", "llama");
  b.array_header("llama.feed_forward_length", VT::kI32, 2).put<int32_t>(64).put<int32_t>(96);
  b.array_header("llama.attention.head_count_kv", VT::kU32, 2).u32(2).u32(4);
  b.kv_type("llama.context_length", VT::kU64).u64(4096);
  b.kv_type("llama.block_count", VT::kU16).put<uint16_t>(2);
  const File f = parse(b.data());
  EXPECT_EQ(f.find("llama.context_length")->u32(), 4096u);
  EXPECT_EQ(f.find("llama.block_count")->u32(), 2u);
  EXPECT_EQ(f.find("llama.feed_forward_length")->array().number<uint32_t>(1), 96u);
}

TEST(GgufReader, OpenMapsAFile) {
  const Bytes b = Bytes()
                      .header(1, 1)
                      .kv_string("general.name", "mapped")
                      .tensor_info("w", {2}, DType::kF32, 0)
                      .pad_to(32)
                      .put<float>(1.0f)
                      .put<float>(2.0f);
  const std::filesystem::path path = temp_path("open.gguf");
  {
    std::ofstream out(path, std::ios::binary);
    out.write(reinterpret_cast<const char*>(b.data().data()),
              static_cast<std::streamsize>(b.size()));
  }
  File f = File::open(path);
  EXPECT_EQ(f.name(), path.string());
  EXPECT_EQ(f.file_size(), b.size());
  File moved = std::move(f);
  EXPECT_EQ(moved.find("general.name")->string(), "mapped");
  const std::span<const uint8_t> data = moved.tensor_data(moved.tensors()[0]);
  float values[2];
  std::memcpy(values, data.data(), sizeof(values));
  EXPECT_EQ(values[1], 2.0f);
  std::filesystem::remove(path);
}

// The process's resident pages of its file mappings (VmRSS's file part).
int64_t rss_file_kib() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("RssFile:", 0) == 0) return std::stoll(line.substr(8));
  }
  return -1;
}

TEST(GgufReader, ReleaseDropsATensorsPagesAndKeepsItsBytes) {
  constexpr int64_t kFloats = int64_t{4} << 20;  // 16 MiB
  Bytes b = Bytes().header(1, 0).tensor_info("w", {kFloats}, DType::kF32, 0).pad_to(32);
  for (int64_t i = 0; i < kFloats; ++i) b.put<float>(static_cast<float>(i % 1000003));
  const std::filesystem::path path = temp_path("release.gguf");
  {
    std::ofstream out(path, std::ios::binary);
    out.write(reinterpret_cast<const char*>(b.data().data()),
              static_cast<std::streamsize>(b.size()));
  }
  const File f = File::open(path);
  const TensorInfo& w = f.tensors()[0];
  const auto sum = [&] {
    const std::span<const uint8_t> data = f.tensor_data(w);
    double total = 0;
    for (size_t i = 0; i < data.size(); i += sizeof(float)) {
      float v;
      std::memcpy(&v, data.data() + i, sizeof v);
      total += v;
    }
    return total;
  };
  const double want = sum();  // every page of the tensor now mapped
  const int64_t mapped = rss_file_kib();
  f.release(w);
  const int64_t released = rss_file_kib();
  ASSERT_GE(mapped, 0) << "no RssFile in /proc/self/status";
  EXPECT_GE(mapped - released, 15 * 1024) << "mapped " << mapped << " KiB, after release " << released;
  EXPECT_EQ(sum(), want);  // the bytes read back from the file
  f.release(w);            // twice is fine
  EXPECT_EQ(sum(), want);
  std::filesystem::remove(path);
}

TEST(GgufReader, OpenReportsIoAndEmptyFiles) {
  const std::filesystem::path missing = temp_path("missing.gguf");
  Error e = catch_error([&] { File::open(missing); });
  EXPECT_EQ(e.category(), ErrorCategory::kIo);
  EXPECT_NE(std::string(e.what()).find(missing.string()), std::string::npos) << e.what();

  e = catch_error([&] { File::open(::testing::TempDir()); });
  EXPECT_EQ(e.category(), ErrorCategory::kIo);

  const std::filesystem::path empty = temp_path("empty.gguf");
  std::ofstream(empty).close();
  e = catch_error([&] { File::open(empty); });
  EXPECT_EQ(e.category(), ErrorCategory::kInvalidFile);
  EXPECT_NE(std::string(e.what()).find("empty file"), std::string::npos) << e.what();
  EXPECT_NE(std::string(e.what()).find("@ 0x0]"), std::string::npos) << e.what();
  std::filesystem::remove(empty);
}

TEST(GgufReader, ValueTypeNames) {
  EXPECT_EQ(value_type_name(VT::kU32), "u32");
  EXPECT_EQ(value_type_name(VT::kString), "string");
  EXPECT_EQ(value_type_name(VT::kArray), "array");
  EXPECT_EQ(value_type_name(static_cast<VT>(99)), "unknown");
  EXPECT_EQ(value_type_size(VT::kF64), 8u);
  EXPECT_EQ(value_type_size(VT::kString), 0u);
}

}  // namespace
}  // namespace tessera::gguf::testing
