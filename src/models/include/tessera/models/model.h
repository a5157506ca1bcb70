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
#include <optional>
#include <span>
#include <string_view>
#include <string>
#include <vector>

#include "tessera/core/graph.h"
#include "tessera/core/ops.h"
#include "tessera/gguf/gguf.h"
#include "tessera/runtime/buffer.h"
#include "tessera/runtime/runtime.h"

namespace tessera {

// Layers [begin, end) of a model: the ones a process holds when the model is
// split across processes by layers (the engine's pipeline.h).
struct LayerRange {
  int64_t begin = 0;
  int64_t end = 0;
  int64_t size() const { return end - begin; }
  bool contains(int64_t il) const { return il >= begin && il < end; }
  bool operator==(const LayerRange&) const = default;
};

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
  float rope_freq_scale = 1.0f;  // 1 / scaling factor (rope.scaling.factor)
  float norm_rms_eps = 1e-5f;
  ops::RopeMode rope_mode = ops::RopeMode::kNormal;  // set by the architecture

  // RoPE scaling beyond the linear factor, as llama.cpp's context derives it
  // from rope.scaling.*: YaRN ("yarn") sets ext_factor 1; attn_factor scales
  // cos and sin (rope.scaling.attn_factor, LongRoPE's); n_ctx_orig is
  // rope.scaling.original_context_length, else the training context.
  int64_t n_ctx_orig = 0;
  float rope_ext_factor = 0.0f;
  float rope_attn_factor = 1.0f;
  float rope_beta_fast = 32.0f;
  float rope_beta_slow = 1.0f;

  // Sliding-window attention (set by the architecture): on a layer with
  // swa_layers[il] set, a query at position p sees a key at p_k only when
  // p - p_k < n_swa; such layers rotate with their own base and scale.
  int64_t n_swa = 0;  // 0: every layer attends to the whole context
  bool swa_symmetric = false;  // ModernBERT: the window n_swa / 2 either side of the query
  std::vector<uint8_t> swa_layers;
  float rope_freq_base_swa = 10000.0f;
  float rope_freq_scale_swa = 1.0f;

  // Mixture of experts (expert_count > 0): each token's FFN is the weighted
  // sum of n_expert_used of n_expert expert FFNs of n_ff_exp rows, picked by
  // the router (ffn_gate_inp) through `expert_gating`; with
  // expert_weights_norm the picked weights are divided by their sum, then
  // multiplied by expert_weights_scale. n_ff_shexp: the shared expert's rows.
  int64_t n_expert = 0;
  int64_t n_expert_used = 0;
  int64_t n_ff_exp = 0;
  int64_t n_ff_shexp = 0;
  enum class ExpertGating : uint8_t {
    kSoftmax,        // softmax over every expert's logit, then the top ones
    kSigmoid,        // sigmoid of each logit
    kSoftmaxWeight,  // the top logits, then softmax over them (gpt-oss)
  };
  ExpertGating expert_gating = ExpertGating::kSoftmax;
  // The experts' gated activation: SwiGLU, or gpt-oss's clamped form
  // (SWIGLU_OAI, alpha 1.702, limit 7).
  enum class ExpertActivation : uint8_t { kSwiglu, kSwigluOai };
  ExpertActivation expert_activation = ExpertActivation::kSwiglu;
  bool expert_weights_norm = false;
  float expert_weights_scale = 1.0f;
  // Encoders (bert): LayerNorm's epsilon (attention.layer_norm_epsilon),
  // attention over the whole sequence (attention.causal false), and the
  // token type embeddings' rows (tokenizer.ggml.token_type_count).
  float norm_eps = 1e-12f;
  bool causal = true;
  int64_t n_token_types = 0;
  // Rerankers: the classifier head's outputs ({arch}.classifier.output_labels'
  // count; 1 when absent).
  int64_t n_cls_out = 1;
  // jina-bert-v2: ALiBi instead of positions (attention scores plus head
  // h's slope times -|i - j|; slopes from this bias, 8 as llama.cpp sets it),
  // and whether the file's ffn_up has 2 n_ff rows, the GEGLU's gate first.
  float max_alibi_bias = 0.0f;
  bool ffn_up_gated = false;
  bool ffn_silu = false;  // modern-bert: hidden_activation silu (SwiGLU, not GEGLU)
  float attn_scale = 0.0f;           // scale of q.k; 0: 1 / sqrt(head_dim)
  float final_logit_softcap = 0.0f;  // > 0: logits = c * tanh(logits / c)

