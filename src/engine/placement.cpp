#include "tessera/engine/placement.h"

#include <algorithm>

#include "tessera/core/error.h"

namespace tessera {
namespace {

// Free memory a placement leaves unused, for what the estimate misses.
constexpr double kFreeMargin = 0.95;

std::string gib(uint64_t bytes) { return fmt::format("{:.2f} GiB", double(bytes) / (1u << 30)); }

Device* cpu_of(Runtime& runtime) {
  for (Device* d : runtime.devices()) {
    if (d->type() == DeviceType::kCpu) return d;
  }
  fail(ErrorCategory::kUnsupported, "[placement] the runtime has no CPU device");
}

// Bytes of the file's tensors whose names start with `prefix` (but for the
// experts, with `no_experts`).
uint64_t tensor_bytes(const gguf::File& file, std::string_view prefix, bool no_experts = false) {
  uint64_t sum = 0;
  for (const gguf::TensorInfo& t : file.tensors()) {
    if (t.name.starts_with(prefix) && !(no_experts && t.name.find("_exps") != std::string_view::npos)) {
      sum += t.nbytes;
    }
  }
  return sum;
}

}  // namespace

uint64_t compute_reserve_bytes(const Hparams& hp, int64_t n_batch, bool output_on_gpu) {
  // Live f32 activations of one layer at a full batch: the residual, the
  // normed input, q/k/v, the attention output, gate/up/SwiGLU; plus logits.
  const auto per_token = static_cast<uint64_t>(4 * hp.n_embd + hp.n_embd_q() + 2 * hp.n_embd_kv() +
                                               3 * hp.n_ff + (output_on_gpu ? hp.n_vocab : 0));
  return per_token * static_cast<uint64_t>(n_batch) * sizeof(float) + (uint64_t{64} << 20);
}

Placement plan_placement(Runtime& runtime, const gguf::File& file, const Hparams& hp,
                         const PlacementOptions& options) {
  Placement p;
  Device* cpu = cpu_of(runtime);
  p.layer_devices.assign(static_cast<size_t>(hp.n_layer), cpu);
  p.output_device = cpu;
  Device* gpu = nullptr;
  if (!options.device.empty()) {
    gpu = &runtime.device(options.device);
    if (gpu->type() == DeviceType::kCpu) gpu = nullptr;
  } else {
    for (Device* d : runtime.devices()) {
      if (d->type() == DeviceType::kGpu) {
        gpu = d;
        break;
      }
    }
  }
  // A pipeline stage places its own layers, and the output layer on the last stage.
  const LayerRange held = options.pipeline ? options.pipeline->range() : LayerRange{0, hp.n_layer};
  const bool holds_output = held.end == hp.n_layer;
  const int64_t n_units = held.size() + (holds_output ? 1 : 0);
  p.layers_asked = options.gpu_layers < 0 ? n_units : std::min<int64_t>(options.gpu_layers, n_units);
  if (gpu == nullptr || p.layers_asked == 0) {
    p.message = gpu == nullptr ? "" : fmt::format("0 layers on {} (--gpu-layers 0)", gpu->name());
    return p;
  }

  // Per layer: its weights and its rows of the KV cache.
  const auto cache_row = [&](DType t) { return *row_bytes(t, hp.n_embd_kv()); };
  const uint64_t cache_per_layer =
      (cache_row(options.type_k) + cache_row(options.type_v)) * static_cast<uint64_t>(options.n_ctx + 1);
  const uint64_t free = static_cast<uint64_t>(double(gpu->memory().free) * kFreeMargin);
  // output.weight and output_norm.weight; a tied head's copy of token_embd.
  uint64_t output_bytes = tensor_bytes(file, "output");
  if (file.find_tensor("output.weight") == nullptr) output_bytes += tensor_bytes(file, "token_embd.");
  // As llama.cpp counts: N <= n_layer puts the last N layers there, N >
  // n_layer the output layer too. Layers are taken from the last one down,
  // the output layer after them.
  const int64_t layers = std::min(p.layers_asked, held.size());
  const bool want_output = holds_output && p.layers_asked > held.size();
  uint64_t used = compute_reserve_bytes(hp, options.n_batch, want_output);
  int64_t placed = 0;
  std::string stopped;
  auto fits = [&](uint64_t bytes) {
    if (used + bytes <= free) return true;
    stopped = fmt::format("; {} more would need {} more than the {} free", p.layers_asked - placed,
                          gib(used + bytes - free), gib(free));
    return false;
  };
  for (int64_t il = held.end - 1; il >= held.end - layers; --il) {
    const uint64_t bytes =
        tensor_bytes(file, fmt::format("blk.{}.", il), il < options.n_cpu_moe) + cache_per_layer;
    if (!fits(bytes)) break;
    used += bytes;
    placed += 1;
    p.layer_devices[static_cast<size_t>(il)] = gpu;
  }
  if (want_output && placed == layers && fits(output_bytes)) {
    used += output_bytes;
    placed += 1;
    p.output_device = gpu;
  }
  p.gpu = placed > 0 ? gpu : nullptr;
  p.layers_on_gpu = placed;
  p.gpu_bytes = placed > 0 ? used : 0;
  const int64_t cpu_moe = std::min(options.n_cpu_moe, hp.n_layer);
  p.message = fmt::format("{} of {} layers on {} ({} of {} free, estimated){}{}", placed, n_units,
                          gpu->name(), gib(p.gpu_bytes), gib(free), stopped,
                          hp.n_expert > 0 && cpu_moe > 0
                              ? fmt::format("; the experts of {} layers in host memory", cpu_moe)
                              : "");
  return p;
}

std::unique_ptr<Model> load_model(Runtime& runtime, const std::filesystem::path& path,
                                  const PlacementOptions& options,
                                  std::function<void(uint64_t, uint64_t)> progress,
                                  Placement* placement) {
  Placement p;
  {
    const gguf::File file = gguf::File::open(path);
    const Hparams hp = read_hparams(file);
    p = plan_placement(runtime, file, hp, options);
  }
  ModelOptions mo;
  mo.layer_devices = p.layer_devices;
  mo.output_device = p.output_device;
  mo.n_cpu_moe = options.n_cpu_moe;
  if (options.pipeline != nullptr) mo.stage = options.pipeline->range();
  mo.progress = std::move(progress);
  mo.weights_cache = options.weights_cache;
  mo.weights_cache_min_bytes = options.weights_cache_min_bytes;
  auto model = Model::load(runtime, path, mo);
  if (placement != nullptr) *placement = std::move(p);
  return model;
}

}  // namespace tessera
