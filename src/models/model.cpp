// Loading a GGUF model: the architecture declares its tensors (checked here
// against the file), then the bytes are copied through the memory map into
// one weights buffer per device.
#include <algorithm>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "layers.h"
#include "tessera/core/error.h"
#include "tessera/models/model.h"

#include "weights_image.h"

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
  model->keep_stage(options);
  model->place_weights(options, path);
  return model;
}

Tensor* TensorLoader::layer(int64_t layer, std::string_view what,
                            std::initializer_list<int64_t> shape, bool required) {
  return take(fmt::format("blk.{}.{}.weight", layer, what), shape, required);
}

Tensor* TensorLoader::layer_bias(int64_t layer, std::string_view what,
                                 std::initializer_list<int64_t> shape, bool required) {
  return take(fmt::format("blk.{}.{}.bias", layer, what), shape, required);
}

namespace {

std::string shape_list(std::span<const int64_t> ne) {
  std::string s = "[";
  for (size_t i = 0; i < ne.size(); ++i) s += fmt::format("{}{}", i ? ", " : "", ne[i]);
  return s + "]";
}

// A weight named `name` with exactly `shape`, described in the weights arena;
// each tensor that does not match is recorded, so that one error lists them
// all.
class FileTensors final : public TensorLoader {
 public:
  FileTensors(const gguf::File& file, Graph& arena) : file_(file), arena_(arena) {}

  Tensor* take(const std::string& name, std::initializer_list<int64_t> shape,
               bool required) override {
    const gguf::TensorInfo* info = file_.find_tensor(name);
    if (info == nullptr) {
      if (required) problems_.push_back(fmt::format("tensor '{}' is missing", name));
      return nullptr;
    }
    std::array<int64_t, kMaxDims> want{1, 1, 1, 1};
    std::copy(shape.begin(), shape.end(), want.begin());
    if (info->ne != want) {
      problems_.push_back(
          fmt::format("tensor '{}': found shape {}, expected {}", name,
                      shape_list(std::span(info->ne.data(), static_cast<size_t>(info->n_dims))),
                      shape_list(std::span(shape.begin(), shape.size()))));
      return nullptr;
    }
    if (!dtype_info(info->type).has_dequantize) {
      problems_.push_back(
          fmt::format("tensor '{}' has type {}, not supported yet", name, dtype_name(info->type)));
      type_problems_ += 1;
      return nullptr;
    }
    return arena_.new_tensor(info->type, shape, name);
  }

  const std::vector<std::string>& problems() const { return problems_; }
  // Unsupported when the file is well formed but holds types not read yet.
  ErrorCategory category() const {
    return type_problems_ == problems_.size() ? ErrorCategory::kUnsupported
                                              : ErrorCategory::kInvalidFile;
  }

 private:
  const gguf::File& file_;
  Graph& arena_;
  std::vector<std::string> problems_;
  size_t type_problems_ = 0;
};

int64_t vocab_size(const gguf::File& file, const Hparams& hp) {
  int64_t n_vocab = hp.n_vocab;
  const gguf::TensorInfo* embd = file.find_tensor("token_embd.weight");
  if (embd != nullptr && n_vocab == 0) n_vocab = embd->ne[1];
  if (n_vocab <= 0 || n_vocab > (int64_t{1} << 24)) {
    fail(ErrorCategory::kInvalidFile, "[model {}] vocabulary size {} is out of range", file.name(),
         n_vocab);
  }
  return n_vocab;
}

}  // namespace

std::vector<std::string> check_tensors(const gguf::File& file) {
  Hparams hp = read_hparams(file);
  hp.n_vocab = vocab_size(file, hp);
  Graph arena;
  Weights w;
  FileTensors loader(file, arena);
  find_architecture(hp.architecture, file.name()).declare_tensors(loader, hp, w);
  return loader.problems();
}

