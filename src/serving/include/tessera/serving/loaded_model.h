// Loading a model for serving, as every front end does it (`tessera run`,
// `chat`, `serve`, the Node package): a runtime with its backends, the CPU's
// thread count, the engine's placement of layers on the devices, the weights
// and the file's tokenizer, checked against each other.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>

#include "tessera/engine/pipeline.h"
#include "tessera/engine/placement.h"
#include "tessera/models/model.h"
#include "tessera/runtime/runtime.h"
#include "tessera/text/tokenizer.h"

namespace tessera::serving {

struct LoadOptions {
  std::filesystem::path model;
  int threads = 0;  // CPU threads; 0: the backend's default (one per physical core)
  PlacementOptions placement;  // GPU layers, device, and what the context will hold
  std::string device_flag = "device";  // how errors name placement.device (the CLI: "--device")
  // Bytes of weights loaded so far and in all; called from the loading thread.
  std::function<void(uint64_t done, uint64_t total)> progress;
};

struct LoadedModel {
  std::unique_ptr<Runtime> runtime;
  std::unique_ptr<Model> model;
  Tokenizer tokenizer;
  std::string placement;  // one line on where the layers went when a GPU is there, else ""
  double load_ms = 0.0;
  // The pipeline the model is a stage of (options.placement.pipeline), or null.
  std::shared_ptr<Pipeline> pipeline;
};

// Throws Error: kInvalidArgument for an unknown device (naming the devices
// there are), kUnsupported for a CUDA device in a build or on a machine
// without one, and the model loader's errors (naming the file) for a file
// that is missing, truncated or not a model tessera runs.
LoadedModel load(const LoadOptions& options);

// The CPU backend's thread count, through its extension functions; OpenBLAS
// follows it. cpu_threads is 0 when the backend cannot tell.
void set_cpu_threads(Runtime& runtime, int threads);
int cpu_threads(Runtime& runtime);

// The devices of a runtime by name, comma-separated (for errors).
std::string device_names(Runtime& runtime);

// Where the front ends keep weights images (ModelOptions::weights_cache) unless
// told otherwise: $TESSERA_WEIGHTS_CACHE ("off" or "": none), else
// $XDG_CACHE_HOME/tessera/weights, else ~/.cache/tessera/weights; empty when
// none of these is set.
std::filesystem::path default_weights_cache();
// A flag's or option's value: "off" (or "none", "") is no directory.
std::filesystem::path weights_cache_dir(const std::string& value);
// One line for the user on what the weights image did at load ("" when
// there is nothing to say: none, or one mapped as expected).
std::string weights_image_line(const Model& model);

}  // namespace tessera::serving
