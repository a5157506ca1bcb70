// The CPU weights buffer: Q4_0 and Q8_0 tensors are stored in row-interleaved
// panels (kernels.md §2.1) so one 64-byte load feeds 16 output rows; every
// other type is stored as it is.
//
// Panel layout, per 2-D matrix (dims 2 and 3 are separate matrices): rows are
// padded to a multiple of 16; panel p holds rows 16p .. 16p + 15 as
//   scales[blocks][16]            f16, row-minor (32 bytes per block)
//   quants[blocks][qb / 4][16][4] qb = 16 (Q4_0) or 32 (Q8_0) bytes per row-block
// i.e. quant byte j of row r's block b sits at 64 * (j / 4) + 4 * r + j % 4 of
// that block's quants. For Q4_0 a 64-byte group then holds elements 4g..4g+3
// (low nibbles) and 16+4g..16+4g+3 (high nibbles) of 16 rows; for Q8_0 it
// holds elements 4g..4g+3 of 16 rows, still signed. The repack is a pure byte
// permutation, so get_tensor returns exactly the bytes set_tensor received,
// for any range, and clear(v) reads back as v everywhere.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "tessera/buffer.h"

namespace tessera::cpu {

inline constexpr int kPanelRows = 16;

struct PanelLayout {
  int64_t rows = 0;         // ne[1]
  int64_t blocks = 0;       // 32-element blocks per row
  int64_t panels = 0;       // per matrix: ceil(rows / 16)
  int64_t matrices = 0;     // ne[2] * ne[3]
  size_t block_bytes = 0;   // GGUF block: 18 (Q4_0) or 34 (Q8_0)
  size_t quant_bytes = 0;   // quant bytes per block: 16 or 32
  size_t panel_bytes = 0;   // 16 * blocks * block_bytes
  size_t matrix_bytes = 0;  // panels * panel_bytes
  size_t row_bytes() const { return static_cast<size_t>(blocks) * block_bytes; }
  size_t total_bytes() const { return matrix_bytes * static_cast<size_t>(matrices); }
};

// Types the weights buffer repacks.
bool repacks(DType type);
// The panel layout of a contiguous Q4_0 / Q8_0 tensor.
PanelLayout panel_layout(const Tensor& t);

// Original (GGUF) bytes [offset, offset + size) of a tensor into / out of its
// panels at `panels`. Any range; whole rows take a fast path.
void pack_bytes(const PanelLayout& layout, uint8_t* panels, const uint8_t* src, size_t offset,
                size_t size);
void unpack_bytes(const PanelLayout& layout, const uint8_t* panels, uint8_t* dst, size_t offset,
                  size_t size);

// The CPU device's weights_buffer_type(). Not host memory: the layout differs.
class CpuWeightsBufferType final : public BufferType {
 public:
  static constexpr size_t kAlignment = 64;

  CpuWeightsBufferType(Device& device, std::string name)
      : device_(device), name_(std::move(name)) {}
  std::string_view name() const override { return name_; }
  Device& device() const override { return device_; }
  size_t alignment() const override { return kAlignment; }
  size_t alloc_size(const Tensor& t) const override;  // padded rows for panels
  bool is_host() const override { return false; }
  std::unique_ptr<Buffer> allocate(size_t bytes) override;

 private:
  Device& device_;
  std::string name_;
};

// The tensor whose bytes `t` reads (follows view sources).
const Tensor& storage_of(const Tensor& t);
// True when t (itself, not a view) is stored in panels.
bool is_repacked(const Tensor& t);
// True when t is a view into a repacked tensor: its data pointer is
// meaningless, and no op may read it.
bool is_view_of_repacked(const Tensor& t);

// Row (i1, i2, i3) of t as ne[0] floats, exactly as dequantize_row gives it,
// whether t is repacked or not (t's rows contiguous in dim 0, a type with a
// dequantizer). What GET_ROWS calls to read embeddings.
void read_row_f32(const Tensor& t, int64_t i1, int64_t i2, int64_t i3, float* out);

}  // namespace tessera::cpu