void Model::create_tensors() {
  hparams_.n_vocab = vocab_size(file_, hparams_);
  FileTensors loader(file_, weights_);
  arch_->declare_tensors(loader, hparams_, w_);
  if (const auto& problems = loader.problems(); !problems.empty()) {
    std::string list;
    for (const std::string& p : problems) list += "\n  " + p;
    fail(loader.category(), "[model {}] architecture '{}': {} tensor{} do{} not match:{}",
         file_.name(), hparams_.architecture, problems.size(), problems.size() == 1 ? "" : "s",
         problems.size() == 1 ? "es" : "", list);
  }
  if (w_.output == nullptr) w_.output = w_.token_embd;  // tied embeddings
  range_ = {0, hparams_.n_layer};
}

// A pipeline stage keeps its layers, the token embedding on the first stage
// (and on the last when the head is tied to it), the output norm and head on
// the last; the rest is never read from the map, so it costs no memory.
void Model::keep_stage(const ModelOptions& options) {
  if (!options.stage) return;
  const LayerRange r = *options.stage;
  if (r.begin < 0 || r.end > hparams_.n_layer || r.size() < 1) {
    fail(ErrorCategory::kInvalidArgument, "[model {}] stage layers [{}, {}), the model has {}",
         file_.name(), r.begin, r.end, hparams_.n_layer);
  }
  range_ = r;
  for (int64_t il = 0; il < hparams_.n_layer; ++il) {
    if (!r.contains(il)) w_.layers[static_cast<size_t>(il)] = LayerWeights{};
  }
  const bool tied = w_.output == w_.token_embd;
  if (!holds_output()) w_.output_norm = w_.output = nullptr;
  if (!holds_input() && !(tied && holds_output())) w_.token_embd = nullptr;
}

// q / k / v into wqkv (when none has a bias), gate / up into one ffn_up of
// 2 n_ff rows, gate rows first: the layouts the graph builders already read
// for models that ship them fused (Phi-3). Only matrices of one type with
// rows of the same length; the row bytes are copied one part after another.
void Model::fuse_projections(LayerWeights& l, int64_t il) {
  const auto same = [](std::initializer_list<const Tensor*> ts) {
    const Tensor* first = *ts.begin();
    return std::all_of(ts.begin(), ts.end(), [first](const Tensor* t) {
      return t != nullptr && t->type == first->type && t->ne[0] == first->ne[0] &&
             t->ne[2] == 1 && t->ne[3] == 1;
    });
  };
  const auto fuse = [&](std::initializer_list<Tensor*> ts, std::string_view what) {
    int64_t rows = 0;
    std::vector<const gguf::TensorInfo*> parts;
    for (Tensor* t : ts) {
      rows += t->ne[1];
      parts.push_back(file_.find_tensor(t->name));
    }
    const Tensor* first = *ts.begin();
    Tensor* fused = weights_.new_tensor(first->type, {first->ne[0], rows},
                                        fmt::format("blk.{}.{}.weight", il, what));
    fused_.emplace_back(fused, std::move(parts));
    return fused;
  };
  if (l.wqkv == nullptr && l.bq == nullptr && l.bk == nullptr && l.bv == nullptr &&
      same({l.wq, l.wk, l.wv})) {
    l.wqkv = fuse({l.wq, l.wk, l.wv}, "attn_qkv");
    l.wq = l.wk = l.wv = nullptr;
  }
  if (same({l.ffn_gate, l.ffn_up}) && l.ffn_up_b == nullptr) {  // (a bias is of up's rows alone)
    l.ffn_up = fuse({l.ffn_gate, l.ffn_up}, "ffn_gate_up");
    l.ffn_gate = nullptr;
  }
}

