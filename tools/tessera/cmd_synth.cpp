// `tessera synth --shape NAME --type TYPE -o FILE [--layers N] [--vocab V]
// [--seed S] [--std X] [-t N]`: a random-weight model of a real shape (its
// architecture is the shape's), for benchmarks without downloads.
#include <chrono>
#include <filesystem>
#include <memory>
#include <string>

#include <fmt/format.h>

#include "commands.h"
#include "common.h"
#include "tessera/core/error.h"
#include "tessera/models/synth.h"

namespace tessera::cli {
namespace {

std::string shape_list() {
  std::string s;
  for (const SynthShape& sh : synth_shapes()) {
    s += fmt::format("\n  {:<15} {}: n_embd {:>4}, {:>2} layers, {:>2} heads, {:>2} KV heads, {}, vocab {}{}",
                     sh.name, sh.arch, sh.n_embd, sh.n_layer, sh.n_head, sh.n_head_kv,
                     sh.n_expert > 0 ? fmt::format("{} experts of {} rows, {} per token", sh.n_expert,
                                                   sh.n_ff_exp, sh.n_expert_used)
                                     : fmt::format("n_ff {}", sh.n_ff),
                     sh.n_vocab ? std::to_string(sh.n_vocab) : "of --vocab",
                     sh.tied_output ? ", output tied to token_embd" : "");
  }
  return s;
}

}  // namespace

Runner add_synth(CLI::App& app) {
  struct Options {
    std::string arch, shape, type = "f16", out, vocab;
    uint64_t seed = 1;
    int64_t layers = 0;
    float std = 0.02f;
    int threads = 0;
  };
  auto opts = std::make_shared<Options>();
  opts->vocab = TESSERA_DEFAULT_SYNTH_VOCAB;
  CLI::App* cmd = app.add_subcommand(
      "synth", "Write a random-weight model of a real shape (normal weights, std 0.02; norms 1; "
               "a MoE router f32)");
  cmd->footer("Shapes:" + shape_list() +
              "\nA vocabulary smaller than the shape's is padded with unused tokens.");
  cmd->add_option("--arch", opts->arch, "Architecture: must be the shape's (llama, qwen3moe, qwen2moe, gpt-oss)");
  cmd->add_option("--shape", opts->shape, "Shape name (see below)")->required();
  cmd->add_option("--layers", opts->layers, "Blocks to write instead of the shape's (a file that fits memory)")
      ->check(CLI::Range(int64_t{1}, int64_t{512}));
  cmd->add_option("--std", opts->std, "Standard deviation of the weights")
      ->capture_default_str()
      ->check(CLI::Range(1e-6f, 10.0f));
  cmd->add_option("--type", opts->type,
                  "Type of the weight matrices: any type tessera quantizes (f16, q8_0, q4_0, q4_k, "
                  "q6_k, mxfp4 (as MXFP4_MOE: experts mxfp4, the rest q8_0), ...)")
      ->capture_default_str();
  cmd->add_option("-o,--output", opts->out, "GGUF file to write")->required();
  cmd->add_option("--vocab", opts->vocab, "GGUF whose tokenizer the model takes")
      ->capture_default_str();
  cmd->add_option("--seed", opts->seed, "Seed of the weights")->capture_default_str();
  cmd->add_option("-t,--threads", opts->threads, "Threads (0: all CPUs)")->capture_default_str();
  return [opts]() {
    const SynthShape* shape = find_synth_shape(opts->shape);
    if (shape == nullptr) {
      fail(ErrorCategory::kInvalidArgument, "[--shape] found '{}', expected one of:{}", opts->shape,
           shape_list());
    }
    if (!opts->arch.empty() && opts->arch != shape->arch) {
      fail(ErrorCategory::kInvalidArgument, "[--arch] found '{}', but shape '{}' is {}", opts->arch,
           shape->name, shape->arch);
    }
    const auto type = dtype_from_name(opts->type);
    if (!type) {
      fail(ErrorCategory::kInvalidArgument, "[--type] found '{}', expected a type such as q4_0",
           opts->type);
    }
    SynthOptions o;
    o.shape = *shape;
    o.layers = opts->layers;
    o.std = opts->std;
    o.type = *type;
    o.vocab = opts->vocab;
    o.seed = opts->seed;
    o.threads = opts->threads;
    const auto start = std::chrono::steady_clock::now();
    int shown = -1;
    synthesize_model(o, opts->out, [&](uint64_t done, uint64_t total, std::string_view tensor) {
      const int pct = total ? static_cast<int>(100 * done / total) : 100;
      if (pct / 5 == shown / 5 && done != total) return;  // a line per 5%
      shown = pct;
      fmt::print(stderr, "synth {}: {:3}% ({:.0f} of {:.0f} MiB) {}\n", opts->out, pct,
                 double(done) / (1 << 20), double(total) / (1 << 20), tensor);
    });
    fmt::print(stderr, "wrote {} ({} {}, {:.1f} MiB) in {:.1f} s\n", opts->out, shape->name,
               dtype_name(*type), double(std::filesystem::file_size(opts->out)) / (1 << 20),
               ms_since(start) / 1000.0);
    return 0;
  };
}

}  // namespace tessera::cli
