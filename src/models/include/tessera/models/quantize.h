// Converting a GGUF model's weights to another type, as llama-quantize does:
// the same targets (its file types, "mixes": Q4_K_M, Q5_K_M, IQ4_XS, ... and
// the plain F32 / F16 / BF16 / Q8_0 / Q4_0 / Q4_1 / Q5_0 / Q5_1), the same
// per-tensor rules (llama_tensor_get_type: which weights get more bits, the
// output head, fallbacks for rows no multiple of a block), and, without an
// importance matrix, the same bytes. The metadata is copied; general.file_type
// is set to the mix's llama_ftype number.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "tessera/core/dtype.h"

namespace tessera {

// A target as llama-quantize names it: a llama_ftype, written as
// general.file_type, and the type most 2-D weights get.
struct QuantizeMix {
  std::string_view name;  // "Q4_K_M"
  uint32_t ftype;         // 15 (include/llama.h's LLAMA_FTYPE_MOSTLY_Q4_K_M)
  DType type;             // kQ4_K
};

// The mix by name (any case; llama-quantize's aliases Q3_K, Q4_K, Q5_K for the
// _M mixes) or by ftype number ("15"); null for others.
std::optional<QuantizeMix> quantize_mix_from_name(std::string_view name);
// The mix whose default type is `type` and that has no per-tensor rules but
// the output head's (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q6_K); null for others.
std::optional<QuantizeMix> quantize_mix_of(DType type);
// "Q2_K (10), Q3_K_S (11), ...", for help and errors.
std::string quantize_mix_names();

struct QuantizeOptions {
  QuantizeMix mix = *quantize_mix_of(DType::kQ8_0);
  int threads = 0;  // 0: all logical CPUs
  // Every 2-D weight in mix.type (falling back, as llama-quantize does, where
  // rows are no multiple of the block). Otherwise llama-quantize's rules for
  // the mix pick each tensor's type: for a quantized mix the output head
  // (token_embd when the model ties it) is Q6_K (Q8_0 for Q8_0); the K and
  // IQ4 mixes give attn_v, ffn_down, attn_output more bits in some layers.
  bool pure = false;
  // Weights already quantized (Q4_K, ...) are dequantized and quantized again
  // only when allowed: it adds the second rounding's error.
  bool allow_requantize = false;
  // --imatrix: llama-imatrix's GGUF output. Each tensor with an entry is
  // quantized with ggml's importance-weighted search (the bytes
  // llama-quantize --imatrix writes); the rules change as llama-quantize's do.
  std::filesystem::path imatrix;
  std::optional<DType> output_type;           // --output-tensor-type
  std::optional<DType> token_embedding_type;  // --token-embedding-type
};

struct QuantizeTensor {
  std::string_view name;
  DType from, to;
  uint64_t bytes_in, bytes_out;
  std::string note;  // why `to` differs from the asked type, if it does
  bool imatrix = false;  // quantized with importance weights
};

struct QuantizeSummary {
  uint64_t bytes_in = 0, bytes_out = 0;
  size_t tensors = 0, converted = 0;
};

// progress(i, n, tensor) before tensor i of n is converted.
using QuantizeProgress = std::function<void(size_t i, size_t n, const QuantizeTensor& tensor)>;

// Reads `in`, writes `out` (through out.tmp; `in` may not be `out`). Throws
// Error naming the file and tensor on bad input.
QuantizeSummary quantize_model(const std::filesystem::path& in, const std::filesystem::path& out,
                               const QuantizeOptions& options,
                               const QuantizeProgress& progress = {});

// A tensor type, for --output-tensor-type / --token-embedding-type, by its
// ggml name in any case ("q6_k", "Q8_0", "iq4_nl") or the file-type number of
// the plain mix that has it ("7"); null for types tessera cannot write.
std::optional<DType> quantize_type_from_name(std::string_view name);
// The names quantize_type_from_name accepts, for help and errors.
std::string quantize_type_names();

}  // namespace tessera
