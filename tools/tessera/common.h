// What the model-running subcommands share: the model flags and loading a
// model (with progress on stderr for loads over a second).
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include <CLI/CLI.hpp>

#include "tessera/model.h"
#include "tessera/runtime.h"
#include "tessera/tokenizer.h"

namespace tessera::cli {

struct ModelFlags {
  std::string model;
  int threads = 0;  // 0: one per physical core
  int gpu_layers = -1;
  std::string device;
};

// -m/--model, -t/--threads, --gpu-layers (--ngl), --device.
void add_model_flags(CLI::App& cmd, ModelFlags& flags);

struct LoadedModel {
  std::unique_ptr<Runtime> runtime;
  std::unique_ptr<Model> model;
  Tokenizer tokenizer;
  double load_ms = 0.0;
};

LoadedModel load_model(const ModelFlags& flags);

// Milliseconds since `start`.
inline double ms_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
      .count();
}

}  // namespace tessera::cli
