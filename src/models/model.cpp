// Loading a GGUF model: the architecture declares its tensors (checked here
// against the file), then the bytes are copied through the memory map into
// one weights buffer per device.
#include <algorithm>
#include <cstring>

#include "tessera/error.h"
#include "tessera/model.h"

namespace tessera {
namespace {

Device& cpu_device(Runtime& runtime) {
  for (Device* d : runtime.devices()) {
    if (d->type() == DeviceType::kCpu) return *d;
  }
  fail(ErrorCategory::kUnsupported, "[model] the runtime has no CPU device");
}

}  // namespace

Model::Model(Runtime& runtime, gguf::File file)
    : runtime_(runtime),
      file_(std::move(file)),
      hparams_(read_hparams(file_)),
      arch_(&find_architecture(hparams_.architecture, file_.name())) {}

Model::~Model() = default;

std::unique_ptr<Model> Model::load(Runtime& runtime, const std::filesystem::path& path,
                                   const ModelOptions& options) {
  std::unique_ptr<Model> model(new Model(runtime, gguf::File::open(path)));
  model->create_tensors();
  model->place_weights(options);
  return model;
}

Tensor* TensorLoader::layer(int64_t layer, std::string_view what,
                            std::initializer_list<int64_t> shape, bool required) {
  return take(fmt::format("blk.{}.{}.weight", layer, what), shape, required);
}

namespace {

// A weight named `name` with exactly `shape`, described in the weights arena.
class FileTensors final : public TensorLoader {
 public:
  FileTensors(const gguf::File& file, Graph& arena) : file_(file), arena_(arena) {}

  Tensor* take(const std::string& name, std::initializer_list<int64_t> shape,
               bool required) override {
    const gguf::TensorInfo* info = file_.find_tensor(name);
    if (info == nullptr) {
      if (!required) return nullptr;
      fail(ErrorCategory::kInvalidFile, "[model {}] tensor '{}' is missing", file_.name(), name);
    }
    std::array<int64_t, kMaxDims> want{1, 1, 1, 1};
    std::copy(shape.begin(), shape.end(), want.begin());
    if (info->ne != want) {
      fail(ErrorCategory::kInvalidFile,
           "[model {}] tensor '{}': found shape [{}, {}, {}, {}], expected [{}, {}, {}, {}]",
           file_.name(), name, info->ne[0], info->ne[1], info->ne[2], info->ne[3], want[0],
           want[1], want[2], want[3]);
    }
    if (!dtype_info(info->type).has_dequantize) {
      fail(ErrorCategory::kUnsupported, "[model {}] tensor '{}' has type {}, not supported yet",
           file_.name(), name, dtype_name(info->type));
    }
    Tensor* t = arena_.new_tensor(info->type, shape, name);
    return t;
  }

