// synthesize_model: a llama-layout GGUF of random weights, streamed tensor by
// tensor. Each row draws from its own generator, seeded by (seed, tensor,
// row), so the file is the same whatever the thread count.
#include "tessera/models/synth.h"

#include <cmath>
#include <cstring>
#include <numbers>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "parallel_rows.h"
#include "tessera/core/error.h"
#include "tessera/gguf/gguf.h"

namespace tessera {
namespace {

constexpr SynthShape kShapes[] = {
    {"tinyllama-1.1b", 2048, 22, 32, 4, 5632, 32000, 2048, 10000.0f, false},
    {"llama-100m", 768, 12, 12, 4, 2048, 32000, 2048, 10000.0f, false},
    {"llama3-1b", 2048, 16, 32, 8, 8192, 128256, 131072, 500000.0f, true},
    {"llama2-7b", 4096, 32, 32, 32, 11008, 32000, 4096, 10000.0f, false},
    {"tiny", 256, 2, 8, 4, 512, 0, 2048, 10000.0f, false},  // for tests: the vocabulary's size
    // Qwen3-30B-A3B as published: 128 experts of 768 rows, 8 per token.
    {"qwen3-30b-a3b", 2048, 48, 32, 4, 6144, 151936, 40960, 1000000.0f, false, "qwen3moe", 128, 128, 8, 768},
    {"qwen3moe-tiny", 128, 4, 4, 2, 256, 0, 2048, 1000000.0f, false, "qwen3moe", 32, 8, 2, 64},  // fixtures
    // Mixtral's layout (llama with experts) and Qwen2-MoE's (biases, a shared expert of n_ff rows).
    {"mixtral-tiny", 128, 4, 4, 2, 64, 0, 2048, 1000000.0f, false, "llama", 0, 8, 2, 64},         // fixtures
    {"qwen2moe-tiny", 128, 4, 4, 2, 96, 0, 2048, 1000000.0f, false, "qwen2moe", 0, 8, 2, 64},     // fixtures
    // gpt-oss-20b as published: 32 experts of 2880 rows, 4 per token, a 128-key window on
    // every other layer, YaRN x32 over 4096.
    {"gpt-oss-20b", 2880, 24, 64, 8, 2880, 201088, 131072, 150000.0f, false, "gpt-oss", 64, 32, 4, 2880, 128,
     32.0f, 4096},
    {"gpt-oss-tiny", 128, 4, 4, 2, 64, 0, 2048, 150000.0f, false, "gpt-oss", 32, 8, 2, 64, 8, 4.0f, 512},
    // OLMoE-1B-7B as published: 64 experts of 1024 rows (feed_forward_length), 8 per token;
    // whole-width q / k norms, which llama.cpp sizes n_embd: as many KV heads as heads.
    {"olmoe-1b-7b", 2048, 16, 16, 16, 1024, 50304, 4096, 10000.0f, false, "olmoe", 0, 64, 8, 1024},
    {"olmoe-tiny", 128, 2, 4, 4, 64, 0, 2048, 10000.0f, false, "olmoe", 0, 8, 2, 64},  // fixtures
    // Encoders (bert): bge-small-en-v1.5 / all-MiniLM-L12 as published, bge-base, and a
    // fixture's. No output head; mean pooling; the vocabulary from --vocab (WordPiece).
    {"bge-small-en-v1.5", 384, 12, 12, 12, 1536, 0, 512, 10000.0f, true, "bert"},
    {"bge-base-en-v1.5", 768, 12, 12, 12, 3072, 0, 512, 10000.0f, true, "bert"},
    {"bert-tiny", 32, 2, 4, 4, 64, 0, 512, 10000.0f, true, "bert"},  // fixtures
    // Rerankers: bge-reranker-base's BERT layout with its one-label head, and a fixture's.
    {"bge-reranker-base", 768, 12, 12, 12, 3072, 0, 512, 10000.0f, true, "bert", 0, 0, 0, 0, 0, 0.0f, 0, true},
    {"bert-tiny-rerank", 32, 2, 4, 4, 64, 0, 512, 10000.0f, true, "bert", 0, 0, 0, 0, 0, 0.0f, 0, true},
    // Qwen3-Embedding-0.6B as published (qwen3: q/k norms, 128-wide heads, tied embeddings;
    // last-token pooling), and a fixture's.
    {"qwen3-embedding-0.6b", 1024, 28, 16, 8, 3072, 151669, 32768, 1000000.0f, true, "qwen3", 128,
     0, 0, 0, 0, 0.0f, 0, false, 3},
    {"qwen3-embedding-tiny", 64, 2, 4, 2, 128, 0, 2048, 1000000.0f, true, "qwen3", 32, 0, 0, 0, 0, 0.0f, 0,
     false, 3},
    // Qwen3-Reranker's layout: qwen3 with cls.output, the lm_head rows of "yes" and "no"
    // (rank pooling on the last token, their softmax): 0.6B as published, and a fixture's.
    {"qwen3-reranker-0.6b", 1024, 28, 16, 8, 3072, 151669, 40960, 1000000.0f, true, "qwen3", 128,
     0, 0, 0, 0, 0.0f, 0, true, 4},
    {"qwen3-reranker-tiny", 64, 2, 4, 2, 128, 0, 2048, 1000000.0f, true, "qwen3", 32, 0, 0, 0, 0, 0.0f, 0,
     true, 4},
    // jina-embeddings-v2-base-en as published (ALiBi, GEGLU; 8192 tokens), and a fixture's.
    {"jina-embeddings-v2-base-en", 768, 12, 12, 12, 3072, 0, 8192, 10000.0f, true, "jina-bert-v2"},
    {"jina-bert-v2-tiny", 32, 2, 4, 4, 64, 0, 512, 10000.0f, true, "jina-bert-v2"},  // fixtures
    {"jina-bert-v2-tiny-gate", 32, 2, 4, 4, 64, 0, 512, 10000.0f, true, "jina-bert-v2", 0, 0, 0, 0, 0, 0.0f, 0,
     false, 0, true},
    // nomic-embed-text-v1.5 as published (RoPE base 1000, SwiGLU), and a fixture's.
    // ModernBERT-base as published (22 blocks, GEGLU of 1152, a 128-token local window in all
    // but every third block, RoPE bases 160000 global and 10000 local), and a fixture's
    // (3 blocks, a window of 8: 4 either side).
    {"modernbert-base", 768, 22, 12, 12, 1152, 0, 8192, 160000.0f, true, "modern-bert", 0, 0, 0, 0, 128},
    {"modern-bert-tiny", 32, 3, 4, 4, 64, 0, 512, 160000.0f, true, "modern-bert", 0, 0, 0, 0, 8},
    {"nomic-embed-text-v1.5", 768, 12, 12, 12, 3072, 0, 2048, 1000.0f, true, "nomic-bert"},
    {"nomic-bert-tiny", 32, 2, 4, 4, 64, 0, 2048, 1000.0f, true, "nomic-bert"},  // fixtures
};

uint64_t splitmix64(uint64_t& s) {
  uint64_t z = (s += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// Normal(0, std) values by Box-Muller from a splitmix64 stream.
void fill_normal(float* out, int64_t n, uint64_t seed, float std) {
  uint64_t s = seed;
  for (int64_t i = 0; i < n; i += 2) {
    // Uniforms in (0, 1]: the log never sees 0.
    const double u1 = (static_cast<double>(splitmix64(s) >> 11) + 1.0) * 0x1.0p-53;
    const double u2 = static_cast<double>(splitmix64(s) >> 11) * 0x1.0p-53;
    const double r = std * std::sqrt(-2.0 * std::log(u1));
    const double a = 2.0 * std::numbers::pi * u2;
    out[i] = static_cast<float>(r * std::cos(a));
    if (i + 1 < n) out[i + 1] = static_cast<float>(r * std::sin(a));
  }
}

enum class Fill : uint8_t {
  kWeights,     // normal(0, std), of the file's type
  kF32Weights,  // normal(0, std), kept f32 (a MoE router, as llama.cpp's converter keeps it)
  kNorm,        // f32 ones
};

struct TensorSpec {
  std::string name;
  std::vector<int64_t> shape;  // ggml order: shape[0] is the row length
  Fill fill;
};

int64_t head_dim(const SynthShape& s) {
  return s.head_dim > 0 ? s.head_dim : s.n_embd / s.n_head;
}

bool is_moe(const SynthShape& s) {
  return s.n_expert > 0;
}

bool is_encoder(const SynthShape& s) {
  return s.arch == "bert" || s.arch == "nomic-bert" || s.arch == "jina-bert-v2" || s.arch == "modern-bert";
}

// modern-bert: pre-norm LayerNorms without biases (none before block 0's
// attention), q/k/v fused, no biases anywhere, GEGLU with the gate fused
// into ffn_up, a final LayerNorm.
std::vector<TensorSpec> modern_bert_tensors_of(const SynthShape& s, int64_t n_vocab) {
  std::vector<TensorSpec> t;
  t.push_back({"token_embd.weight", {s.n_embd, n_vocab}, Fill::kWeights});
  t.push_back({"token_embd_norm.weight", {s.n_embd}, Fill::kNorm});
  t.push_back({"output_norm.weight", {s.n_embd}, Fill::kNorm});
  for (int64_t i = 0; i < s.n_layer; ++i) {
    auto n = [i](const char* what) { return fmt::format("blk.{}.{}.weight", i, what); };
    if (i > 0) t.push_back({n("attn_norm"), {s.n_embd}, Fill::kNorm});
    t.push_back({n("attn_qkv"), {s.n_embd, 3 * s.n_embd}, Fill::kWeights});
    t.push_back({n("attn_output"), {s.n_embd, s.n_embd}, Fill::kWeights});
    t.push_back({n("ffn_norm"), {s.n_embd}, Fill::kNorm});
    t.push_back({n("ffn_up"), {s.n_embd, 2 * s.n_ff}, Fill::kWeights});
    t.push_back({n("ffn_down"), {s.n_ff, s.n_embd}, Fill::kWeights});
  }
  return t;
}

// bert: llama.cpp's BERT layout (token types, absolute positions,
// post-norm LayerNorms with biases, biases on every projection).
// jina-bert-v2: no positions (ALiBi), LayerNorms of q and k and a second
// attention LayerNorm (each optional in llama.cpp, all written here), and
// GEGLU with the gate fused into ffn_up (2 n_ff rows, gate first), or
// apart in ffn_gate (ffn_gate_apart).
std::vector<TensorSpec> bert_tensors_of(const SynthShape& s, int64_t n_vocab, int64_t n_token_types) {
  const bool nomic = s.arch == "nomic-bert";
  const bool jina = s.arch == "jina-bert-v2";
  std::vector<TensorSpec> t;
  t.push_back({"token_embd.weight", {s.n_embd, n_vocab}, Fill::kWeights});
  t.push_back({"token_types.weight", {s.n_embd, n_token_types}, Fill::kF32Weights});
  if (!nomic && !jina) t.push_back({"position_embd.weight", {s.n_embd, s.n_ctx}, Fill::kWeights});
  t.push_back({"token_embd_norm.weight", {s.n_embd}, Fill::kNorm});
  t.push_back({"token_embd_norm.bias", {s.n_embd}, Fill::kF32Weights});
  for (int64_t i = 0; i < s.n_layer; ++i) {
    auto n = [i](const char* what) { return fmt::format("blk.{}.{}.weight", i, what); };
    auto b = [i](const char* what) { return fmt::format("blk.{}.{}.bias", i, what); };
    if (nomic) {  // nomic-bert: fused q/k/v, SwiGLU, no biases on the projections
      t.push_back({n("attn_qkv"), {s.n_embd, 3 * s.n_embd}, Fill::kWeights});
      t.push_back({n("attn_output"), {s.n_embd, s.n_embd}, Fill::kWeights});
    } else {
      for (const char* p : {"attn_q", "attn_k", "attn_v", "attn_output"}) {
        t.push_back({n(p), {s.n_embd, s.n_embd}, Fill::kWeights});
        t.push_back({b(p), {s.n_embd}, Fill::kF32Weights});
      }
    }
    for (const char* p : {"attn_q_norm", "attn_k_norm"}) {
      if (!jina) break;
      t.push_back({n(p), {s.n_embd}, Fill::kNorm});
      t.push_back({b(p), {s.n_embd}, Fill::kF32Weights});
    }
    t.push_back({n("attn_output_norm"), {s.n_embd}, Fill::kNorm});
    t.push_back({b("attn_output_norm"), {s.n_embd}, Fill::kF32Weights});
    if (jina) {
      t.push_back({n("attn_norm_2"), {s.n_embd}, Fill::kNorm});
      t.push_back({b("attn_norm_2"), {s.n_embd}, Fill::kF32Weights});
    }
    if (nomic || s.ffn_gate_apart) t.push_back({n("ffn_gate"), {s.n_embd, s.n_ff}, Fill::kWeights});
    const int64_t n_up = jina && !s.ffn_gate_apart ? 2 * s.n_ff : s.n_ff;
    t.push_back({n("ffn_up"), {s.n_embd, n_up}, Fill::kWeights});
    if (!nomic && !jina) t.push_back({b("ffn_up"), {n_up}, Fill::kF32Weights});  // jina's GLU has none
    t.push_back({n("ffn_down"), {s.n_ff, s.n_embd}, Fill::kWeights});
    if (!nomic) t.push_back({b("ffn_down"), {s.n_embd}, Fill::kF32Weights});
    t.push_back({n("layer_output_norm"), {s.n_embd}, Fill::kNorm});
    t.push_back({b("layer_output_norm"), {s.n_embd}, Fill::kF32Weights});
  }
  if (s.rerank) {  // the classifier head on [CLS]: one label
    t.push_back({"cls.weight", {s.n_embd, s.n_embd}, Fill::kWeights});
    t.push_back({"cls.bias", {s.n_embd}, Fill::kF32Weights});
    t.push_back({"cls.output.weight", {s.n_embd, 1}, Fill::kF32Weights});
    t.push_back({"cls.output.bias", {1}, Fill::kF32Weights});
  }
  return t;
}

// n_token_types: the vocabulary's tokenizer.ggml.token_type_count (bert).
std::vector<TensorSpec> tensors_of(const SynthShape& s, int64_t n_vocab, int64_t n_token_types = 2) {
  if (s.arch == "modern-bert") return modern_bert_tensors_of(s, n_vocab);
  if (is_encoder(s)) return bert_tensors_of(s, n_vocab, n_token_types);
  const int64_t head = head_dim(s), q = head * s.n_head, kv = head * s.n_head_kv;
  std::vector<TensorSpec> t;
  t.push_back({"token_embd.weight", {s.n_embd, n_vocab}, Fill::kWeights});
  t.push_back({"output_norm.weight", {s.n_embd}, Fill::kNorm});
  if (!s.tied_output) t.push_back({"output.weight", {s.n_embd, n_vocab}, Fill::kWeights});
  if (s.rerank) t.push_back({"cls.output.weight", {s.n_embd, 2}, Fill::kWeights});  // "yes", "no"
  for (int64_t i = 0; i < s.n_layer; ++i) {
    auto n = [i](const char* what) { return fmt::format("blk.{}.{}.weight", i, what); };
    t.push_back({n("attn_norm"), {s.n_embd}, Fill::kNorm});
    t.push_back({n("attn_q"), {s.n_embd, q}, Fill::kWeights});
    t.push_back({n("attn_k"), {s.n_embd, kv}, Fill::kWeights});
    t.push_back({n("attn_v"), {s.n_embd, kv}, Fill::kWeights});
    t.push_back({n("attn_output"), {q, s.n_embd}, Fill::kWeights});
    auto b = [i](const char* what) { return fmt::format("blk.{}.{}.bias", i, what); };
    if (s.arch == "qwen2moe" || s.arch == "gpt-oss") {
      t.push_back({b("attn_q"), {q}, Fill::kF32Weights});
      t.push_back({b("attn_k"), {kv}, Fill::kF32Weights});
      t.push_back({b("attn_v"), {kv}, Fill::kF32Weights});
    }
    if (s.arch == "gpt-oss") {
      t.push_back({b("attn_output"), {s.n_embd}, Fill::kF32Weights});
      t.push_back({n("attn_sinks"), {s.n_head}, Fill::kF32Weights});
    }
    if (s.arch == "qwen3moe" || s.arch == "qwen3") {
      t.push_back({n("attn_q_norm"), {head}, Fill::kNorm});
      t.push_back({n("attn_k_norm"), {head}, Fill::kNorm});
    }
    if (s.arch == "olmoe") {  // over the whole projection
      t.push_back({n("attn_q_norm"), {q}, Fill::kNorm});
      t.push_back({n("attn_k_norm"), {kv}, Fill::kNorm});
    }
    t.push_back({n(s.arch == "gpt-oss" ? "post_attention_norm" : "ffn_norm"), {s.n_embd}, Fill::kNorm});
    if (is_moe(s)) {
      t.push_back({n("ffn_gate_inp"), {s.n_embd, s.n_expert}, Fill::kF32Weights});
      if (s.arch == "gpt-oss") {
        t.push_back({b("ffn_gate_inp"), {s.n_expert}, Fill::kF32Weights});
        t.push_back({b("ffn_gate_exps"), {s.n_ff_exp, s.n_expert}, Fill::kF32Weights});
        t.push_back({b("ffn_up_exps"), {s.n_ff_exp, s.n_expert}, Fill::kF32Weights});
        t.push_back({b("ffn_down_exps"), {s.n_embd, s.n_expert}, Fill::kF32Weights});
      }
      t.push_back({n("ffn_gate_exps"), {s.n_embd, s.n_ff_exp, s.n_expert}, Fill::kWeights});
      t.push_back({n("ffn_up_exps"), {s.n_embd, s.n_ff_exp, s.n_expert}, Fill::kWeights});
      t.push_back({n("ffn_down_exps"), {s.n_ff_exp, s.n_embd, s.n_expert}, Fill::kWeights});
      if (s.arch == "qwen2moe") {  // the shared expert, n_ff rows
        t.push_back({n("ffn_gate_inp_shexp"), {s.n_embd}, Fill::kF32Weights});
        t.push_back({n("ffn_gate_shexp"), {s.n_embd, s.n_ff}, Fill::kWeights});
        t.push_back({n("ffn_up_shexp"), {s.n_embd, s.n_ff}, Fill::kWeights});
        t.push_back({n("ffn_down_shexp"), {s.n_ff, s.n_embd}, Fill::kWeights});
      }
    } else {
      t.push_back({n("ffn_gate"), {s.n_embd, s.n_ff}, Fill::kWeights});
      t.push_back({n("ffn_up"), {s.n_embd, s.n_ff}, Fill::kWeights});
      t.push_back({n("ffn_down"), {s.n_ff, s.n_embd}, Fill::kWeights});
    }
  }
  return t;
}

// The weights' type; MXFP4 is written as the MXFP4_MOE mix does (file type
// 38): the 3-D experts in MXFP4, the other weights in Q8_0.
DType type_of(const TensorSpec& t, DType type) {
  if (t.fill != Fill::kWeights) return DType::kF32;
  if (type == DType::kMXFP4 && t.shape.size() < 3) return DType::kQ8_0;
  return type;
}

uint64_t tensor_bytes(const TensorSpec& t, DType type) {
  const DType dt = type_of(t, type);
  uint64_t rows = 1;
  for (size_t i = 1; i < t.shape.size(); ++i) rows *= static_cast<uint64_t>(t.shape[i]);
  return *row_bytes(dt, t.shape[0]) * rows;
}

void check_options(const SynthOptions& o) {
  const SynthShape& s = o.shape;
  if (s.arch != "llama" && s.arch != "qwen3" && s.arch != "qwen3moe" && s.arch != "qwen2moe" &&
      s.arch != "gpt-oss" && s.arch != "olmoe" && !is_encoder(s)) {
    fail(ErrorCategory::kInvalidArgument,
         "[synth] shape '{}': found architecture '{}', expected llama, qwen3, qwen3moe, qwen2moe, gpt-oss, olmoe, "
         "bert, nomic-bert, jina-bert-v2 or modern-bert",
         s.name, s.arch);
  }
  if (s.arch != "llama" && s.arch != "qwen3" && !is_encoder(s) && s.n_expert == 0) {
    fail(ErrorCategory::kInvalidArgument, "[synth] shape '{}': a {} shape needs experts", s.name, s.arch);
  }
  if (s.n_embd <= 0 || s.n_layer <= 0 || s.n_head <= 0 || s.n_head_kv <= 0 || s.n_ff <= 0 ||
      (s.head_dim == 0 && s.n_embd % s.n_head != 0) || s.n_head % s.n_head_kv != 0) {
    fail(ErrorCategory::kInvalidArgument,
         "[synth] shape '{}': found n_embd {}, n_head {}, n_head_kv {}, expected heads that "
         "divide n_embd and KV heads that divide heads",
         s.name, s.n_embd, s.n_head, s.n_head_kv);
  }
  if (is_moe(s) && (s.n_expert <= 0 || s.n_expert_used <= 0 || s.n_expert_used > s.n_expert ||
                    s.n_ff_exp <= 0 || (s.arch == "llama" && s.n_ff_exp != s.n_ff))) {
    fail(ErrorCategory::kInvalidArgument,
         "[synth] shape '{}': found {} experts, {} per token, {} rows each, expected 1 <= per token <= experts",
         s.name, s.n_expert, s.n_expert_used, s.n_ff_exp);
  }
  if (o.layers < 0 || o.layers > 512) {
    fail(ErrorCategory::kInvalidArgument, "[synth] --layers: found {}, expected 0 (the shape's) to 512", o.layers);
  }
  if (!(o.std > 0.0f && o.std <= 10.0f)) {
    fail(ErrorCategory::kInvalidArgument, "[synth] --std: found {}, expected (0, 10]", o.std);
  }
  const DTypeInfo& info = dtype_info(o.type);
  const bool dense_rows = !is_moe(s) || s.arch == "qwen2moe";  // a dense FFN or a shared expert of n_ff
  for (int64_t row : {s.n_embd, dense_rows ? s.n_ff : s.n_embd, is_moe(s) ? s.n_ff_exp : s.n_embd,
                      head_dim(s) * s.n_head}) {
    if (!info.has_quantize || row % info.block_size != 0) {
      fail(ErrorCategory::kInvalidArgument,
           "[synth] --type {}: found rows of {} elements, expected a type tessera can write "
           "whose block size ({}) divides them",
           info.name, row, info.block_size);
    }
  }
}

// Copies tokenizer.* from the vocabulary file; pads the token arrays with
// unused tokens up to n_vocab. Returns the vocabulary's own size.
int64_t copy_tokenizer(const gguf::File& v, gguf::Writer& w, int64_t n_vocab) {
  const gguf::Value* tokens = v.find("tokenizer.ggml.tokens");
  if (tokens == nullptr) {
    fail(ErrorCategory::kInvalidArgument, "[synth] --vocab {}: found no tokenizer.ggml.tokens, "
         "expected a vocabulary GGUF", v.name());
  }
  const auto have = static_cast<int64_t>(tokens->array().size());
  if (n_vocab == 0) n_vocab = have;
  if (have > n_vocab) {
    fail(ErrorCategory::kInvalidArgument,
         "[synth] --vocab {}: found {} tokens, expected at most the shape's {}", v.name(),
         have, n_vocab);
  }
  for (const gguf::KeyValue& kv : v.kvs()) {
    if (!kv.key.starts_with("tokenizer.")) continue;
    const bool per_token = kv.key == "tokenizer.ggml.tokens" || kv.key == "tokenizer.ggml.scores" ||
                           kv.key == "tokenizer.ggml.token_type";
    if (!per_token || have == n_vocab) {
      w.set_value(kv.key, kv.value);
      continue;
    }
    const gguf::ArrayView& a = kv.value.array();
    if (kv.key == "tokenizer.ggml.tokens") {
      std::vector<std::string> s;
      for (uint64_t i = 0; i < a.size(); ++i) s.emplace_back(a.string(i));
      for (int64_t i = have; i < n_vocab; ++i) s.push_back(fmt::format("<unused{}>", i));
      w.set_array_strings(kv.key, s);
    } else if (kv.key == "tokenizer.ggml.scores") {
      std::vector<float> s;
      for (uint64_t i = 0; i < a.size(); ++i) s.push_back(a.number<float>(i));
      s.resize(static_cast<size_t>(n_vocab), 0.0f);
      w.set_array_f32(kv.key, s);
    } else {
      std::vector<int32_t> s;
      for (uint64_t i = 0; i < a.size(); ++i) s.push_back(a.number<int32_t>(i));
      s.resize(static_cast<size_t>(n_vocab), 5);  // llama_token_type UNUSED
      w.set_array_i32(kv.key, s);
    }
  }
  return n_vocab;
}

// The shape the options write: the shape's, with --layers blocks when given.
SynthShape effective_shape(const SynthOptions& o) {
  SynthShape s = o.shape;
  if (o.layers > 0) s.n_layer = o.layers;
  return s;
}

}  // namespace

std::span<const SynthShape> synth_shapes() { return kShapes; }

const SynthShape* find_synth_shape(std::string_view name) {
  for (const SynthShape& s : kShapes) {
    if (s.name == name) return &s;
  }
  return nullptr;
}

std::optional<uint32_t> llama_file_type(DType type) {
  switch (type) {
    case DType::kF32: return 0;
    case DType::kF16: return 1;
    case DType::kQ4_0: return 2;
    case DType::kQ4_1: return 3;
    case DType::kQ8_0: return 7;
    case DType::kQ5_0: return 8;
    case DType::kQ5_1: return 9;
    case DType::kQ2_K: return 10;
    case DType::kQ3_K: return 12;    // Q3_K_M
    case DType::kQ4_K: return 15;    // Q4_K_M
    case DType::kQ5_K: return 17;    // Q5_K_M
    case DType::kQ6_K: return 18;
    case DType::kIQ4_NL: return 25;
    case DType::kIQ4_XS: return 30;
    case DType::kMXFP4: return 38;   // MXFP4_MOE
    case DType::kBF16: return 32;
    default: return std::nullopt;
  }
}

uint64_t synth_weight_bytes(const SynthOptions& o, int64_t n_vocab) {
  uint64_t total = 0;
  for (const TensorSpec& t : tensors_of(effective_shape(o), n_vocab)) total += tensor_bytes(t, o.type);
  return total;
}

void synthesize_model(const SynthOptions& o, const std::filesystem::path& path,
                      const SynthProgress& progress) {
  check_options(o);
  const SynthShape s = effective_shape(o);
  const std::string a(s.arch);
  const auto key = [&a](std::string_view suffix) { return fmt::format("{}.{}", a, suffix); };
  gguf::Writer w;
  w.set_string("general.architecture", a);
  w.set_string("general.name", fmt::format("random {} {}", s.name, dtype_name(o.type)));
  if (auto ft = llama_file_type(o.type)) w.set_u32("general.file_type", *ft);
  w.set_u32(key("context_length"), s.n_ctx);
  w.set_u32(key("embedding_length"), static_cast<uint32_t>(s.n_embd));
  w.set_u32(key("block_count"), static_cast<uint32_t>(s.n_layer));
  w.set_u32(key("feed_forward_length"), static_cast<uint32_t>(s.n_ff));
  w.set_u32(key("attention.head_count"), static_cast<uint32_t>(s.n_head));
  w.set_u32(key("attention.head_count_kv"), static_cast<uint32_t>(s.n_head_kv));
  const bool encoder = is_encoder(s);
  if (encoder) {  // LayerNorms, both directions, mean pooling
    w.set_f32(key("attention.layer_norm_epsilon"), 1e-12f);
    w.set_bool(key("attention.causal"), false);
    w.set_u32(key("pooling_type"), s.rerank ? 4 : 1);  // rank or mean
    if (s.rerank) w.set_array_strings(key("classifier.output_labels"), std::vector<std::string>{"LABEL_0"});
  }
  const bool positions_learned = s.arch == "bert" || s.arch == "jina-bert-v2";  // or ALiBi: no RoPE
  if (!positions_learned) w.set_f32(key("rope.freq_base"), s.rope_base);
  if (s.pooling > 0) w.set_u32(key("pooling_type"), s.pooling);
  if (!encoder && s.rerank) {  // Qwen3-Reranker's labels and its prompt, as its GGUF carries them
    w.set_array_strings(key("classifier.output_labels"), std::vector<std::string>{"yes", "no"});
    w.set_string("tokenizer.chat_template.rerank",
                 "<|im_start|>system\nJudge whether the Document meets the requirements based on the Query "
                 "and the Instruct provided. Note that the answer can only be \"yes\" or \"no\".<|im_end|>\n"
                 "<|im_start|>user\n<Instruct>: Given a web search query, retrieve relevant passages that "
                 "answer the query\n<Query>: {query}\n<Document>: {document}<|im_end|>\n"
                 "<|im_start|>assistant\n<think>\n\n</think>\n\n");
  }
  if (s.arch == "qwen3" || s.arch == "qwen3moe" || s.arch == "gpt-oss") {
    w.set_u32(key("attention.key_length"), static_cast<uint32_t>(head_dim(s)));
    w.set_u32(key("attention.value_length"), static_cast<uint32_t>(head_dim(s)));
  } else if (!positions_learned) {
    w.set_u32(key("rope.dimension_count"), static_cast<uint32_t>(head_dim(s)));
  }
  if (!encoder) {
    w.set_f32(key("attention.layer_norm_rms_epsilon"), s.arch == "llama" || s.arch == "gpt-oss" ? 1e-5f : 1e-6f);
  }
  if (is_moe(s)) {
    w.set_u32(key("expert_count"), static_cast<uint32_t>(s.n_expert));
    w.set_u32(key("expert_used_count"), static_cast<uint32_t>(s.n_expert_used));
    // (llama's experts are n_ff rows: llama.cpp reads no expert length for it)
    if (s.arch != "llama") w.set_u32(key("expert_feed_forward_length"), static_cast<uint32_t>(s.n_ff_exp));
    if (s.arch == "qwen2moe") w.set_u32(key("expert_shared_feed_forward_length"), static_cast<uint32_t>(s.n_ff));
  }
  if (s.sliding_window > 0) w.set_u32(key("attention.sliding_window"), static_cast<uint32_t>(s.sliding_window));
  if (s.arch == "modern-bert") {  // local blocks: all but every third, RoPE base 10000
    w.set_u32(key("attention.sliding_window_pattern"), 3);
    w.set_f32(key("rope.freq_base_swa"), 10000.0f);
  }
  if (s.yarn_factor > 0.0f) {
    w.set_string(key("rope.scaling.type"), "yarn");
    w.set_f32(key("rope.scaling.factor"), s.yarn_factor);
    w.set_u32(key("rope.scaling.original_context_length"), s.yarn_orig_ctx);
  }

  int64_t n_vocab = s.n_vocab;
  int64_t n_token_types = 2;  // BERT's; XLM-RoBERTa's vocabularies say 1
  if (!o.vocab.empty()) {
    const gguf::File vocab = gguf::File::open(o.vocab);
    n_vocab = copy_tokenizer(vocab, w, n_vocab);
    if (const gguf::Value* types = vocab.find("tokenizer.ggml.token_type_count")) {
      if (types->is_integer()) n_token_types = std::clamp<int64_t>(types->u32(), 1, 16);
    }
  } else if (n_vocab == 0) {
    fail(ErrorCategory::kInvalidArgument,
         "[synth] shape '{}' takes its vocabulary size from --vocab, found none", s.name);
  }
  w.set_u32(key("vocab_size"), static_cast<uint32_t>(n_vocab));

  const std::vector<TensorSpec> specs = tensors_of(s, n_vocab, n_token_types);
  const int threads = default_tool_threads(o.threads);
  for (size_t ti = 0; ti < specs.size(); ++ti) {
    const TensorSpec& t = specs[ti];
    const DType type = type_of(t, o.type);
    const uint64_t tensor_seed = o.seed * 0x100000001b3ULL + ti;
    const float std = o.std;
    w.add_tensor(t.name, type, t.shape, [&t, type, tensor_seed, threads, std](std::span<uint8_t> out) {
      const int64_t n = t.shape[0];
      const int64_t rows = static_cast<int64_t>(out.size() / *row_bytes(type, n));
      const size_t row = *row_bytes(type, n);
      parallel_rows(rows, threads, [&](int64_t begin, int64_t end) {
        std::vector<float> v(static_cast<size_t>(n));
        for (int64_t r = begin; r < end; ++r) {
          if (t.fill == Fill::kNorm) {
            std::fill(v.begin(), v.end(), 1.0f);
          } else {
            uint64_t mix = tensor_seed ^ (static_cast<uint64_t>(r) * 0xd1b54a32d192ed03ULL);
            fill_normal(v.data(), n, splitmix64(mix), std);
          }
          quantize_row(type, v.data(), out.data() + static_cast<size_t>(r) * row, n);
        }
      });
    });
  }
  uint64_t done = 0;
  const uint64_t total = synth_weight_bytes(o, n_vocab);
  w.write(path, [&](size_t i, size_t, std::string_view name) {
    if (i > 0) done += tensor_bytes(specs[i - 1], o.type);
    if (progress) progress(done, total, name);
  });
  if (progress) progress(total, total, "");
}

}  // namespace tessera
