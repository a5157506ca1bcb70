// KvCache: one key/value cache per context, shared by every sequence. Each
// cell (a row of every layer's K and V tensors) knows its position and the
// sequences it belongs to, so sequences can share a prefix (seq_cp), drop a
// tail (seq_rm) or shift positions (seq_add) without copying data. The
// engine finds free cells for a batch (find_slot) and builds the attention
// mask from the cells; a model graph only sees the tensors and the indices.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "tessera/core/graph.h"
#include "tessera/engine/batch.h"
#include "tessera/runtime/buffer.h"
#include "tessera/runtime/device.h"

namespace tessera {

struct KvCacheOptions {
  int64_t n_ctx = 0;  // cells
  DType type_k = DType::kF16;
  DType type_v = DType::kF16;
};

class KvCache {
 public:
  // K and V tensors [n_embd_kv, n_ctx + 1] per layer, each on its layer's
  // device (layer_devices[i]; null: none, a layer of another pipeline
  // stage, whose k(i) and v(i) are null), zeroed. The last row takes the writes of
  // padding tokens and is never a cell. Types: F32, F16, BF16, or a
  // quantized type whose block size divides head_dim.
  KvCache(const KvCacheOptions& options, int64_t n_embd_kv, int64_t head_dim,
          std::span<Device* const> layer_devices);
  KvCache(const KvCache&) = delete;
  KvCache& operator=(const KvCache&) = delete;

  int64_t size() const { return n_ctx_; }     // cells
  int64_t rows() const { return n_ctx_ + 1; } // rows of each tensor
  int64_t trash_row() const { return n_ctx_; }
  int64_t used() const { return used_; }
  DType type_k() const { return type_k_; }
  DType type_v() const { return type_v_; }
  std::span<Tensor* const> k() const { return k_; }
  std::span<Tensor* const> v() const { return v_; }
  // One past the highest cell in use (0 when empty).
  int64_t used_end() const;

  // Claims a free cell for each token of batch[begin, end), records its
  // position and sequences, and writes the cell indices to `cells`. Throws
  // Error(kInvalidArgument) naming the sequences and the cells asked when
  // fewer are free; then nothing is claimed.
  void find_slot(const Batch& batch, size_t begin, size_t end, std::span<int64_t> cells);
  // Frees cells claimed by find_slot (a decode that failed).
  void release(std::span<const int64_t> cells);

  // Removes sequence `seq` (-1: every sequence) from cells at positions
  // [p0, p1) (p1 < 0: to the end); a cell with no sequence left is free.
  void seq_rm(int seq, int32_t p0, int32_t p1);
  // Cells of `src` at positions [p0, p1) also belong to `dst` (no copy).
  void seq_cp(int src, int dst, int32_t p0, int32_t p1);
  // Removes every sequence but `seq`.
  void seq_keep(int seq);
  // Adds `delta` to the positions of `seq`'s cells in [p0, p1); cells that
  // fall below 0 are removed. Keys are re-rotated (RoPE) before the next
  // decode: has_shift() and shifts() tell the engine by how much, and it
  // calls clear_shift() once the keys are rotated.
  void seq_add(int seq, int32_t p0, int32_t p1, int32_t delta);
  // Largest position of `seq`, or -1 when it has no cell.
  int32_t seq_pos_max(int seq) const;
  // The cells of `seq`, in order of position.
  std::vector<int64_t> seq_cells(int seq) const;
  void clear();

  bool has_shift() const { return has_shift_; }
  // Per row (rows() entries), the position change since the keys were
  // rotated; 0 for rows that did not move.
  void shifts(std::span<int32_t> shift) const;
  void clear_shift();

  // Which cells a token sees, and what its mask holds for them.
  struct MaskRule {
    bool causal = true;          // false (an encoder): later positions too
    int64_t n_swa = 0;           // > 0: a sliding window of n_swa positions ...
    bool swa_symmetric = false;  // ... behind (llama.cpp's standard), or n_swa / 2 either side (ModernBERT)
    bool alibi = false;          // a seen cell holds -|pos - its pos|, scaled by each head's ALiBi slope
  };
  // Mask rows for batch[begin, end) (padded with rows that see every cell up
  // to n_kv, so padding computes finite values): mask[i * n_kv + j] is 0
  // where token i may attend cell j (a shared sequence, position <= its own
  // unless not causal, and inside the window), else -inf. `n_tokens` >=
  // end - begin rows are written.
  void build_mask(const Batch& batch, size_t begin, size_t end, int64_t n_kv, int64_t n_tokens,
                  float* mask, const MaskRule& rule) const;

 private:
  struct Cell {
    int32_t pos = -1;
    int32_t shift = 0;
    SeqSet seqs = 0;
  };
  void free_cell(Cell& c);

  int64_t n_ctx_;
  DType type_k_, type_v_;
  std::vector<Cell> cells_;
  int64_t used_ = 0;
  bool has_shift_ = false;
  Graph arena_;
  std::vector<Tensor*> k_, v_;
  std::vector<std::unique_ptr<Buffer>> buffers_;
};

}  // namespace tessera
