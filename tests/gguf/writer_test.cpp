// Writer: random round trips through the reader, layout, misuse, write().
#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <random>
#include <variant>

#include "gguf/test_util.h"

namespace tessera::gguf::testing {
namespace {

using VT = ValueType;

// One random key-value: a scalar, a string, or an array, kept to compare.
struct Expected {
  std::string key;
  VT type;
  VT element = VT::kU8;
  std::vector<uint8_t> raw;          // numeric scalars and arrays, little-endian
  std::vector<std::string> strings;  // string (one) or string array
  uint64_t count = 0;
};

constexpr VT kScalarTypes[] = {VT::kU8,  VT::kI8,   VT::kU16, VT::kI16, VT::kU32, VT::kI32,
                               VT::kF32, VT::kBool, VT::kU64, VT::kI64, VT::kF64};

class RandomFile {
 public:
  explicit RandomFile(uint64_t seed) : rng_(seed) {}

  std::string random_string(size_t max_len) {
    std::string s(rng_() % (max_len + 1), '\0');
    for (char& c : s) c = static_cast<char>(rng_() % 256);
    return s;
  }

  // `count` random elements of a scalar type; floats finite so they compare.
  std::vector<uint8_t> random_elements(VT type, uint64_t count) {
    std::vector<uint8_t> out;
    for (uint64_t i = 0; i < count; ++i) {
      uint64_t bits = rng_();
      if (type == VT::kBool) bits &= 1;
      if (type == VT::kF32) {
        const float f = std::uniform_real_distribution<float>(-1e6f, 1e6f)(rng_);
        std::memcpy(&bits, &f, 4);
      } else if (type == VT::kF64) {
        const double d = std::uniform_real_distribution<double>(-1e300, 1e300)(rng_);
        std::memcpy(&bits, &d, 8);
      }
      const size_t n = value_type_size(type);
      out.insert(out.end(), reinterpret_cast<uint8_t*>(&bits),
                 reinterpret_cast<uint8_t*>(&bits) + n);
    }
    return out;
  }

  Expected add_scalar(Writer& w, std::string key, VT type) {
    Expected e{std::move(key), type};
    e.raw = random_elements(type, 1);
    const uint8_t* p = e.raw.data();
    auto load = [p]<class T>(T) {
      T v;
      std::memcpy(&v, p, sizeof(T));
      return v;
    };
    switch (type) {
      case VT::kU8:
        w.set_u8(e.key, load(uint8_t{}));
        break;
      case VT::kI8:
        w.set_i8(e.key, load(int8_t{}));
        break;
      case VT::kU16:
        w.set_u16(e.key, load(uint16_t{}));
        break;
      case VT::kI16:
        w.set_i16(e.key, load(int16_t{}));
        break;
      case VT::kU32:
        w.set_u32(e.key, load(uint32_t{}));
        break;
      case VT::kI32:
        w.set_i32(e.key, load(int32_t{}));
        break;
      case VT::kF32:
        w.set_f32(e.key, load(float{}));
        break;
      case VT::kBool:
        w.set_bool(e.key, p[0] != 0);
        break;
      case VT::kU64:
        w.set_u64(e.key, load(uint64_t{}));
        break;
      case VT::kI64:
        w.set_i64(e.key, load(int64_t{}));
        break;
      case VT::kF64:
        w.set_f64(e.key, load(double{}));
        break;
      default:
        ADD_FAILURE();
    }
    return e;
  }

