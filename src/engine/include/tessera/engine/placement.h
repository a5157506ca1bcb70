// Placement: which device each layer of a model goes to, decided by the
// engine before the weights are loaded. --gpu-layers counts as llama.cpp's
// -ngl does: N <= n_layer puts the last N layers on the GPU, n_layer + 1 (or
// more) the output layer too. Layers go only while they fit the device's free
// memory together with their share of the KV cache and a compute reserve.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "tessera/core/dtype.h"
#include "tessera/engine/pipeline.h"
#include "tessera/models/model.h"
#include "tessera/runtime/runtime.h"

namespace tessera {

struct PlacementOptions {
  int gpu_layers = -1;  // -1: every layer that fits; 0: none
  std::string device;   // a GPU by name ("" = the first GPU)
  // --n-cpu-moe: the experts of layers 0 .. n_cpu_moe - 1 stay in host
  // memory (ModelOptions::n_cpu_moe); --cpu-moe is every layer's.
  int64_t n_cpu_moe = 0;
  // What the context will hold, for the memory estimate.
  int64_t n_ctx = 4096;
  int64_t n_batch = 512;
  DType type_k = DType::kF16;
  DType type_v = DType::kF16;
  // Load only this stage of a model split across processes (pipeline.h);
  // the GPU takes the last layers of the stage's range. Null: the whole model.
  std::shared_ptr<Pipeline> pipeline;
  // Not placement, but what load_model passes on to the loader with it:
  // ModelOptions::weights_cache (a directory of weights images; empty: none).
  std::filesystem::path weights_cache;
  uint64_t weights_cache_min_bytes = uint64_t{64} << 20;
};

struct Placement {
  std::vector<Device*> layer_devices;  // n_layer entries
  Device* output_device = nullptr;
  Device* gpu = nullptr;       // nullptr: none used
  int64_t layers_on_gpu = 0;   // counting the output layer, as gpu_layers does
  int64_t layers_asked = 0;    // what gpu_layers asked for (n_layer + 1 for -1)
  uint64_t gpu_bytes = 0;      // estimated: weights, cache and compute reserve
  // One line for the user: how many layers went where, and why not more.
  std::string message;
};

// Bytes of the compute reserve the estimate keeps free on a GPU.
uint64_t compute_reserve_bytes(const Hparams& hp, int64_t n_batch, bool output_on_gpu);

Placement plan_placement(Runtime& runtime, const gguf::File& file, const Hparams& hp,
                         const PlacementOptions& options);

// Opens `path`, plans the placement and loads the model there.
std::unique_ptr<Model> load_model(Runtime& runtime, const std::filesystem::path& path,
                                  const PlacementOptions& options = {},
                                  std::function<void(uint64_t, uint64_t)> progress = {},
                                  Placement* placement = nullptr);

}  // namespace tessera