  int64_t n_embd_kv() const { return head_dim * n_head_kv; }
  int64_t n_embd_q() const { return head_dim * n_head; }
  bool is_swa(int64_t il) const {
    return n_swa > 0 && il >= 0 && static_cast<size_t>(il) < swa_layers.size() &&
           swa_layers[static_cast<size_t>(il)] != 0;
  }
  bool has_swa() const {
    for (int64_t il = 0; il < n_layer; ++il) {
      if (is_swa(il)) return true;
    }
    return false;
  }
  float kq_scale() const;  // attn_scale, or 1 / sqrt(head_dim)
};

// Reads and checks the hyperparameters every architecture shares, with
// llama.cpp's defaults for absent keys, then the architecture's own. Throws
// Error(kInvalidFile / kUnsupported) naming the key, or for an architecture
// that is not registered, one that lists those that are.
Hparams read_hparams(const gguf::File& file);

// One block's weights; what an architecture does not use stays null. Shapes
// in ggml order (ne0 = input dimension).
struct LayerWeights {
  Tensor* attn_norm = nullptr;       // [n_embd]
  Tensor* wq = nullptr;              // [n_embd, n_embd_q]
  Tensor* wk = nullptr;              // [n_embd, n_embd_kv]
  Tensor* wv = nullptr;              // [n_embd, n_embd_kv]
  Tensor* wqkv = nullptr;            // [n_embd, n_embd_q + 2 n_embd_kv]: q, k, v rows fused
  Tensor* bq = nullptr;              // [n_embd_q]
  Tensor* bk = nullptr;              // [n_embd_kv]
  Tensor* bv = nullptr;              // [n_embd_kv]
  Tensor* attn_q_norm = nullptr;     // [head_dim]: per-head RMS norm of q, before RoPE
                                     // ([n_embd_q]: over the whole projection, OLMoE)
  Tensor* attn_k_norm = nullptr;     // [head_dim] ([n_embd_kv])
  Tensor* wo = nullptr;              // [n_embd_q, n_embd]
  Tensor* bo = nullptr;              // [n_embd]
  Tensor* attn_sinks = nullptr;      // [n_head]: a sink logit per head (gpt-oss)
  Tensor* attn_post_norm = nullptr;  // [n_embd]: on the attention output, before the residual
  Tensor* ffn_norm = nullptr;        // [n_embd]
  Tensor* ffn_gate = nullptr;        // [n_embd, n_ff]
  Tensor* ffn_up = nullptr;          // [n_embd, n_ff], or [n_embd, 2 n_ff]: gate rows, then up
  Tensor* ffn_down = nullptr;        // [n_ff, n_embd]
  Tensor* ffn_post_norm = nullptr;   // [n_embd]: on the FFN output, before the residual
  // Post-norm encoders (bert): biases of the FFN, and LayerNorms (weight and
  // bias) after each residual add.
  Tensor* ffn_up_b = nullptr;          // [n_ff]
  Tensor* ffn_down_b = nullptr;        // [n_embd]
  Tensor* attn_out_norm = nullptr;     // [n_embd]: after attention's residual
  Tensor* attn_out_norm_b = nullptr;   // [n_embd]
  Tensor* layer_out_norm = nullptr;    // [n_embd]: after the FFN's residual
  Tensor* layer_out_norm_b = nullptr;  // [n_embd]
  // jina-bert-v2 (each optional): LayerNorm biases of attn_q_norm /
  // attn_k_norm (over the whole projection), and a second LayerNorm after
  // the attention's, of its output plus the block's input again.
  Tensor* attn_q_norm_b = nullptr;     // [n_embd_q]
  Tensor* attn_k_norm_b = nullptr;     // [n_embd_kv]
  Tensor* attn_norm_2 = nullptr;       // [n_embd]
  Tensor* attn_norm_2_b = nullptr;     // [n_embd]
  // Mixture of experts (Hparams::n_expert > 0): the router and the experts,
  // one matrix per expert along dim 2; the shared expert beside them.
  Tensor* ffn_gate_inp = nullptr;      // [n_embd, n_expert]: the router's logits
  Tensor* ffn_gate_exps = nullptr;     // [n_embd, n_ff_exp, n_expert]
  Tensor* ffn_up_exps = nullptr;       // [n_embd, n_ff_exp, n_expert]
  Tensor* ffn_down_exps = nullptr;     // [n_ff_exp, n_embd, n_expert]
  Tensor* ffn_gate_inp_b = nullptr;    // [n_expert]: the router's bias (gpt-oss)
  Tensor* ffn_gate_exps_b = nullptr;   // [n_ff_exp, n_expert]: each expert's biases (gpt-oss)
  Tensor* ffn_up_exps_b = nullptr;     // [n_ff_exp, n_expert]
  Tensor* ffn_down_exps_b = nullptr;   // [n_embd, n_expert]
  Tensor* ffn_gate_inp_shexp = nullptr;  // [n_embd]: the shared expert's sigmoid gate
  Tensor* ffn_gate_shexp = nullptr;    // [n_embd, n_ff_shexp]
  Tensor* ffn_up_shexp = nullptr;      // [n_embd, n_ff_shexp]
  Tensor* ffn_down_shexp = nullptr;    // [n_ff_shexp, n_embd]
  // Every weight above (null where the block has none): what placement loads.
  std::vector<Tensor*> weights() const {
    return {attn_norm,      wq,           wk,           wv,
            wqkv,           bq,           bk,           bv,
            attn_q_norm,    attn_k_norm,  wo,           bo,
            attn_sinks,     attn_post_norm,
            ffn_norm,       ffn_gate,     ffn_up,       ffn_down,
            ffn_post_norm,  ffn_gate_inp, ffn_gate_exps, ffn_up_exps,
            ffn_down_exps,  ffn_gate_inp_shexp, ffn_gate_shexp, ffn_up_shexp,
            ffn_down_shexp, ffn_gate_inp_b, ffn_gate_exps_b, ffn_up_exps_b,
            ffn_down_exps_b, ffn_up_b,    ffn_down_b,   attn_out_norm,
            attn_out_norm_b, layer_out_norm, layer_out_norm_b, attn_q_norm_b,
            attn_k_norm_b,  attn_norm_2,  attn_norm_2_b};
  }
  Device* device = nullptr;          // where this layer's weights live
  // The model's RoPE frequency factors, or their copies on this layer's
  // device (nullable): rope_freqs (Llama 3), LongRoPE's long and short.
  Tensor* rope_freqs = nullptr;
  Tensor* rope_long = nullptr;
  Tensor* rope_short = nullptr;
};