  Expected add_array(Writer& w, std::string key, VT element) {
    Expected e{std::move(key), VT::kArray, element};
    e.count = rng_() % 20;
    if (element == VT::kString) {
      for (uint64_t i = 0; i < e.count; ++i) e.strings.push_back(random_string(30));
      w.set_array_strings(e.key, e.strings);
      return e;
    }
    e.raw = random_elements(element, e.count);
    auto set = [&]<class T>(T) {
      // Not std::vector: vector<bool> has no data().
      auto v = std::make_unique<T[]>(e.count);
      if (e.count > 0) std::memcpy(v.get(), e.raw.data(), e.raw.size());
      w.set_array<T>(e.key, std::span<const T>(v.get(), e.count));
    };
    switch (element) {
      case VT::kU8:
        set(uint8_t{});
        break;
      case VT::kI8:
        set(int8_t{});
        break;
      case VT::kU16:
        set(uint16_t{});
        break;
      case VT::kI16:
        set(int16_t{});
        break;
      case VT::kU32:
        set(uint32_t{});
        break;
      case VT::kI32:
        set(int32_t{});
        break;
      case VT::kF32:
        set(float{});
        break;
      case VT::kBool:
        set(bool{});
        break;
      case VT::kU64:
        set(uint64_t{});
        break;
      case VT::kI64:
        set(int64_t{});
        break;
      case VT::kF64:
        set(double{});
        break;
      default:
        ADD_FAILURE();
    }
    return e;
  }

  std::mt19937_64& rng() { return rng_; }

 private:
  std::mt19937_64 rng_;
};

void expect_value(const Value& v, const Expected& e) {
  SCOPED_TRACE(e.key);
  ASSERT_EQ(v.type(), e.type);
  if (e.type == VT::kString) {
    EXPECT_EQ(v.string(), e.strings[0]);
    return;
  }
  if (e.type != VT::kArray) {
    // Scalars compare as raw bits; the accessors are exercised in reader_test.
    std::vector<uint8_t> got(value_type_size(e.type));
    switch (e.type) {
      case VT::kF32: {
        const float f = v.f32();
        std::memcpy(got.data(), &f, 4);
        break;
      }
      case VT::kF64: {
        const double d = v.f64();
        std::memcpy(got.data(), &d, 8);
        break;
      }
      case VT::kBool:
        got[0] = v.boolean() ? 1 : 0;
        break;
      case VT::kU8:
      case VT::kU16:
      case VT::kU32:
      case VT::kU64: {
        const uint64_t u = v.u64();
        std::memcpy(got.data(), &u, got.size());
        break;
      }
      default: {
        const int64_t i = v.i64();
        std::memcpy(got.data(), &i, got.size());
        break;
      }
    }
    EXPECT_EQ(got, e.raw);
    return;
  }
  const ArrayView& a = v.array();
  ASSERT_EQ(a.element_type(), e.element);
  ASSERT_EQ(a.size(), e.count);
  if (e.element == VT::kString) {
    for (uint64_t i = 0; i < e.count; ++i) EXPECT_EQ(a.string(i), e.strings[i]);
  } else {
    const std::span<const uint8_t> raw = a.raw_bytes();
    EXPECT_EQ(std::vector<uint8_t>(raw.begin(), raw.end()), e.raw);
  }
}

struct ExpectedTensor {
  std::string name;
  DType type;
  std::vector<int64_t> shape;
  std::vector<uint8_t> data;
};

void round_trip(uint64_t seed, uint32_t alignment) {
  SCOPED_TRACE(fmt::format("seed {} alignment {}", seed, alignment));
  RandomFile r(seed);
  Writer w;
  std::vector<Expected> kvs;
  if (alignment != kDefaultAlignment) {
    w.set_alignment(alignment);
    Expected e{"general.alignment", VT::kU32};
    e.raw = {static_cast<uint8_t>(alignment), static_cast<uint8_t>(alignment >> 8), 0, 0};
    kvs.push_back(e);
  }
  for (int i = 0; i < 40; ++i) {
    const std::string key = fmt::format("test.key{}.{}", i, r.rng()() % 1000);
    const int kind = static_cast<int>(r.rng()() % 3);
    const VT scalar = kScalarTypes[r.rng()() % std::size(kScalarTypes)];
    if (kind == 0) {
      kvs.push_back(r.add_scalar(w, key, scalar));
    } else if (kind == 1) {
      Expected e{key, VT::kString};
      e.strings = {r.random_string(50)};
      w.set_string(key, e.strings[0]);
      kvs.push_back(e);
    } else {
      kvs.push_back(r.add_array(w, key, r.rng()() % 4 == 0 ? VT::kString : scalar));
    }
  }
  const DType types[] = {DType::kF32,  DType::kF16,  DType::kBF16, DType::kQ4_0,
                         DType::kQ8_0, DType::kQ4_K, DType::kQ6_K, DType::kI8};
  std::vector<ExpectedTensor> tensors;
  for (int i = 0; i < 8; ++i) {
    ExpectedTensor t{fmt::format("blk.{}.weight", i), types[r.rng()() % std::size(types)]};
    const int n_dims = 1 + static_cast<int>(r.rng()() % 4);
    for (int d = 0; d < n_dims; ++d) t.shape.push_back(1 + static_cast<int64_t>(r.rng()() % 3));
    t.shape[0] *= dtype_info(t.type).block_size * (1 + static_cast<int64_t>(r.rng()() % 2));
    size_t n = *row_bytes(t.type, t.shape[0]);
    for (int d = 1; d < n_dims; ++d) n *= static_cast<size_t>(t.shape[d]);
    t.data = r.random_elements(VT::kU8, n);
    w.add_tensor(t.name, t.type, t.shape, t.data);
    tensors.push_back(std::move(t));
  }

  const std::vector<uint8_t> bytes = w.to_bytes();
  const File f = parse(bytes);
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.alignment(), alignment);
  ASSERT_EQ(f.kvs().size(), kvs.size());
  for (size_t i = 0; i < kvs.size(); ++i) {
    EXPECT_EQ(f.kvs()[i].key, kvs[i].key);
    expect_value(f.kvs()[i].value, kvs[i]);
  }
  ASSERT_EQ(f.tensors().size(), tensors.size());
  uint64_t expected_offset = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const TensorInfo& t = f.tensors()[i];
    EXPECT_EQ(t.name, tensors[i].name);
    EXPECT_EQ(t.type, tensors[i].type);
    EXPECT_EQ(t.n_dims, static_cast<int>(tensors[i].shape.size()));
    for (int d = 0; d < t.n_dims; ++d) EXPECT_EQ(t.ne[d], tensors[i].shape[d]);
    EXPECT_EQ(t.offset, expected_offset);
    const std::span<const uint8_t> data = f.tensor_data(t);
    EXPECT_TRUE(
        std::equal(data.begin(), data.end(), tensors[i].data.begin(), tensors[i].data.end()));
    // Padding after the tensor is zero.
    const uint64_t end = f.data_offset() + t.offset + t.nbytes;
    expected_offset = (t.offset + t.nbytes + alignment - 1) / alignment * alignment;
    for (uint64_t p = end; p < f.data_offset() + expected_offset; ++p) EXPECT_EQ(bytes[p], 0);
  }
  EXPECT_EQ(f.file_size(), f.data_offset() + expected_offset);
  for (uint64_t p = f.header_size(); p < f.data_offset(); ++p) EXPECT_EQ(bytes[p], 0);
}

