#include "common.h"

#include <cstdio>

#include <fmt/format.h>

#include "tessera/error.h"

namespace tessera::cli {

void add_model_flags(CLI::App& cmd, ModelFlags& flags) {
  cmd.add_option("-m,--model", flags.model, "GGUF model file")->required();
  cmd.add_option("-t,--threads", flags.threads, "CPU threads (default: one per physical core)")
      ->check(CLI::Range(0, 1024));
  cmd.add_option("--gpu-layers,--n-gpu-layers,--ngl", flags.gpu_layers,
                 "Layers on the best GPU (default: all that fit; 0: none)")
      ->check(CLI::Range(-1, 100000));
  cmd.add_option("--device", flags.device, "Device for offloaded layers, e.g. CUDA0");
}

LoadedModel load_model(const ModelFlags& flags) {
  const auto start = std::chrono::steady_clock::now();
  std::unique_ptr<Runtime> runtime = make_runtime();
  if (flags.threads > 0) {
    // The CPU backend's extension function, reached by name (no backend header here).
    using SetThreads = void (*)(Device&, int);
    Backend* cpu = runtime->find_backend("CPU");
    auto* set = cpu ? reinterpret_cast<SetThreads>(cpu->proc_address("cpu_set_threads")) : nullptr;
    if (set == nullptr) {
      fail(ErrorCategory::kUnsupported, "[-t] this build's CPU backend cannot set threads");
    }
    set(cpu->device(0), flags.threads);
  }
  ModelOptions options;
  options.gpu_layers = flags.gpu_layers;
  options.device = flags.device;
  bool shown = false;
  options.progress = [&](uint64_t done, uint64_t total) {
    if (ms_since(start) < 1000.0 && !shown) return;
    shown = true;
    fmt::print(stderr, "\rloading {}: {:3.0f}%", flags.model, total ? 100.0 * done / total : 100.0);
    if (done == total) fmt::print(stderr, "\n");
  };
  std::unique_ptr<Model> model = Model::load(*runtime, flags.model, options);
  Tokenizer tokenizer = Tokenizer::from_gguf(model->file());
  LoadedModel out{std::move(runtime), std::move(model), std::move(tokenizer), 0.0};
  if (static_cast<int64_t>(out.tokenizer.n_vocab()) != out.model->hparams().n_vocab) {
    fail(ErrorCategory::kInvalidFile, "[model {}] tokenizer has {} tokens, the weights {}",
         flags.model, out.tokenizer.n_vocab(), out.model->hparams().n_vocab);
  }
  out.load_ms = ms_since(start);
  return out;
}

}  // namespace tessera::cli