// Every weight of a model; what an architecture does not use stays null.
struct Weights {
  Tensor* token_embd = nullptr;   // [n_embd, n_vocab]
  Tensor* output_norm = nullptr;  // [n_embd]
  Tensor* output = nullptr;       // [n_embd, n_vocab]; token_embd when tied
  Tensor* rope_freqs = nullptr;   // nullable [n_rot / 2]
  Tensor* rope_long = nullptr;    // nullable [n_rot / 2]: LongRoPE past n_ctx_orig
  Tensor* rope_short = nullptr;   // nullable [n_rot / 2]: LongRoPE within n_ctx_orig
  // Encoders (bert): token type and absolute position embeddings, and the
  // LayerNorm of their sum with the token embeddings.
  Tensor* token_types = nullptr;        // [n_embd, n_token_types]
  Tensor* position_embd = nullptr;      // [n_embd, n_ctx_train]
  Tensor* token_embd_norm = nullptr;    // [n_embd]
  Tensor* token_embd_norm_b = nullptr;  // [n_embd]
  // A reranker's classifier head on the [CLS] state (rank pooling):
  // tanh(cls x + cls_b), then cls_out (.) + cls_out_b; each nullable.
  Tensor* cls = nullptr;        // [n_embd, n_embd]
  Tensor* cls_b = nullptr;      // [n_embd]
  Tensor* cls_out = nullptr;    // [n_embd, n_cls_out]
  Tensor* cls_out_b = nullptr;  // [n_cls_out]
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
  int64_t n_ctx = 0;     // the context's cells (LongRoPE picks its factors by it)
  Tensor* tokens = nullptr;     // i32 [n_tokens]
  Tensor* positions = nullptr;  // i32 [n_tokens]
  Tensor* kv_idx = nullptr;     // i64 [n_tokens]: the cache row each token's K and V go to
  Tensor* mask = nullptr;       // f32 [n_kv, n_tokens]: 0 where a token sees a row, else -inf
  // As mask, for sliding-window layers (also hiding keys n_swa or more
  // positions back); null when the model has none.
  Tensor* mask_swa = nullptr;
  Tensor* out_ids = nullptr;    // i32 [n_out]: the tokens whose logits are computed
  // The output is the normed hidden state [n_embd, n_out], not logits.
  bool embeddings = false;
  std::span<Tensor* const> cache_k, cache_v;  // per layer [n_embd_kv, cache rows]
  // On a pipeline stage after the first (Model::holds_input() false): the
  // previous stage's hidden state, f32 [n_embd, n_tokens], instead of tokens.
  Tensor* hidden = nullptr;
};

