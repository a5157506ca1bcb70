// The repository's model and vocab files (models/, tests/fixtures/tokenizer/)
// load and show the facts their PROVENANCE.md files state.
#include <gtest/gtest.h>

#include <map>
#include <optional>

#include "gguf/test_util.h"

namespace tessera::gguf::testing {
namespace {

namespace fs = std::filesystem;

fs::path model_file(const std::string& name) { return fs::path(models_dir()) / name; }
fs::path fixture_file(const std::string& relative) { return fs::path(fixtures_dir()) / relative; }

struct TensorFact {
  std::string_view name;
  DType type;
  int64_t ne0;
  int64_t ne1;  // 1 for vectors
  uint64_t offset;
};

void expect_tensor(const File& f, const TensorFact& fact) {
  SCOPED_TRACE(fact.name);
  const TensorInfo* t = f.find_tensor(fact.name);
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->type, fact.type);
  EXPECT_EQ(t->n_dims, fact.ne1 == 1 ? 1 : 2);
  EXPECT_EQ(t->ne[0], fact.ne0);
  EXPECT_EQ(t->ne[1], fact.ne1);
  EXPECT_EQ(t->offset, fact.offset);
}

// The last tensor ends exactly at the end of the file.
void expect_data_ends_at_eof(const File& f) {
  uint64_t end = 0;
  for (const TensorInfo& t : f.tensors()) end = std::max(end, t.offset + t.nbytes);
  EXPECT_EQ(f.data_offset() + end, f.file_size());
}

TEST(GgufDataFiles, Stories260K) {
  const File f = File::open(model_file("stories260K.gguf"));
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.file_size(), 1185376u);
  EXPECT_EQ(f.kvs().size(), 19u);
  EXPECT_EQ(f.tensors().size(), 48u);
  EXPECT_EQ(f.header_size(), 14152u);
  EXPECT_EQ(f.data_offset(), 14176u);
  EXPECT_EQ(f.alignment(), 32u);
  EXPECT_EQ(f.find("general.alignment"), nullptr);
  EXPECT_EQ(f.find("general.architecture")->string(), "llama");
  EXPECT_EQ(f.find("general.name")->string(), "llama");
  EXPECT_EQ(f.find("llama.context_length")->u32(), 2048u);
  EXPECT_EQ(f.find("llama.embedding_length")->u32(), 64u);
  EXPECT_EQ(f.find("llama.feed_forward_length")->u32(), 172u);
  EXPECT_EQ(f.find("llama.block_count")->u32(), 5u);
  EXPECT_EQ(f.find("llama.attention.head_count")->u32(), 8u);
  EXPECT_EQ(f.find("llama.attention.head_count_kv")->u32(), 4u);
  EXPECT_EQ(f.find("llama.rope.dimension_count")->u32(), 8u);
  EXPECT_FLOAT_EQ(f.find("llama.attention.layer_norm_rms_epsilon")->f32(), 1e-5f);
  EXPECT_EQ(f.find("llama.vocab_size"), nullptr);
  EXPECT_EQ(f.find("llama.rope.freq_base"), nullptr);
  EXPECT_EQ(f.find("general.file_type"), nullptr);
  EXPECT_EQ(f.find("tokenizer.ggml.pre"), nullptr);
  EXPECT_EQ(f.find("tokenizer.ggml.model")->string(), "llama");
  EXPECT_EQ(f.find("tokenizer.ggml.unknown_token_id")->u32(), 0u);
  EXPECT_EQ(f.find("tokenizer.ggml.bos_token_id")->u32(), 1u);
  EXPECT_EQ(f.find("tokenizer.ggml.eos_token_id")->u32(), 2u);
  EXPECT_EQ(f.find("tokenizer.ggml.seperator_token_id")->u32(), 0xFFFFFFFFu);
  EXPECT_EQ(f.find("tokenizer.ggml.padding_token_id")->u32(), 0xFFFFFFFFu);