// Loading places the weights in four named steps: assign each weight a
// device, fuse the projections of CPU layers, pack the weights into one
// buffer per buffer type, upload the bytes from the file.
void Model::place_weights(const ModelOptions& options, const std::filesystem::path& path) {
  assign_devices(options);
  if (options.fuse_projections) {
    for (int64_t i = 0; i < hparams_.n_layer; ++i) {
      LayerWeights& l = w_.layers[static_cast<size_t>(i)];
      if (l.device == cpu_) fuse_projections(l, i);
    }
  }
  const std::vector<std::pair<Tensor*, Device*>> plan = weight_plan();
  const std::unique_ptr<WeightsImage> image = pack_weights(plan, options, path);
  // Progress counts the image a start writes after the weights.
  const uint64_t file_bytes = upload_weights(plan, options.progress, image ? image->bytes() : 0);
  if (image != nullptr) {
    std::vector<const Buffer*> host;
    for (const auto& b : buffers_) {
      if (&b->device() == cpu_) host.push_back(b.get());
    }
    std::string why;
    try {
      std::function<void(uint64_t)> written;
      if (options.progress) {
        written = [&](uint64_t done) { options.progress(file_bytes + done, file_bytes + image->bytes()); };
      }
      const bool ok = image->write(host, options.weights_cache_keep_free, &why, written);
      if (written) written(image->bytes());
      if (!ok) {
        image_use_ = {.state = WeightsImageUse::State::kFailed, .path = image->path(), .reason = why};
      }
    } catch (const std::exception& e) {
      image_use_ = {.state = WeightsImageUse::State::kFailed, .path = image->path(), .reason = e.what()};
    }
  }
}

void Model::assign_devices(const ModelOptions& options) {
  cpu_ = &cpu_device(runtime_);
  const int64_t n_layer = hparams_.n_layer;
  if (!options.layer_devices.empty() && static_cast<int64_t>(options.layer_devices.size()) != n_layer) {
    fail(ErrorCategory::kInvalidArgument, "[model {}] placement for {} layers, the model has {}",
         file_.name(), options.layer_devices.size(), n_layer);
  }
  output_device_ = options.output_device != nullptr ? options.output_device : cpu_;
  n_cpu_moe_ = options.n_cpu_moe;
  for (int64_t i = 0; i < n_layer; ++i) {
    if (!range_.contains(i)) continue;  // another stage's layer: no device
    w_.layers[static_cast<size_t>(i)].device =
        options.layer_devices.empty() ? cpu_ : options.layer_devices[static_cast<size_t>(i)];
  }
}

// Which device each weight goes to, once each, in buffer order. RoPE reads
// its frequency factors next to the layer's attention, not across devices:
// each device holding layers gets its own copy.
std::vector<std::pair<Tensor*, Device*>> Model::weight_plan() {
  std::vector<std::pair<Tensor*, Device*>> plan;
  auto add = [&](Tensor* t, Device* d) {
    if (t != nullptr && std::none_of(plan.begin(), plan.end(),
                                     [t](const auto& p) { return p.first == t; })) {
      plan.emplace_back(t, d);
    }
  };
  if (w_.output != nullptr && w_.output == w_.token_embd && output_device_ != cpu_) {
    // A tied head on an accelerator gets its own copy of the embedding
    // there (uploaded from token_embd.weight): GET_ROWS reads the one in
    // host memory, and the logits matmul does not fall back to the CPU (or
    // copy the embedding over) every pass.
    const Tensor& e = *w_.token_embd;
    w_.output = weights_.new_tensor(e.type, {e.ne[0], e.ne[1]}, e.name);
    if (!holds_input()) w_.token_embd = nullptr;  // kept only for the head
  }
  add(w_.token_embd, cpu_);
  for (Tensor* t : {w_.token_types, w_.position_embd, w_.token_embd_norm, w_.token_embd_norm_b}) {
    if (holds_input()) add(t, cpu_);  // beside the embedding they are added to
  }
  // A reranker's head, read back by the serving core (host memory, GGUF bytes).
  for (Tensor* t : {w_.cls, w_.cls_b, w_.cls_out, w_.cls_out_b}) add(t, cpu_);
  add(w_.rope_freqs, cpu_);
  add(w_.output_norm, output_device_);
  add(w_.output, w_.output == w_.token_embd ? cpu_ : output_device_);
  add(w_.rope_long, cpu_);
  add(w_.rope_short, cpu_);
  std::vector<std::pair<Device*, Tensor*>> copies;  // (device, copy), per shared tensor
  auto local = [&](Tensor* shared, Device* d) -> Tensor* {
    if (shared == nullptr || d == cpu_) return shared;
    for (const auto& [dev, copy] : copies) {
      if (dev == d && copy->name == shared->name) return copy;
    }
    Tensor* copy = weights_.new_tensor(shared->type, {shared->ne[0]}, shared->name);
    copies.emplace_back(d, copy);
    plan.emplace_back(copy, d);
    return copy;
  };
  for (size_t il = 0; il < w_.layers.size(); ++il) {
    LayerWeights& l = w_.layers[il];
    if (l.device == nullptr) continue;  // held by another pipeline stage
    const bool experts_on_cpu = static_cast<int64_t>(il) < n_cpu_moe_;
    for (Tensor* t : l.weights()) {
      if (t == nullptr) continue;
      plan.emplace_back(t, experts_on_cpu && t->name.find("_exps") != std::string::npos ? cpu_ : l.device);
    }
    l.rope_freqs = local(w_.rope_freqs, l.device);
    l.rope_long = local(w_.rope_long, l.device);
    l.rope_short = local(w_.rope_short, l.device);
  }
  return plan;
}

