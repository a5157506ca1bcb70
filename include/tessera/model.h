// Model: hyperparameters and weights of a GGUF model of a registered
// architecture, placed in device buffers through the runtime, and the
// architecture's graph builder. The engine (engine.h) owns the KV cache and
// the per-batch inputs and asks the model for a graph of a given shape; model
// code never names a backend and never includes the engine.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <span>
#include <string_view>
#include <string>
#include <vector>

#include "tessera/buffer.h"
#include "tessera/gguf.h"
#include "tessera/graph.h"
#include "tessera/ops.h"
#include "tessera/runtime.h"

namespace tessera {

struct Hparams {
  std::string architecture;  // general.architecture, e.g. "llama"
  std::string name;
  int64_t n_vocab = 0;
  int64_t n_ctx_train = 0;
  int64_t n_embd = 0;
  int64_t n_layer = 0;
  int64_t n_head = 0;
  int64_t n_head_kv = 0;
  int64_t n_ff = 0;
  int64_t head_dim = 0;  // n_embd / n_head unless attention.key_length says otherwise
  int64_t n_rot = 0;     // rotated dims per head (rope.dimension_count)
  float rope_freq_base = 10000.0f;
  float rope_freq_scale = 1.0f;  // 1 / linear scaling factor
  float norm_rms_eps = 1e-5f;
  ops::RopeMode rope_mode = ops::RopeMode::kNormal;  // set by the architecture

  int64_t n_embd_kv() const { return head_dim * n_head_kv; }
  int64_t n_embd_q() const { return head_dim * n_head; }
};

// Reads and checks the hyperparameters every architecture shares, with
// llama.cpp's defaults for absent keys, then the architecture's own. Throws
// Error(kInvalidFile / kUnsupported) naming the key, or for an architecture
// that is not registered, one that lists those that are.
Hparams read_hparams(const gguf::File& file);

struct LayerWeights {
  Tensor* attn_norm;    // [n_embd]
  Tensor* wq;           // [n_embd, n_embd_q]
  Tensor* wk;           // [n_embd, n_embd_kv]
  Tensor* wv;           // [n_embd, n_embd_kv]
  Tensor* wo;           // [n_embd_q, n_embd]
  Tensor* ffn_norm;     // [n_embd]
  Tensor* ffn_gate;     // [n_embd, n_ff]
  Tensor* ffn_up;       // [n_embd, n_ff]
  Tensor* ffn_down;     // [n_ff, n_embd]
  Device* device;       // where this layer's weights live
  Tensor* rope_freqs;   // the model's rope_freqs, or its copy on this layer's device (nullable)
};

// Every weight of a model; what an architecture does not use stays null.
struct Weights {
  Tensor* token_embd = nullptr;   // [n_embd, n_vocab]
  Tensor* output_norm = nullptr;  // [n_embd]
  Tensor* output = nullptr;       // [n_embd, n_vocab]; token_embd when tied
  Tensor* rope_freqs = nullptr;   // nullable [n_rot / 2]
  std::vector<LayerWeights> layers;
};

// What a forward graph reads besides the weights. The engine makes these
// tensors (flagged kFlagInput) and sets them before each run; the model's
// graph must depend on nothing else, so that one graph serves every batch of
// its shape.
struct GraphInputs {
  int64_t n_tokens = 0;  // tokens in the graph (the batch, padded to a bucket)
  int64_t n_kv = 0;      // cache rows the attention reads
  int64_t n_out = 0;     // rows of logits
  Tensor* tokens = nullptr;     // i32 [n_tokens]
  Tensor* positions = nullptr;  // i32 [n_tokens]
  Tensor* kv_idx = nullptr;     // i64 [n_tokens]: the cache row each token's K and V go to
  Tensor* mask = nullptr;       // f32 [n_kv, n_tokens]: 0 where a token sees a row, else -inf
  Tensor* out_ids = nullptr;    // i32 [n_out]: the tokens whose logits are computed
  std::span<Tensor* const> cache_k, cache_v;  // per layer [n_embd_kv, cache rows]
};

class Model;

// Declares a model's tensors: each one by name and exact shape, required or
// not. Throws Error naming the tensor when the file's differs.
class TensorLoader {
 public:
  virtual ~TensorLoader() = default;
  virtual Tensor* take(const std::string& name, std::initializer_list<int64_t> shape,
                       bool required = true) = 0;
  // "blk.<layer>.<what>.weight"
  Tensor* layer(int64_t layer, std::string_view what, std::initializer_list<int64_t> shape,
                bool required = true);
};

// One architecture: its keys beyond the shared ones, its tensors and its
// forward graph. Each lives in its own file in src/models/.
struct Architecture {
  std::string_view name;  // general.architecture
  void (*read_hparams)(const gguf::File& file, Hparams& hp);  // nullable
  void (*declare_tensors)(TensorLoader& loader, const Hparams& hp, Weights& w);
  // Logits [n_vocab, in.n_out] of the tokens in.out_ids names.
  Tensor* (*build_graph)(Graph& g, const Model& model, const GraphInputs& in);
};

// The architecture registered as `name`; Error(kUnsupported) listing the
// known ones otherwise.
const Architecture& find_architecture(std::string_view name, std::string_view file = {});
std::vector<std::string_view> architecture_names();

struct ModelOptions {
  // Where each layer's weights go (n_layer entries) and the output layer's
  // (output_norm and output). Empty / null: the CPU. The engine decides
  // (plan_placement in placement.h); the loader only follows.
  std::vector<Device*> layer_devices;
  Device* output_device = nullptr;
  // Called with (bytes done, bytes total) while weights are copied.
  std::function<void(uint64_t, uint64_t)> progress;
};

class Model {
 public:
  // Loads `path` through the memory map into device buffers of `runtime`.
  static std::unique_ptr<Model> load(Runtime& runtime, const std::filesystem::path& path,
                                     const ModelOptions& options = {});
  ~Model();

  const Hparams& hparams() const { return hparams_; }
  const Architecture& architecture() const { return *arch_; }
  const gguf::File& file() const { return file_; }  // metadata (tokenizer, template)
  Runtime& runtime() const { return runtime_; }

  const Weights& weights() const { return w_; }
  Tensor* token_embd() const { return w_.token_embd; }  // [n_embd, n_vocab]
  Tensor* output_norm() const { return w_.output_norm; }
  Tensor* output() const { return w_.output; }  // token_embd when tied
  Tensor* rope_freqs() const { return w_.rope_freqs; }  // nullable [n_rot / 2]
  const std::vector<LayerWeights>& layers() const { return w_.layers; }
  // The architecture's forward graph (see Architecture::build_graph).
  Tensor* build_graph(Graph& g, const GraphInputs& in) const { return arch_->build_graph(g, *this, in); }
  Device& embeddings_device() const { return *cpu_; }
  Device& output_device() const { return *output_device_; }
  // Devices holding weights, then accelerators that read host memory, in
  // scheduler priority order (CPU last).
  std::vector<Device*> devices() const;
  uint64_t weight_bytes() const { return weight_bytes_; }

 private:
  Model(Runtime& runtime, gguf::File file);
  void create_tensors();
  void place_weights(const ModelOptions& options);

  Runtime& runtime_;
  gguf::File file_;
  Hparams hparams_;
  const Architecture* arch_;
  Graph weights_;  // arena holding the weight descriptors
  Weights w_;
  Device* cpu_ = nullptr;
  Device* output_device_ = nullptr;
  std::vector<std::unique_ptr<Buffer>> buffers_;
  uint64_t weight_bytes_ = 0;
};

}  // namespace tessera