  const ArrayView& tokens = f.find("tokenizer.ggml.tokens")->array();
  const ArrayView& scores = f.find("tokenizer.ggml.scores")->array();
  const ArrayView& types = f.find("tokenizer.ggml.token_type")->array();
  ASSERT_EQ(tokens.size(), 512u);
  ASSERT_EQ(scores.size(), 512u);
  ASSERT_EQ(types.size(), 512u);
  EXPECT_EQ(tokens.string(0), "<unk>");
  EXPECT_EQ(types.number<int32_t>(0), 2);
  EXPECT_EQ(tokens.string(1), "<s>");
  EXPECT_EQ(tokens.string(2), "</s>");
  EXPECT_EQ(types.number<int32_t>(1), 3);
  EXPECT_EQ(types.number<int32_t>(2), 3);
  for (int b = 0; b < 256; ++b) {
    EXPECT_EQ(tokens.string(3 + b), fmt::format("<0x{:02X}>", b));
    EXPECT_EQ(types.number<int32_t>(3 + b), 6);
  }
  for (int k = 0; k < 253; ++k) {
    EXPECT_EQ(scores.number<float>(259 + k), -static_cast<float>(k));
    EXPECT_EQ(types.number<int32_t>(259 + k), 1);
  }

  int64_t elements = 0;
  for (const TensorInfo& t : f.tensors()) {
    EXPECT_EQ(t.type, DType::kF32) << t.name;
    elements += t.n_elements();
  }
  EXPECT_EQ(elements, 292800);
  EXPECT_EQ(f.tensors()[0].name, "token_embd.weight");
  EXPECT_EQ(f.tensors()[1].name, "output_norm.weight");
  EXPECT_EQ(f.tensors()[2].name, "output.weight");
  EXPECT_EQ(f.tensors()[3].name, "blk.0.attn_q.weight");
  for (const TensorFact& fact : {
           TensorFact{"token_embd.weight", DType::kF32, 64, 512, 0},
           TensorFact{"output_norm.weight", DType::kF32, 64, 1, 131072},
           TensorFact{"output.weight", DType::kF32, 64, 512, 131328},
           TensorFact{"blk.0.attn_k.weight", DType::kF32, 64, 32, 278784},
           TensorFact{"blk.0.ffn_down.weight", DType::kF32, 172, 64, 355840},
           TensorFact{"blk.3.attn_norm.weight", DType::kF32, 64, 1, 856832},
           TensorFact{"blk.4.ffn_norm.weight", DType::kF32, 64, 1, 1170944},
       }) {
    expect_tensor(f, fact);
  }
  // Tied embeddings stored twice.
  const auto embd = f.tensor_data(*f.find_tensor("token_embd.weight"));
  const auto output = f.tensor_data(*f.find_tensor("output.weight"));
  EXPECT_TRUE(std::equal(embd.begin(), embd.end(), output.begin(), output.end()));
  expect_data_ends_at_eof(f);
}