// One buffer per buffer type. Those in this process's memory (the CPU's) are
// mapped from a weights image when options name a directory and a valid one
// is there (weights_image.h); else they are allocated, and place_weights
// writes the image once upload_weights has filled them.
std::unique_ptr<WeightsImage> Model::pack_weights(const std::vector<std::pair<Tensor*, Device*>>& plan,
                                                  const ModelOptions& options,
                                                  const std::filesystem::path& path) {
  std::vector<TensorPlacement> placed;
  for (auto& [t, d] : plan) placed.push_back({t, &d->weights_buffer_type(*t)});
  const std::vector<BufferPlan> plans = plan_buffers(placed);
  std::vector<BufferPlan> host;
  std::vector<size_t> host_at;  // their places in plans
  uint64_t host_bytes = 0;
  for (size_t i = 0; i < plans.size(); ++i) {
    if (&plans[i].type->device() != cpu_) continue;
    host.push_back(plans[i]);
    host_at.push_back(i);
    host_bytes += plans[i].size;
  }
  buffers_.clear();
  buffers_.resize(plans.size());
  image_use_ = {};
  std::unique_ptr<WeightsImage> to_write;
  if (!options.weights_cache.empty() && !host.empty() && host_bytes >= options.weights_cache_min_bytes) {
    using State = WeightsImageUse::State;
    auto unplace = [&] {
      for (const BufferPlan& p : host) {
        for (const auto& [t, offset] : p.tensors) t->data = nullptr, t->buffer = nullptr;
      }
    };
    try {
      auto image = std::make_unique<WeightsImage>(options.weights_cache, path, host);
      std::string why;
      std::vector<std::unique_ptr<Buffer>> got = image->map(&why);
      for (size_t k = 0; k < got.size(); ++k) {
        if (rows_match_file(*got[k], host[k])) continue;
        got.clear();
        unplace();
        image->discard();
        why = "its rows differ from the model file's";
      }
      if (!got.empty()) {
        image_use_ = {.state = State::kMapped, .path = image->path(), .bytes = image->bytes()};
        for (size_t k = 0; k < got.size(); ++k) buffers_[host_at[k]] = std::move(got[k]);
      } else {
        // Loaded as without an image, then written (place_weights).
        image_use_ = {.state = State::kWritten, .path = image->path(), .bytes = image->bytes(), .reason = why};
        to_write = std::move(image);
      }
    } catch (const std::exception& e) {
      for (size_t i : host_at) buffers_[i].reset();
      unplace();
      to_write.reset();
      image_use_ = {.state = State::kFailed, .path = options.weights_cache, .reason = e.what()};
    }
  }
  weight_bytes_ = 0;
  for (size_t i = 0; i < plans.size(); ++i) {
    if (buffers_[i] == nullptr) {
      buffers_[i] = plans[i].type->allocate(plans[i].size);
      buffers_[i]->set_usage(BufferUsage::kWeights);
      place_tensors(*buffers_[i], plans[i]);
    }
    weight_bytes_ += buffers_[i]->size();
  }
  return to_write;
}

