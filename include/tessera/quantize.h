// Converting a GGUF model's weights to another type, as llama-quantize does
// for the types tessera writes: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0,
// Q5_1, Q6_K. The metadata is copied; general.file_type is set.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "tessera/dtype.h"

namespace tessera {

struct QuantizeOptions {
  DType type = DType::kQ8_0;  // of the 2-D weights
  int threads = 0;            // 0: all logical CPUs
  // Every 2-D weight in `type`. Otherwise, as llama-quantize does for the
  // quantized types, the output head (token_embd when the model ties it) is
  // Q6_K, or Q8_0 when `type` is Q8_0 or its rows are no multiple of 256.
  bool pure = false;
  // Weights already quantized (Q4_K, ...) are dequantized and quantized again
  // only when allowed: it adds the second rounding's error.
  bool allow_requantize = false;
  std::optional<DType> output_type;           // --output-tensor-type
  std::optional<DType> token_embedding_type;  // --token-embedding-type
};

struct QuantizeTensor {
  std::string_view name;
  DType from, to;
  uint64_t bytes_in, bytes_out;
  std::string note;  // why `to` differs from the asked type, if it does
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

// A type as llama-quantize names it ("Q4_0", "q8_0", "F16", "BF16", "Q6_K")
// or its file-type number ("2"); null for others and types tessera cannot write.
std::optional<DType> quantize_type_from_name(std::string_view name);
// The names quantize_type_from_name accepts, for help and errors.
std::string quantize_type_names();

}  // namespace tessera