TEST(GgufDataFiles, Llama2TinyRandom) {
  const File f = File::open(model_file("llama-2-tiny-random.gguf"));
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.file_size(), 1750560u);
  EXPECT_EQ(f.kvs().size(), 18u);
  EXPECT_EQ(f.tensors().size(), 12u);
  EXPECT_EQ(f.header_size(), 724398u);
  EXPECT_EQ(f.data_offset(), 724416u);
  EXPECT_EQ(f.find("general.architecture")->string(), "llama");
  EXPECT_EQ(f.find("general.name")->string(), "LLaMA v2");
  EXPECT_EQ(f.find("llama.context_length")->u32(), 4096u);
  EXPECT_EQ(f.find("llama.embedding_length")->u32(), 8u);
  EXPECT_EQ(f.find("llama.feed_forward_length")->u32(), 32u);
  EXPECT_EQ(f.find("llama.block_count")->u32(), 1u);
  EXPECT_EQ(f.find("llama.attention.head_count")->u32(), 2u);
  EXPECT_EQ(f.find("llama.attention.head_count_kv")->u32(), 2u);
  EXPECT_EQ(f.find("llama.rope.dimension_count")->u32(), 4u);
  EXPECT_FLOAT_EQ(f.find("llama.attention.layer_norm_rms_epsilon")->f32(), 1e-5f);
  EXPECT_EQ(f.find("general.file_type")->u32(), 1u);
  EXPECT_EQ(f.find("tokenizer.ggml.model")->string(), "llama");
  EXPECT_EQ(f.find("tokenizer.ggml.pre"), nullptr);
  EXPECT_EQ(f.find("tokenizer.ggml.tokens")->array().size(), 32000u);
  EXPECT_EQ(f.find("tokenizer.ggml.bos_token_id")->u32(), 1u);
  EXPECT_EQ(f.find("tokenizer.ggml.eos_token_id")->u32(), 2u);
  EXPECT_EQ(f.find("tokenizer.ggml.unknown_token_id")->u32(), 0u);

  int f16 = 0;
  int f32 = 0;
  int64_t elements = 0;
  for (const TensorInfo& t : f.tensors()) {
    f16 += t.type == DType::kF16;
    f32 += t.type == DType::kF32;
    elements += t.n_elements();
  }
  EXPECT_EQ(f16, 9);
  EXPECT_EQ(f32, 3);
  EXPECT_EQ(elements, 513048);
  for (const TensorFact& fact : {
           TensorFact{"token_embd.weight", DType::kF16, 8, 32000, 0},
           TensorFact{"blk.0.attn_q.weight", DType::kF16, 8, 8, 512000},
           TensorFact{"blk.0.ffn_down.weight", DType::kF16, 32, 8, 513536},
           TensorFact{"blk.0.attn_norm.weight", DType::kF32, 8, 1, 514048},
           TensorFact{"output_norm.weight", DType::kF32, 8, 1, 514112},
           TensorFact{"output.weight", DType::kF16, 8, 32000, 514144},
       }) {
    expect_tensor(f, fact);
  }
  EXPECT_EQ(f.tensors()[11].name, "output.weight");
  expect_data_ends_at_eof(f);

  // Its vocabulary is exactly the llama-spm vocab.
  const File spm = File::open(fixture_file("tokenizer/ggml-vocab-llama-spm.gguf"));
  for (const char* key :
       {"tokenizer.ggml.tokens", "tokenizer.ggml.scores", "tokenizer.ggml.token_type"}) {
    const ArrayView& a = f.find(key)->array();
    const ArrayView& b = spm.find(key)->array();
    ASSERT_EQ(a.size(), b.size()) << key;
    for (uint64_t i = 0; i < a.size(); ++i) {
      if (a.element_type() == ValueType::kString) {
        ASSERT_EQ(a.string(i), b.string(i)) << key << " " << i;
      } else {
        ASSERT_EQ(a.number<double>(i), b.number<double>(i)) << key << " " << i;
      }
    }
  }
}

TEST(GgufDataFiles, LegacyV1IsRefused) {
  const fs::path path = model_file("legacy-gguf-v1/tinyllamas-stories-260k-f32.gguf");
  ASSERT_TRUE(fs::exists(path)) << path;
  try {
    File::open(path);
    ADD_FAILURE() << "a v1 file parsed";
  } catch (const Error& e) {
    EXPECT_EQ(e.category(), ErrorCategory::kInvalidFile);
    EXPECT_NE(std::string(e.what()).find("GGUF v1 is not supported"), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("@ 0x4]"), std::string::npos) << e.what();
  }
}

struct VocabFact {
  std::string_view arch;  // general.architecture
  uint64_t size;
  std::string_view model;
  std::string_view pre;  // empty: no pre key
  uint64_t n_vocab;
  uint64_t n_merges;  // 0: no merges key
};

