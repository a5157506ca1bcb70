// `tessera quantize IN OUT TYPE [NTHREADS]`, in llama-quantize's argument
// order and with its type names (the mixes Q4_K_M, IQ4_XS, ... by name in any
// case or by number): converts a model's weights.
#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include <fmt/format.h>

#include "commands.h"
#include "common.h"
#include "tessera/core/error.h"
#include "tessera/models/quantize.h"

namespace tessera::cli {
namespace {

QuantizeMix parse_mix(const std::string& value) {
  const auto m = quantize_mix_from_name(value);
  if (!m) {
    fail(ErrorCategory::kInvalidArgument, "[type] found '{}', expected one of {}", value,
         quantize_mix_names());
  }
  return *m;
}

DType parse_type(const std::string& flag, const std::string& value) {
  const auto t = quantize_type_from_name(value);
  if (!t) {
    fail(ErrorCategory::kInvalidArgument, "[{}] found '{}', expected one of {}", flag, value,
         quantize_type_names());
  }
  return *t;
}

}  // namespace

Runner add_quantize(CLI::App& app) {
  struct Options {
    std::string in, out, type, output_type, embd_type, imatrix;
    int threads = 0;
    bool pure = false, allow_requantize = false;
  };
  auto opts = std::make_shared<Options>();
  CLI::App* cmd = app.add_subcommand("quantize", "Convert a model's weights to another type");
  cmd->footer("Types (llama-quantize's names and numbers): " + quantize_mix_names() +
              "; Q3_K, Q4_K, Q5_K stand for the _M mixes.\n"
              "1-D tensors (norms, biases) keep their type. Unless --pure, llama-quantize's "
              "per-tensor rules apply: the output head is Q6_K (Q8_0 for Q8_0); the K and IQ4 "
              "mixes give attn_v, ffn_down and attn_output more bits in some layers; rows no "
              "multiple of 256 fall back to a type with blocks of 32. --imatrix weights each "
              "column's rounding error by llama-imatrix's importance (GGUF format).\n"
              "Tensor types for --output-tensor-type / --token-embedding-type: " +
              quantize_type_names() + ".");
  cmd->add_option("input", opts->in, "GGUF model to read")->required();
  cmd->add_option("output", opts->out, "GGUF file to write")->required();
  cmd->add_option("type", opts->type, "Target type, by name or number")->required();
  cmd->add_option("nthreads", opts->threads, "Threads (default: all CPUs)");
  cmd->add_flag("--pure", opts->pure, "Every 2-D weight in TYPE, the output head too");
  cmd->add_flag("--allow-requantize", opts->allow_requantize,
                "Convert weights that are already quantized (dequantized first)");
  cmd->add_option("--imatrix", opts->imatrix,
                  "Importance matrix (llama-imatrix's GGUF) weighting each column's error");
  cmd->add_option("--output-tensor-type", opts->output_type, "Type of output.weight");
  cmd->add_option("--token-embedding-type", opts->embd_type, "Type of token_embd.weight");
  return [opts]() {
    QuantizeOptions o;
    o.mix = parse_mix(opts->type);
    o.threads = opts->threads;
    o.pure = opts->pure;
    o.allow_requantize = opts->allow_requantize;
    o.imatrix = opts->imatrix;
    if (!opts->output_type.empty()) o.output_type = parse_type("--output-tensor-type", opts->output_type);
    if (!opts->embd_type.empty()) {
      o.token_embedding_type = parse_type("--token-embedding-type", opts->embd_type);
    }
    const auto start = std::chrono::steady_clock::now();
    const QuantizeSummary s = quantize_model(
        opts->in, opts->out, o, [](size_t i, size_t n, const QuantizeTensor& t) {
          fmt::print(stderr, "[{:>4}/{:>4}] {:<32} {:>5} -> {:<5} {:9.2f} MiB -> {:9.2f} MiB{}{}\n",
                     i + 1, n, t.name, dtype_name(t.from), dtype_name(t.to),
                     double(t.bytes_in) / (1 << 20), double(t.bytes_out) / (1 << 20),
                     t.note.empty() ? "" : "  (" + t.note + ")", t.imatrix ? "  [imatrix]" : "");
        });
    fmt::print(stderr, "quantized {} -> {}: {} of {} tensors converted, {:.1f} MiB -> {:.1f} MiB in "
               "{:.1f} s\n", opts->in, opts->out, s.converted, s.tensors,
               double(s.bytes_in) / (1 << 20), double(s.bytes_out) / (1 << 20),
               ms_since(start) / 1000.0);
    return 0;
  };
}

}  // namespace tessera::cli
