// Random-weight models of real shapes (llama, and qwen3moe with its experts),
// written as GGUF files that any GGUF
// reader loads as an ordinary model: for benchmarks without downloads.
// Weights are normal (std 0.02), norms 1; the tokenizer is copied from a
// vocabulary GGUF. The file is written as a stream, one tensor in memory at a
// time, so a 7B F16 file needs no 13 GiB of RAM.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "tessera/core/dtype.h"

namespace tessera {

struct SynthShape {
  std::string_view name;
  int64_t n_embd, n_layer, n_head, n_head_kv, n_ff;
  int64_t n_vocab;  // 0: the vocabulary file's size
  uint32_t n_ctx;
  float rope_base;
  bool tied_output;  // no output.weight: the head reads token_embd (Llama 3.2 1B)
  std::string_view arch = "llama";  // llama, qwen3, qwen3moe, qwen2moe, gpt-oss, olmoe, bert or nomic-bert
  int64_t head_dim = 0;             // 0: n_embd / n_head
  int64_t n_expert = 0, n_expert_used = 0, n_ff_exp = 0;  // experts (qwen3moe, qwen2moe, llama, gpt-oss)
  int64_t sliding_window = 0;   // gpt-oss: every other layer's window
  float yarn_factor = 0.0f;     // > 0: rope.scaling.type yarn with this factor ...
  uint32_t yarn_orig_ctx = 0;   // ... over this original context
  bool rerank = false;          // a classifier head and rank pooling (bert: cls, cls.output; qwen3: cls.output)
  uint32_t pooling = 0;         // > 0: {arch}.pooling_type (a decoder that embeds: 3, last)
  bool ffn_gate_apart = false;  // jina-bert-v2: ffn_gate beside ffn_up, as older converters wrote
};

// tinyllama-1.1b, llama-100m, llama3-1b, llama2-7b, tiny, qwen3-30b-a3b,
// gpt-oss-20b, olmoe-1b-7b, and the fixtures' qwen3moe-tiny, mixtral-tiny, qwen2moe-tiny,
// gpt-oss-tiny, olmoe-tiny; the encoders bge-small-en-v1.5, bge-base-en-v1.5,
// bge-reranker-base, and the fixtures' bert-tiny and bert-tiny-rerank.
std::span<const SynthShape> synth_shapes();
// Null when there is no shape of that name.
const SynthShape* find_synth_shape(std::string_view name);

struct SynthOptions {
  SynthShape shape{};  // its arch says which architecture the file is
  int64_t layers = 0;  // > 0: this many blocks instead of the shape's (a file that fits memory)
  float std = 0.02f;   // of the normal weights (fixtures take larger ones, for wide logit margins)
  DType type = DType::kF16;  // of the 2-D weights; norms are f32
  // A GGUF whose tokenizer.* keys are copied. A vocabulary smaller than the
  // shape's is padded with unused tokens; a larger one is an error.
  std::filesystem::path vocab;
  uint64_t seed = 1;
  int threads = 0;  // 0: all logical CPUs
};

// Bytes of the weights the options describe (the tensor data of the file).
uint64_t synth_weight_bytes(const SynthOptions& options, int64_t n_vocab);

// Writes the model to `path` (through path.tmp). progress(done, total, name)
// is called before each tensor with the bytes written so far.
using SynthProgress = std::function<void(uint64_t done, uint64_t total, std::string_view tensor)>;
void synthesize_model(const SynthOptions& options, const std::filesystem::path& path,
                      const SynthProgress& progress = {});

// llama.cpp's general.file_type (llama_ftype) for a file "mostly" of `type`:
// F32 0, F16 1, Q4_0 2, Q4_1 3, Q8_0 7, Q5_0 8, Q5_1 9, Q2_K 10, Q3_K 12 (_M),
// Q4_K 15 (_M), Q5_K 17 (_M), Q6_K 18, IQ4_NL 25, IQ4_XS 30, BF16 32, MXFP4 38 (MXFP4_MOE).
// Null for types without one.
std::optional<uint32_t> llama_file_type(DType type);

}  // namespace tessera