const std::map<std::string, VocabFact, std::less<>> kVocabFacts = {
    {"ggml-vocab-albert-ugm.gguf", {"bert", 970795, "t5", "default", 30000, 0}},
    {"ggml-vocab-bert-bge.gguf", {"bert", 627549, "bert", "bert-bge", 30522, 0}},
    {"ggml-vocab-deepseek-coder.gguf", {"llama", 1156067, "gpt2", "deepseek-coder", 32256, 31757}},
    {"ggml-vocab-deepseek-llm.gguf", {"llama", 3970167, "gpt2", "deepseek-llm", 102400, 99757}},
    {"ggml-vocab-falcon.gguf", {"falcon", 2287728, "gpt2", "falcon", 65024, 64784}},
    {"ggml-vocab-gpt-2.gguf", {"gpt2", 1766807, "gpt2", "gpt-2", 50257, 50000}},
    {"ggml-vocab-llama-spm.gguf", {"llama", 723869, "llama", "default", 32000, 0}},
    {"ggml-vocab-mpt.gguf", {"mpt", 1771393, "gpt2", "mpt", 50432, 50009}},
    {"ggml-vocab-phi-3.gguf", {"phi3", 726019, "llama", "default", 32064, 0}},
    {"ggml-vocab-refact.gguf", {"refact", 1720710, "gpt2", "refact", 49216, 48891}},
    {"ggml-vocab-starcoder.gguf", {"starcoder2", 1719346, "gpt2", "starcoder", 49152, 48872}},
    {"ggml-vocab-baichuan.gguf", {"baichuan", 1340998, "llama", "", 64000, 0}},
    {"ggml-vocab-gpt-neox.gguf", {"gptneox", 1771431, "gpt2", "", 50432, 50009}},
};

TEST(GgufDataFiles, VocabFilesAreVocabOnly) {
  const fs::path dir = fixture_file("tokenizer");
  ASSERT_TRUE(fs::exists(dir)) << dir;
  size_t seen = 0;
  for (const auto& entry : fs::recursive_directory_iterator(dir)) {
    if (entry.path().extension() != ".gguf") continue;
    SCOPED_TRACE(entry.path().string());
    const File f = File::open(entry.path());
    ++seen;
    EXPECT_EQ(f.version(), 3u);
    EXPECT_EQ(f.tensors().size(), 0u);
    EXPECT_EQ(f.header_size(), f.file_size());  // no padding, no data section
    const auto fact = kVocabFacts.find(entry.path().filename().string());
    ASSERT_NE(fact, kVocabFacts.end()) << "no facts for this file";
    EXPECT_EQ(f.file_size(), fact->second.size);
    EXPECT_EQ(f.find("general.architecture")->string(), fact->second.arch);
    EXPECT_EQ(f.find("tokenizer.ggml.model")->string(), fact->second.model);
    const Value* pre = f.find("tokenizer.ggml.pre");
    if (fact->second.pre.empty()) {
      EXPECT_EQ(pre, nullptr);
    } else {
      ASSERT_NE(pre, nullptr);
      EXPECT_EQ(pre->string(), fact->second.pre);
    }
    EXPECT_EQ(f.find("tokenizer.ggml.tokens")->array().size(), fact->second.n_vocab);
    const Value* merges = f.find("tokenizer.ggml.merges");
    if (fact->second.n_merges == 0) {
      EXPECT_EQ(merges, nullptr);
    } else {
      ASSERT_NE(merges, nullptr);
      EXPECT_EQ(merges->array().size(), fact->second.n_merges);
    }
  }
  EXPECT_EQ(seen, kVocabFacts.size());
}

TEST(GgufDataFiles, EveryModelLoads) {
  const fs::path dir = models_dir();
  ASSERT_TRUE(fs::exists(dir)) << dir;
  size_t seen = 0;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.path().extension() != ".gguf") continue;
    SCOPED_TRACE(entry.path().string());
    const File f = File::open(entry.path());
    ++seen;
    EXPECT_GT(f.tensors().size(), 0u);
    for (const KeyValue& kv : f.kvs()) EXPECT_FALSE(kv.value.to_display_string().empty());
    expect_data_ends_at_eof(f);
  }
  EXPECT_GE(seen, 2u);
}

}  // namespace
}  // namespace tessera::gguf::testing