TEST(GgufWriter, RandomRoundTrips) {
  for (uint64_t seed = 1; seed <= 6; ++seed) round_trip(seed, kDefaultAlignment);
  round_trip(7, 1);
  round_trip(8, 64);
  round_trip(9, 4096);
}

TEST(GgufWriter, CopyingEveryValueGivesTheSameBytes) {
  RandomFile r(42);
  Writer w;
  for (VT t : kScalarTypes) {
    r.add_scalar(w, fmt::format("s.{}", value_type_name(t)), t);
    r.add_array(w, fmt::format("a.{}", value_type_name(t)), t);
  }
  w.set_string("s.string", "text");
  r.add_array(w, "a.string", VT::kString);
  const std::vector<uint8_t> data(16 * 2, 7);
  const int64_t shape[] = {16};
  w.add_tensor("t", DType::kF16, shape, data);
  const std::vector<uint8_t> bytes = w.to_bytes();
  const File f = parse(bytes);

  Writer copy;
  for (const KeyValue& kv : f.kvs()) copy.set_value(kv.key, kv.value);
  for (const TensorInfo& t : f.tensors()) {
    copy.add_tensor(t.name, t.type, std::span(t.ne).first(t.n_dims), f.tensor_data(t));
  }
  EXPECT_EQ(copy.to_bytes(), bytes);
}

