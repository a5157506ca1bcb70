// The seed corpus of fuzz/fuzz_gguf.cpp: made here by the Writer, checked
// against the committed copies, and every committed input (seeds and
// regressions) handled without a crash.
//
// To regenerate the seeds:
//   TESSERA_WRITE_FUZZ_SEEDS=fuzz/corpus/fuzz_gguf build/<dir>/tests/gguf_test
//     --gtest_filter='GgufFuzzCorpus.*'
#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <iterator>
#include <map>

#include "gguf/test_util.h"

namespace tessera::gguf::testing {
namespace {

namespace fs = std::filesystem;

std::vector<uint8_t> filled(size_t n, uint8_t seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(seed + i * 7);
  return v;
}

std::vector<uint8_t> tiny_model() {
  Writer w;
  w.set_string("general.architecture", "llama");
  w.set_string("general.name", "tiny");
  w.set_u32("general.file_type", 7);
  w.set_u32("llama.context_length", 64);
  w.set_u32("llama.embedding_length", 8);
  w.set_u32("llama.block_count", 1);
  w.set_u32("llama.feed_forward_length", 16);
  w.set_u32("llama.attention.head_count", 2);
  w.set_u32("llama.attention.head_count_kv", 1);
  w.set_f32("llama.rope.freq_base", 10000.0f);
  w.set_f32("llama.attention.layer_norm_rms_epsilon", 1e-5f);
  w.set_u8("test.u8", 200);
  w.set_i8("test.i8", -3);
  w.set_u16("test.u16", 60000);
  w.set_i16("test.i16", -1234);
  w.set_i32("test.i32", -70000);
  w.set_u64("test.u64", 1ull << 40);
  w.set_i64("test.i64", -(1ll << 40));
  w.set_f64("test.f64", 0.125);
  w.set_bool("test.bool", true);
  const std::vector<std::string> tokens = {"<unk>", "<s>", "</s>",          "a",
                                           "b",     "ab",  "\xe2\x96\x81x", ""};
  const std::vector<float> scores = {0, 0, 0, -1, -2, -3, -4, -5};
  const std::vector<int32_t> types = {2, 3, 3, 1, 1, 1, 1, 1};
  w.set_string("tokenizer.ggml.model", "llama");
  w.set_array_strings("tokenizer.ggml.tokens", tokens);
  w.set_array_f32("tokenizer.ggml.scores", scores);
  w.set_array_i32("tokenizer.ggml.token_type", types);
  w.set_u32("tokenizer.ggml.bos_token_id", 1);
  w.set_u32("tokenizer.ggml.eos_token_id", 2);
  const uint8_t flags[] = {1, 0, 1};
  w.set_array<uint8_t>("test.u8s", flags);
  const int64_t embd[] = {8, 8};
  w.add_tensor("token_embd.weight", DType::kF32, embd, filled(8 * 8 * 4, 1));
  const int64_t q[] = {32, 2};
  w.add_tensor("blk.0.attn_q.weight", DType::kQ8_0, q, filled(2 * 34, 2));
  const int64_t norm[] = {8};
  w.add_tensor("output_norm.weight", DType::kF16, norm, filled(8 * 2, 3));
  return w.to_bytes();
}

std::vector<uint8_t> vocab_only() {
  Writer w;
  w.set_string("general.architecture", "gpt2");
  w.set_string("tokenizer.ggml.model", "gpt2");
  w.set_string("tokenizer.ggml.pre", "gpt-2");
  std::vector<std::string> tokens;
  for (char c = 'a'; c <= 'z'; ++c) tokens.push_back(std::string(1, c));
  tokens.push_back("th");
  tokens.push_back("the");
  const std::vector<std::string> merges = {"t h", "th e", "a b"};
  std::vector<int32_t> types(tokens.size(), 1);
  w.set_array_strings("tokenizer.ggml.tokens", tokens);
  w.set_array_i32("tokenizer.ggml.token_type", types);
  w.set_array_strings("tokenizer.ggml.merges", merges);
  w.set_u32("tokenizer.ggml.bos_token_id", 0);
  w.set_bool("tokenizer.ggml.add_bos_token", false);
  return w.to_bytes();  // no tensors: ends right after the metadata
}

std::vector<uint8_t> string_arrays() {
  Writer w;
  const std::vector<std::string> mixed = {"", "x", std::string("\0nul", 4), "\xff\xfe",
                                          "long string value"};
  const std::vector<std::string> none;
  w.set_array_strings("s.mixed", mixed);
  w.set_array_strings("s.empty", none);
  w.set_string("s.plain", "{% for m in messages %}{{ m.content }}{% endfor %}");
  const double f64s[] = {1.5, -2.25};
  w.set_array<double>("s.f64", f64s);
  const bool bools[] = {true, false};
  w.set_array<bool>("s.bool", bools);
  return w.to_bytes();
}

std::vector<uint8_t> aligned_quantized() {
  Writer w;
  w.set_alignment(64);
  const int64_t k[] = {256, 1};
  w.add_tensor("k", DType::kQ4_K, k, filled(144, 4));
  const int64_t i[] = {3, 1, 1, 2};
  w.add_tensor("i", DType::kI32, i, filled(24, 5));
  return w.to_bytes();
}

std::map<std::string, std::vector<uint8_t>> seeds() {
  return {
      {"seed-tiny-model.seed", tiny_model()},
      {"seed-vocab-only.seed", vocab_only()},
      {"seed-string-arrays.seed", string_arrays()},
      {"seed-aligned-quantized.seed", aligned_quantized()},
      {"seed-empty.seed", Writer().to_bytes()},
  };
}

std::vector<uint8_t> read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

const fs::path kCorpus = fs::path(TESSERA_SOURCE_DIR) / "fuzz/corpus/fuzz_gguf";

TEST(GgufFuzzCorpus, SeedsAreSmallAndValid) {
  for (const auto& [name, bytes] : seeds()) {
    SCOPED_TRACE(name);
    EXPECT_LT(bytes.size(), 8u * 1024);
    EXPECT_NO_THROW(parse(bytes));
  }
}

// Writes the seeds to TESSERA_WRITE_FUZZ_SEEDS (to refresh fuzz/corpus) or,
// unset, to a temporary folder; either way each file read back is the seed
// and parses.
TEST(GgufFuzzCorpus, SeedsWrittenToAFolderReadBackAndParse) {
  const char* env = std::getenv("TESSERA_WRITE_FUZZ_SEEDS");
  const bool keep = env != nullptr && *env != '\0';
  const fs::path dir = keep ? fs::path(env)
                            : fs::temp_directory_path() /
                                  ("tessera-fuzz-seeds-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const auto made = seeds();
  ASSERT_FALSE(made.empty());
  for (const auto& [name, bytes] : made) {
    std::ofstream out(dir / name, std::ios::binary);
    out.write(reinterpret_cast<const char*>(bytes.data()),
              static_cast<std::streamsize>(bytes.size()));
  }
  for (const auto& [name, bytes] : made) {
    SCOPED_TRACE(name);
    const std::vector<uint8_t> back = read_file(dir / name);
    EXPECT_EQ(back, bytes);
    EXPECT_NO_THROW(parse(back));
  }
  if (!keep) fs::remove_all(dir);
}

TEST(GgufFuzzCorpus, CommittedInputsAreHandled) {
  ASSERT_TRUE(fs::exists(kCorpus)) << kCorpus;
  const auto made = seeds();
  size_t seen = 0;
  for (const auto& entry : fs::directory_iterator(kCorpus)) {
    const std::string name = entry.path().filename().string();
    SCOPED_TRACE(name);
    const std::vector<uint8_t> bytes = read_file(entry.path());
    ++seen;
    if (name.starts_with("seed-")) {
      ASSERT_TRUE(made.contains(name)) << "a seed this test does not make";
      EXPECT_EQ(bytes, made.at(name)) << "stale seed: regenerate (see the top of this file)";
      continue;
    }
    // Regressions: refused cleanly or parsed, never a crash.
    try {
      const File f = parse(bytes);
      for (const KeyValue& kv : f.kvs()) (void)kv.value.to_display_string();
    } catch (const Error& e) {
      EXPECT_EQ(e.category(), ErrorCategory::kInvalidFile) << e.what();
    }
  }
  EXPECT_GE(seen, made.size());
}

}  // namespace
}  // namespace tessera::gguf::testing
