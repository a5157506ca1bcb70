// Loading a GGUF model: the architecture declares its tensors (checked here
// against the file), then the bytes are copied through the memory map into
// one weights buffer per device.
#include <algorithm>
#include <cstring>

#include "tessera/error.h"
#include "tessera/model.h"

namespace tessera {
namespace {

Device* best_gpu(Runtime& runtime) {
  for (Device* d : runtime.devices()) {
    if (d->type() == DeviceType::kGpu) return d;
  }
  return nullptr;
}

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
    t->flags |= kFlagWeight;
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
  gpu_ = options.device.empty() ? best_gpu(runtime_) : &runtime_.device(options.device);
  if (gpu_ == cpu_) gpu_ = nullptr;
  const int64_t n_layer = hparams_.n_layer;
  int64_t on_gpu = gpu_ == nullptr ? 0 : (options.gpu_layers < 0 ? n_layer : options.gpu_layers);
  on_gpu = std::min(on_gpu, n_layer);

  // Which device each weight goes to: the first `on_gpu` layers on the GPU.
  std::vector<std::pair<Tensor*, Device*>> plan;
  for (Tensor* t : {w_.token_embd, w_.output_norm, w_.output, w_.rope_freqs}) {
    if (t != nullptr && std::none_of(plan.begin(), plan.end(),
                                     [t](const auto& p) { return p.first == t; })) {
      plan.emplace_back(t, cpu_);
    }
  }
  for (int64_t i = 0; i < n_layer; ++i) {
    LayerWeights& l = w_.layers[static_cast<size_t>(i)];
    l.device = i < on_gpu ? gpu_ : cpu_;
    for (Tensor* t : {l.attn_norm, l.wq, l.wk, l.wv, l.wo, l.ffn_norm, l.ffn_gate, l.ffn_up,
                      l.ffn_down}) {
      if (t != nullptr) plan.emplace_back(t, l.device);
    }
  }

  // One buffer per device, each tensor at an aligned offset.
  uint64_t total = 0;
  for (Device* d : {gpu_, cpu_}) {
    if (d == nullptr) continue;
    BufferType& type = d->weights_buffer_type();
    const size_t align = type.alignment();
    size_t size = 0;
    std::vector<std::pair<Tensor*, size_t>> offsets;
    for (auto& [t, dev] : plan) {
      if (dev != d) continue;
      offsets.emplace_back(t, size);
      size += (type.alloc_size(*t) + align - 1) / align * align;
    }
    if (offsets.empty()) continue;
    auto buffer = type.allocate(size);
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
  if (gpu_ != nullptr) out.push_back(gpu_);
  // Accelerators that read host memory (BLAS) help large batches.
  for (Device* d : runtime_.devices()) {
    if (d != gpu_ && d != cpu_ && d->type() == DeviceType::kAccelerator) out.push_back(d);
  }
  out.push_back(cpu_);
  return out;
}

}  // namespace tessera