TEST(GgufWriter, SettingAKeyAgainReplacesItInPlace) {
  Writer w;
  w.set_u32("a", 1);
  w.set_string("b", "x");
  w.set_f32("a", 2.0f);
  const std::vector<uint8_t> bytes = w.to_bytes();
  const File f = parse(bytes);
  ASSERT_EQ(f.kvs().size(), 2u);
  EXPECT_EQ(f.kvs()[0].key, "a");
  EXPECT_EQ(f.kvs()[0].value.f32(), 2.0f);
}

TEST(GgufWriter, FileWithoutTensorsEndsAfterItsMetadata) {
  Writer w;
  w.set_string("tokenizer.ggml.model", "gpt2");
  const std::vector<uint8_t> bytes = w.to_bytes();
  const File f = parse(bytes);
  EXPECT_EQ(f.header_size(), bytes.size());
  EXPECT_EQ(Writer().to_bytes().size(), 24u);
}

TEST(GgufWriter, AlignmentKeyControlsTheLayout) {
  Writer w;
  w.set_u32("general.alignment", 128);
  const std::vector<uint8_t> data(4, 1);
  const int64_t shape[] = {1};
  w.add_tensor("a", DType::kF32, shape, data);
  w.add_tensor("b", DType::kF32, shape, data);
  const std::vector<uint8_t> bytes = w.to_bytes();
  const File f = parse(bytes);
  EXPECT_EQ(f.data_offset() % 128, 0u);
  EXPECT_EQ(f.tensors()[1].offset, 128u);
}

template <class F>
void expect_misuse(F f, std::string_view phrase) {
  try {
    f();
    ADD_FAILURE() << "no error; expected " << phrase;
  } catch (const Error& e) {
    EXPECT_EQ(e.category(), ErrorCategory::kInvalidArgument) << e.what();
    EXPECT_NE(std::string(e.what()).find(phrase), std::string::npos) << e.what();
  }
}

TEST(GgufWriter, RefusesMisuse) {
  Writer w;
  const std::vector<uint8_t> data(64);
  const int64_t shape16[] = {16};
  expect_misuse([&] { w.set_u32("", 1); }, "key '' length: found 0");
  expect_misuse([&] { w.set_u32(std::string(kMaxKeyLength + 1, 'k'), 1); }, "found 65537");
  expect_misuse([&] { w.add_tensor("", DType::kF32, shape16, data); }, "name length: found 0");
  expect_misuse([&] { w.add_tensor(std::string(64, 'n'), DType::kF32, shape16, data); },
                "name length: found 64, expected 1..63");
  expect_misuse([&] { w.add_tensor("t", DType::kF32, {}, data); }, "n_dims: found 0");
  const int64_t five[] = {1, 1, 1, 1, 16};
  expect_misuse([&] { w.add_tensor("t", DType::kF32, five, data); }, "n_dims: found 5");
  const int64_t zero[] = {16, 0};
  expect_misuse([&] { w.add_tensor("t", DType::kF32, zero, data); }, "dim 1: found 0");
  const int64_t partial_block[] = {16};
  expect_misuse([&] { w.add_tensor("t", DType::kQ4_0, partial_block, data); }, "dim 0: found 16");
  expect_misuse([&] { w.add_tensor("t", DType::kF16, shape16, data); },
                "data: found 64 bytes, expected 32 bytes");
  expect_misuse([&] { w.add_tensor("t", static_cast<DType>(4), shape16, data); }, "type: found 4");
  w.add_tensor("t", DType::kF32, shape16, data);
  expect_misuse([&] { w.add_tensor("t", DType::kF32, shape16, data); }, "duplicate name");
  expect_misuse([&] { w.set_alignment(0); }, "alignment: found 0");
  expect_misuse([&] { w.set_alignment(24); }, "alignment: found 24");
  w.set_i32("general.alignment", 32);
  expect_misuse([&] { w.to_bytes(); }, "general.alignment");
  w.set_u32("general.alignment", 48);
  expect_misuse([&] { w.to_bytes(); }, "general.alignment: found 48");
}

