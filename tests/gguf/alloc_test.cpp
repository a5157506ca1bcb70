// Parsing allocates about the file's size: the bytes requested from
// operator new while a file is parsed are counted by replacing the global
// allocation functions in this test binary.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <new>
#include <random>

#include "gguf/test_util.h"

namespace {

// Process-wide by necessity: operator new has no context to carry a counter.
std::atomic<bool> g_counting{false};
std::atomic<uint64_t> g_bytes{0};

void* counted_malloc(std::size_t n) {
  if (g_counting.load(std::memory_order_relaxed)) {
    g_bytes.fetch_add(n, std::memory_order_relaxed);
  }
  return std::malloc(n == 0 ? 1 : n);
}

void* counted_new(std::size_t n) {
  if (void* p = counted_malloc(n)) return p;
  throw std::bad_alloc();
}

}  // namespace

void* operator new(std::size_t n) {
  return counted_new(n);
}
void* operator new[](std::size_t n) {
  return counted_new(n);
}
void* operator new(std::size_t n, const std::nothrow_t&) noexcept {
  return counted_malloc(n);
}
void* operator new[](std::size_t n, const std::nothrow_t&) noexcept {
  return counted_malloc(n);
}
void operator delete(void* p) noexcept {
  std::free(p);
}
void operator delete[](void* p) noexcept {
  std::free(p);
}
void operator delete(void* p, std::size_t) noexcept {
  std::free(p);
}
void operator delete[](void* p, std::size_t) noexcept {
  std::free(p);
}
void operator delete(void* p, const std::nothrow_t&) noexcept {
  std::free(p);
}
void operator delete[](void* p, const std::nothrow_t&) noexcept {
  std::free(p);
}

namespace tessera::gguf::testing {
namespace {

constexpr uint64_t kSlack = 1 << 20;  // 1 MiB

// Counts the bytes allocated while it is alive.
class AllocationCounter {
 public:
  AllocationCounter() {
    g_bytes = 0;
    g_counting = true;
  }
  ~AllocationCounter() { g_counting = false; }
  uint64_t bytes() const { return g_bytes.load(); }
};

TEST(GgufAllocations, CounterSeesAllocations) {
  AllocationCounter counter;
  std::vector<uint8_t> big(2 * kSlack);
  EXPECT_GE(counter.bytes(), big.size());
}

// A big vocabulary and some tensors, the shape of a real model's header.
std::vector<uint8_t> large_file() {
  std::mt19937 rng(7);
  std::vector<std::string> tokens(200000);
  for (std::string& t : tokens)
    t = std::string(2 + rng() % 10, static_cast<char>('a' + rng() % 26));
  std::vector<std::string> merges(150000);
  for (std::string& m : merges) m = std::string(3 + rng() % 12, 'm');
  std::vector<float> scores(tokens.size(), -1.0f);
  std::vector<int32_t> types(tokens.size(), 1);
  Writer w;
  w.set_string("general.architecture", "llama");
  w.set_string("tokenizer.ggml.model", "gpt2");
  w.set_array_strings("tokenizer.ggml.tokens", tokens);
  w.set_array_f32("tokenizer.ggml.scores", scores);
  w.set_array_i32("tokenizer.ggml.token_type", types);
  w.set_array_strings("tokenizer.ggml.merges", merges);
  const std::vector<uint8_t> data(64 * 64 * 4, 1);
  const int64_t shape[] = {64, 64};
  for (int i = 0; i < 100; ++i) w.add_tensor(fmt::format("blk.{}.w", i), DType::kF32, shape, data);
  return w.to_bytes();
}

TEST(GgufAllocations, LargeFileCostsAboutItsSize) {
  const std::vector<uint8_t> bytes = large_file();
  AllocationCounter counter;
  const File f = File::from_bytes(bytes, "large.gguf");
  const uint64_t used = counter.bytes();
  RecordProperty("file_bytes", std::to_string(bytes.size()));
  RecordProperty("allocated_bytes", std::to_string(used));
  EXPECT_EQ(f.find("tokenizer.ggml.tokens")->array().size(), 200000u);
  EXPECT_LE(used, bytes.size() + kSlack) << "file " << bytes.size();
  // String arrays dominate: one u64 per element.
  EXPECT_GE(used, 350000u * 8);
}

TEST(GgufAllocations, DataFilesCostAboutTheirSize) {
  const std::filesystem::path models = models_dir(), fixtures = fixtures_dir();
  for (const std::filesystem::path& path :
       {models / "stories260K.gguf", models / "llama-2-tiny-random.gguf",
        fixtures / "tokenizer/ggml-vocab-deepseek-llm.gguf",
        fixtures / "tokenizer/ggml-vocab-gpt-2.gguf"}) {
    AllocationCounter counter;
    const File f = File::open(path);
    EXPECT_LE(counter.bytes(), f.file_size() + kSlack) << path;
  }
}

TEST(GgufAllocations, HugeCountsAreRefusedBeforeAllocating) {
  const std::vector<std::vector<uint8_t>> files = {
      Bytes()
          .header(0, 1)
          .array_header("a", ValueType::kString, uint64_t{1} << 60)
          .zeros(64)
          .data(),
      Bytes().header(0, uint64_t{1} << 40).zeros(64).data(),
      Bytes().header(uint64_t{1} << 40, 0).zeros(64).data(),
  };
  for (const std::vector<uint8_t>& bytes : files) {
    AllocationCounter counter;
    EXPECT_THROW(File::from_bytes(bytes), Error);
    EXPECT_LE(counter.bytes(), 64u * 1024);
  }
}

// The worst case: only tiny keys, each a 16-byte record on disk that costs
// a KeyValue plus an index entry in memory.
TEST(GgufAllocations, TinyKeysCostABoundedMultiple) {
  const uint64_t n = 60000;
  Bytes b = Bytes().header(0, n);
  for (uint64_t i = 0; i < n; ++i) {
    const char key[3] = {static_cast<char>('a' + i % 26), static_cast<char>(i / 26 % 256),
                         static_cast<char>(i / 26 / 256 + 1)};
    b.kv_type(std::string_view(key, 3), ValueType::kU8).u8(1);
  }
  AllocationCounter counter;
  const File f = File::from_bytes(b.data());
  const uint64_t used = counter.bytes();
  EXPECT_EQ(f.kvs().size(), n);
  const uint64_t per_kv = sizeof(KeyValue) + 2 * sizeof(size_t);  // + index + sort buffer
  RecordProperty("ratio_percent", std::to_string(used * 100 / b.size()));
  EXPECT_LE(used, n * per_kv + kSlack);
  EXPECT_LE(used, 9 * b.size());
}

}  // namespace
}  // namespace tessera::gguf::testing