class Model;

// Declares a model's tensors: each one by name and exact shape, required or
// not. A required tensor that is missing, or any whose shape or type differs
// from the file's, is recorded (take returns null) and the loader then
// throws one Error listing every such tensor.
class TensorLoader {
 public:
  virtual ~TensorLoader() = default;
  virtual Tensor* take(const std::string& name, std::initializer_list<int64_t> shape,
                       bool required = true) = 0;
  // "blk.<layer>.<what>.weight"
  Tensor* layer(int64_t layer, std::string_view what, std::initializer_list<int64_t> shape,
                bool required = true);
  // "blk.<layer>.<what>.bias"
  Tensor* layer_bias(int64_t layer, std::string_view what, std::initializer_list<int64_t> shape,
                     bool required = true);
};

// One architecture: its keys beyond the shared ones, its tensors and its
// forward graph. Each lives in its own file in src/models/.
struct Architecture {
  std::string_view name;  // general.architecture
  void (*read_hparams)(const gguf::File& file, Hparams& hp);  // nullable
  void (*declare_tensors)(TensorLoader& loader, const Hparams& hp, Weights& w);
  // Logits [n_vocab, in.n_out] of the tokens in.out_ids names. On a pipeline
  // stage, only the model's layer_range(), from layers::input() to
  // layers::output(): the hidden state [n_embd, n_tokens] before the last stage.
  Tensor* (*build_graph)(Graph& g, const Model& model, const GraphInputs& in);
};

// The architecture registered as `name`; Error(kUnsupported) listing the
// known ones otherwise.
const Architecture& find_architecture(std::string_view name, std::string_view file = {});
std::vector<std::string_view> architecture_names();

// What `file` lacks for its architecture, one line per tensor: "tensor 'x'
// is missing", "tensor 'x': found shape [...], expected [...]", or a type
// that cannot be read. Empty when the weights would load. Throws as
// read_hparams does when the keys are wrong.
std::vector<std::string> check_tensors(const gguf::File& file);

struct ModelOptions {
  // Where each layer's weights go (n_layer entries) and the output layer's
  // (output_norm and output). Empty / null: the CPU. The engine decides
  // (plan_placement in placement.h); the loader only follows.
  std::vector<Device*> layer_devices;
  Device* output_device = nullptr;
  // The experts (ffn_*_exps weights and biases) of layers 0 .. n_cpu_moe - 1
  // stay on the CPU wherever their layer is (llama.cpp's --n-cpu-moe): the
  // scheduler then runs those expert matmuls there.
  int64_t n_cpu_moe = 0;
  // Called with (bytes done, bytes total) while weights are copied (and a
  // weights image written: its bytes count in the total).
  std::function<void(uint64_t, uint64_t)> progress;
  // Layers on the CPU get q / k / v (no biases) and gate / up each as one
  // matrix of the same type, rows one after the other: one matmul instead
  // of three and two, the same results row for row.
  bool fuse_projections = true;
  // A stage of a model split across processes: only these layers are loaded
  // (and the token embedding on the first stage, the output norm and head on
  // the last). Empty: the whole model.
  std::optional<LayerRange> stage;
  // A directory of weights images (docs/loading.md): the weights the CPU
  // holds, in its kernels' layout, written there on a first load and mapped
  // from there on later loads of the same file with the same placement.
  // Empty: none. Models whose CPU weights come to less than
  // weights_cache_min_bytes get no image; writing one keeps
  // weights_cache_keep_free bytes free on its disk.
  std::filesystem::path weights_cache;
  uint64_t weights_cache_min_bytes = uint64_t{64} << 20;
  uint64_t weights_cache_keep_free = uint64_t{2} << 30;
};