TEST(GgufWriter, WriteGoesThroughATempFile) {
  const std::filesystem::path dir =
      std::filesystem::path(::testing::TempDir()) / fmt::format("gguf_writer_{}", getpid());
  std::filesystem::create_directories(dir);
  const std::filesystem::path path = dir / "out.gguf";
  {
    std::ofstream old(path);
    old << "an older file";
  }
  Writer w;
  w.set_string("general.name", "written");
  w.write(path);
  EXPECT_FALSE(std::filesystem::exists(dir / "out.gguf.tmp"));
  const File f = File::open(path);
  EXPECT_EQ(f.find("general.name")->string(), "written");

  const std::filesystem::path missing = dir / "no-such-dir" / "x.gguf";
  try {
    w.write(missing);
    ADD_FAILURE() << "wrote into a missing folder";
  } catch (const Error& e) {
    EXPECT_EQ(e.category(), ErrorCategory::kIo);
    EXPECT_NE(std::string(e.what()).find(missing.string()), std::string::npos) << e.what();
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
TEST(GgufWriter, StreamedTensorsGiveTheSameBytesAndFailCleanly) {
  // Two tensors, odd sizes so padding shows: the same bytes whether given
  // up front or written by a callback, which runs once per write, in order.
  std::mt19937 rng(11);
  std::vector<uint8_t> a(3 * 5 * 2), b(7 * 4);
  for (uint8_t& x : a) x = static_cast<uint8_t>(rng());
  for (uint8_t& x : b) x = static_cast<uint8_t>(rng());
  const std::vector<int64_t> sa{3, 5}, sb{7};
  Writer copied, streamed;
  for (Writer* w : {&copied, &streamed}) w->set_string("general.name", "stream");
  copied.add_tensor("a", DType::kF16, sa, a);
  copied.add_tensor("b", DType::kF32, sb, b);
  std::vector<std::string> calls;
  streamed.add_tensor("a", DType::kF16, sa, Writer::TensorFill([&](std::span<uint8_t> out) {
    calls.push_back("a");
    ASSERT_EQ(out.size(), a.size());
    std::copy(a.begin(), a.end(), out.begin());
  }));
  streamed.add_tensor("b", DType::kF32, sb, Writer::TensorFill([&](std::span<uint8_t> out) {
    calls.push_back("b");
    ASSERT_EQ(out.size(), b.size());
    std::copy(b.begin(), b.end(), out.begin());
  }));
  EXPECT_EQ(streamed.to_bytes(), copied.to_bytes());
  EXPECT_EQ(calls, (std::vector<std::string>{"a", "b"}));

  const std::filesystem::path dir =
      std::filesystem::path(::testing::TempDir()) / fmt::format("gguf_stream_{}", getpid());
  std::filesystem::create_directories(dir);
  std::vector<std::string> seen;
  streamed.write(dir / "s.gguf", [&](size_t i, size_t n, std::string_view name) {
    EXPECT_EQ(n, 2u);
    seen.push_back(fmt::format("{}:{}", i, name));
  });
  EXPECT_EQ(seen, (std::vector<std::string>{"0:a", "1:b"}));
  std::ifstream in(dir / "s.gguf", std::ios::binary);
  const std::vector<uint8_t> on_disk((std::istreambuf_iterator<char>(in)), {});
  EXPECT_EQ(on_disk, copied.to_bytes());

  // A callback that throws: the error reaches the caller, no file is left.
  Writer failing;
  failing.add_tensor("x", DType::kF32, sb, Writer::TensorFill([](std::span<uint8_t>) {
    fail(ErrorCategory::kInvalidArgument, "no data for x");
  }));
  EXPECT_THROW(failing.write(dir / "f.gguf"), Error);
  EXPECT_FALSE(std::filesystem::exists(dir / "f.gguf"));
  EXPECT_FALSE(std::filesystem::exists(dir / "f.gguf.tmp"));
  std::filesystem::remove_all(dir);
}

}  // namespace tessera::gguf::testing