 private:
  const gguf::File& file_;
  Graph& arena_;
};

}  // namespace

void Model::create_tensors() {
  const gguf::TensorInfo* embd = file_.find_tensor("token_embd.weight");
  if (embd != nullptr && hparams_.n_vocab == 0) hparams_.n_vocab = embd->ne[1];
  if (hparams_.n_vocab <= 0 || hparams_.n_vocab > (int64_t{1} << 24)) {
    fail(ErrorCategory::kInvalidFile, "[model {}] vocabulary size {} is out of range",
         file_.name(), hparams_.n_vocab);
  }
  FileTensors loader(file_, weights_);
  arch_->declare_tensors(loader, hparams_, w_);
  if (w_.output == nullptr) w_.output = w_.token_embd;  // tied embeddings
}

void Model::place_weights(const ModelOptions& options) {
  cpu_ = &cpu_device(runtime_);
  const int64_t n_layer = hparams_.n_layer;
  if (!options.layer_devices.empty() && static_cast<int64_t>(options.layer_devices.size()) != n_layer) {
    fail(ErrorCategory::kInvalidArgument, "[model {}] placement for {} layers, the model has {}",
         file_.name(), options.layer_devices.size(), n_layer);
  }
  output_device_ = options.output_device != nullptr ? options.output_device : cpu_;

  // Which device each weight goes to.
  std::vector<std::pair<Tensor*, Device*>> plan;
  auto add = [&](Tensor* t, Device* d) {
    if (t != nullptr && std::none_of(plan.begin(), plan.end(),
                                     [t](const auto& p) { return p.first == t; })) {
      plan.emplace_back(t, d);
    }
  };
  add(w_.token_embd, cpu_);
  add(w_.rope_freqs, cpu_);
  add(w_.output_norm, output_device_);
  add(w_.output, w_.output == w_.token_embd ? cpu_ : output_device_);
  std::vector<std::pair<Device*, Tensor*>> rope_copies;  // rope_freqs per other device
  for (int64_t i = 0; i < n_layer; ++i) {
    LayerWeights& l = w_.layers[static_cast<size_t>(i)];
    l.device = options.layer_devices.empty() ? cpu_ : options.layer_devices[static_cast<size_t>(i)];
    for (Tensor* t : {l.attn_norm, l.wq, l.wk, l.wv, l.wo, l.ffn_norm, l.ffn_gate, l.ffn_up,
                      l.ffn_down}) {
      if (t != nullptr) plan.emplace_back(t, l.device);
    }
    // RoPE reads rope_freqs next to the layer's attention, not across devices.
    l.rope_freqs = w_.rope_freqs;
    if (w_.rope_freqs != nullptr && l.device != cpu_) {
      auto it = std::find_if(rope_copies.begin(), rope_copies.end(),
                             [&](const auto& c) { return c.first == l.device; });
      if (it == rope_copies.end()) {
        Tensor* copy = weights_.new_tensor(w_.rope_freqs->type, {w_.rope_freqs->ne[0]},
                                           w_.rope_freqs->name);
        rope_copies.emplace_back(l.device, copy);
        plan.emplace_back(copy, l.device);
        it = rope_copies.end() - 1;
      }
      l.rope_freqs = it->second;
    }
  }

  // One buffer per (device, buffer type), each tensor at an aligned offset.
  std::vector<BufferType*> types;
  for (auto& [t, d] : plan) {
    BufferType* type = &d->weights_buffer_type(*t);
    if (std::find(types.begin(), types.end(), type) == types.end()) types.push_back(type);
  }
  uint64_t total = 0;
  for (BufferType* type : types) {
    const size_t align = type->alignment();
    size_t size = 0;
    std::vector<std::pair<Tensor*, size_t>> offsets;
    for (auto& [t, dev] : plan) {
      if (&dev->weights_buffer_type(*t) != type) continue;
      offsets.emplace_back(t, size);
      size += (type->alloc_size(*t) + align - 1) / align * align;
    }
    auto buffer = type->allocate(size);
    buffer->set_usage(BufferUsage::kWeights);
    for (auto& [t, offset] : offsets) buffer->place(*t, offset);
    buffers_.push_back(std::move(buffer));
    total += size;
  }

  uint64_t done = 0, file_bytes = 0;
  for (auto& [t, dev] : plan) file_bytes += file_.find_tensor(t->name)->nbytes;
  for (auto& [t, dev] : plan) {
    const gguf::TensorInfo* info = file_.find_tensor(t->name);
    const std::span<const uint8_t> bytes = file_.tensor_data(*info);
    t->buffer->set_tensor(*t, bytes.data(), 0, bytes.size());
    done += bytes.size();
    if (options.progress) options.progress(done, file_bytes);
  }
  weight_bytes_ = total;
}

std::vector<Device*> Model::devices() const {
  std::vector<Device*> out;
  auto add = [&](Device* d) {
    if (d != cpu_ && std::find(out.begin(), out.end(), d) == out.end()) out.push_back(d);
  };
  for (const LayerWeights& l : w_.layers) add(l.device);
  add(output_device_);
  // Accelerators that read host memory (BLAS) help large batches.
  for (Device* d : runtime_.devices()) {
    if (d->type() == DeviceType::kAccelerator) add(d);
  }
  out.push_back(cpu_);
  return out;
}

}  // namespace tessera
