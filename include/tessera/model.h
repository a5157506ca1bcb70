// Model: hyperparameters and weights of a Llama-family GGUF model, placed in
// device buffers through the runtime. The forward graph is built per batch
// by the engine (engine.h); model code never names a backend.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "tessera/buffer.h"
#include "tessera/gguf.h"
#include "tessera/graph.h"
#include "tessera/runtime.h"

namespace tessera {

struct LlamaHparams {
  std::string architecture;  // "llama"
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

  int64_t n_embd_kv() const { return head_dim * n_head_kv; }
  int64_t n_embd_q() const { return head_dim * n_head; }
};

// Reads and checks hyperparameters, with llama.cpp's defaults for absent
// keys. Throws Error(kInvalidFile / kUnsupported) naming the key.
LlamaHparams read_llama_hparams(const gguf::File& file);

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
};

struct ModelOptions {
  // Layers whose weights go to the best GPU-type device: -1 = all that fit,
  // 0 = none. The rest, and the embeddings, stay on the CPU.
  int gpu_layers = -1;
  std::string device;  // a device name to use instead of the best GPU ("" = auto)
  // Called with (bytes done, bytes total) while weights are copied.
  std::function<void(uint64_t, uint64_t)> progress;
};

class Model {
 public:
  // Loads `path` through the memory map into device buffers of `runtime`.
  static std::unique_ptr<Model> load(Runtime& runtime, const std::filesystem::path& path,
                                     const ModelOptions& options = {});
  ~Model();

  const LlamaHparams& hparams() const { return hparams_; }
  const gguf::File& file() const { return file_; }  // metadata (tokenizer, template)
  Runtime& runtime() const { return runtime_; }

  Tensor* token_embd() const { return token_embd_; }  // [n_embd, n_vocab]
  Tensor* output_norm() const { return output_norm_; }
  Tensor* output() const { return output_; }  // token_embd when tied
  Tensor* rope_freqs() const { return rope_freqs_; }  // nullable [n_rot / 2]
  const std::vector<LayerWeights>& layers() const { return layers_; }
  Device& embeddings_device() const { return *cpu_; }
  // Devices holding weights, in scheduler priority order (CPU last).
  std::vector<Device*> devices() const;
  uint64_t weight_bytes() const { return weight_bytes_; }

 private:
  Model(Runtime& runtime, gguf::File file);
  void create_tensors();
  void place_weights(const ModelOptions& options);

  Runtime& runtime_;
  gguf::File file_;
  LlamaHparams hparams_;
  Graph weights_;  // arena holding the weight descriptors
  Tensor* token_embd_ = nullptr;
  Tensor* output_norm_ = nullptr;
  Tensor* output_ = nullptr;
  Tensor* rope_freqs_ = nullptr;
  std::vector<LayerWeights> layers_;
  Device* cpu_ = nullptr;
  Device* gpu_ = nullptr;
  std::vector<std::unique_ptr<Buffer>> buffers_;
  uint64_t weight_bytes_ = 0;
};

}  // namespace tessera