std::vector<const gguf::TensorInfo*> Model::sources_of(const Tensor* t) const {
  const auto fused =
      std::find_if(fused_.begin(), fused_.end(), [t](const auto& f) { return f.first == t; });
  return fused != fused_.end() ? fused->second : std::vector{file_.find_tensor(t->name)};
}

// Each tensor's first and last rows of each of its GGUF tensors, read back
// from `buffer` (unpacked from the panels), equal the file's.
bool Model::rows_match_file(const Buffer& buffer, const BufferPlan& plan) const {
  // The rows asked of the file at once: from a cold page cache, hundreds of
  // small reads one after the other took longer than the image's.
  for (const auto& [t, at] : plan.tensors) {
    for (const gguf::TensorInfo* info : sources_of(t)) {
      if (info == nullptr) continue;
      const std::span<const uint8_t> bytes = file_.tensor_data(*info);
      const size_t row = std::min<size_t>(t->nb[1], bytes.size());
      file_.will_need(bytes.first(row));
      file_.will_need(bytes.last(row));
    }
  }
  std::vector<uint8_t> got;
  for (const auto& [t, at] : plan.tensors) {
    size_t offset = 0;
    for (const gguf::TensorInfo* info : sources_of(t)) {
      if (info == nullptr) return false;
      const std::span<const uint8_t> bytes = file_.tensor_data(*info);
      const size_t row = std::min<size_t>(t->nb[1], bytes.size());
      got.resize(row);
      for (const size_t from : {size_t{0}, bytes.size() - row}) {
        buffer.get_tensor(*t, got.data(), offset + from, row);
        if (std::memcmp(got.data(), bytes.data() + from, row) != 0) return false;
      }
      file_.release(*info);
      offset += bytes.size();
    }
  }
  return true;
}

// Each weight's GGUF tensors, once: itself, or a fused weight's parts in row
// order. Weights mapped from an image are there already. Progress runs to
// the file's tensor bytes (returned) plus `then` bytes still to come.
uint64_t Model::upload_weights(const std::vector<std::pair<Tensor*, Device*>>& plan,
                               const std::function<void(uint64_t, uint64_t)>& progress,
                               uint64_t then) {
  std::vector<std::vector<const gguf::TensorInfo*>> sources;
  uint64_t done = 0, file_bytes = 0;
  for (auto& [t, dev] : plan) {
    sources.push_back(sources_of(t));
    for (const gguf::TensorInfo* info : sources.back()) file_bytes += info->nbytes;
  }
  const bool mapped = image_use_.state == WeightsImageUse::State::kMapped;
  for (size_t i = 0; i < plan.size(); ++i) {
    Tensor* t = plan[i].first;
    size_t offset = 0;
    for (const gguf::TensorInfo* info : sources[i]) {
      if (mapped && &t->buffer->device() == cpu_) {
        done += info->nbytes;
        continue;
      }
      const std::span<const uint8_t> bytes = file_.tensor_data(*info);
      t->buffer->set_tensor(*t, bytes.data(), offset, bytes.size());
      file_.release(*info);  // the copy is the weight now: the map's pages go (peak RSS)
      offset += bytes.size();
      done += bytes.size();
      if (progress) progress(done, file_bytes + then);
    }
  }
  if (progress && mapped) progress(file_bytes, file_bytes);
  return file_bytes;
}

std::vector<Device*> Model::devices() const {
  std::vector<Device*> out;
  auto add = [&](Device* d) {
    if (d != nullptr && d != cpu_ && std::find(out.begin(), out.end(), d) == out.end()) {
      out.push_back(d);
    }
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

void Model::build_k_shift(Graph& g, std::span<Tensor* const> cache_k, Tensor* shift,
                          Tensor* all_rows, int64_t n_ctx) const {
  layers::k_shift(g, *this, cache_k, shift, all_rows, n_ctx);
}

}  // namespace tessera