// What the weights image did at load (ModelOptions::weights_cache).
struct WeightsImageUse {
  enum class State {
    kNone,     // no directory, or the weights below the minimum
    kMapped,   // the weights were mapped from `path`
    kWritten,  // the weights were loaded and written to `path`
    kFailed,   // no image used or written: `reason`
  };
  State state = State::kNone;
  std::filesystem::path path;
  uint64_t bytes = 0;
  std::string reason;  // kFailed: why; kWritten: why an image there was not used, if one was
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
  // token_embd when tied (a copy of it when the head is on an accelerator).
  Tensor* output() const { return w_.output; }
  Tensor* rope_freqs() const { return w_.rope_freqs; }  // nullable [n_rot / 2]
  // n_layer entries; on a pipeline stage those outside layer_range() are empty.
  const std::vector<LayerWeights>& layers() const { return w_.layers; }
  // The layers this process holds: all of them unless the model is a stage.
  const LayerRange& layer_range() const { return range_; }
  bool holds_input() const { return range_.begin == 0; }                // token embedding
  bool holds_output() const { return range_.end == hparams_.n_layer; }  // output norm and head
  // A stage of a model split across processes: some layers are elsewhere.
  bool is_stage() const { return range_.size() != hparams_.n_layer; }
  // An encoder (bert): attention in both directions and no output head; it
  // gives embeddings, not next-token logits.
  bool is_encoder() const { return !hparams_.causal; }
  // The architecture's forward graph (see Architecture::build_graph).
  Tensor* build_graph(Graph& g, const GraphInputs& in) const { return arch_->build_graph(g, *this, in); }
  // Re-rotates every row of the cached keys by `shift` (i32 [rows]: the
  // change of each row's position), for sequences whose positions moved.
  // all_rows (i32 [rows], 0..rows-1) gathers quantized keys into f32 first;
  // n_ctx is the context's cells (LongRoPE's choice of factors). Expands the
  // writes back into the cache onto `g`.
  void build_k_shift(Graph& g, std::span<Tensor* const> cache_k, Tensor* shift, Tensor* all_rows,
                     int64_t n_ctx) const;
  Device& embeddings_device() const { return *cpu_; }
  Device& output_device() const { return *output_device_; }
  // Devices holding weights, then accelerators that read host memory, in
  // scheduler priority order (CPU last).
  std::vector<Device*> devices() const;
  uint64_t weight_bytes() const { return weight_bytes_; }
  const WeightsImageUse& weights_image() const { return image_use_; }

 private:
  Model(Runtime& runtime, gguf::File file);
  void create_tensors();
  void place_weights(const ModelOptions& options, const std::filesystem::path& path);
  void assign_devices(const ModelOptions& options);
  void keep_stage(const ModelOptions& options);
  void fuse_projections(LayerWeights& l, int64_t il);
  std::vector<std::pair<Tensor*, Device*>> weight_plan();
  // The weights image to write once the weights are uploaded, if any.
  std::unique_ptr<class WeightsImage> pack_weights(const std::vector<std::pair<Tensor*, Device*>>& plan,
                                                   const ModelOptions& options,
                                                   const std::filesystem::path& path);
  uint64_t upload_weights(const std::vector<std::pair<Tensor*, Device*>>& plan,
                          const std::function<void(uint64_t, uint64_t)>& progress, uint64_t then);
  std::vector<const gguf::TensorInfo*> sources_of(const Tensor* t) const;
  bool rows_match_file(const Buffer& buffer, const BufferPlan& plan) const;

  Runtime& runtime_;
  gguf::File file_;
  Hparams hparams_;
  const Architecture* arch_;
  Graph weights_;  // arena holding the weight descriptors
  Weights w_;
  Device* cpu_ = nullptr;
  Device* output_device_ = nullptr;
  int64_t n_cpu_moe_ = 0;  // ModelOptions::n_cpu_moe
  std::vector<std::unique_ptr<Buffer>> buffers_;
  uint64_t weight_bytes_ = 0;
  WeightsImageUse image_use_;
  LayerRange range_;
  // The GGUF tensors whose bytes each fused weight holds, rows in order.
  std::vector<std::pair<const Tensor*, std::vector<const gguf::TensorInfo*>>> fused_;
};

}  // namespace tessera
