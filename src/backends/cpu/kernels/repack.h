// The CPU weights buffer: Q4_0, Q8_0, IQ4_NL, MXFP4, Q2_K, Q3_K, Q4_K, Q5_K,
// Q6_K, IQ4_XS and F16 tensors are stored in
// row-interleaved panels (docs/cpu-kernels.md, "Repacked panels") so one vector load feeds 16
// output rows; every other type is stored as it is.
//
// Panel layout, per 2-D matrix (dims 2 and 3 are separate matrices): rows are
// padded to a multiple of 16; panel p holds rows 16p .. 16p + 15 as
//   scales[blocks][sb / 2][16][2]       the block's f16 scale(s), sb bytes a row
//   quants[blocks][qb / g][16][g]       its other qb bytes, in groups of g
// i.e. scale byte s of row r's block sits at 32 (s / 2) + 2 r + s % 2 of that
// block's scales, and byte j of its quants at 16 g (j / g) + g r + j % g of
// that block's quants. The scales are the block's leading f16 (d; Q4_K and
// Q5_K: d, dmin; IQ4_XS: d and the uint16 scales_h, moved as a second f16)
// or, for Q6_K and Q3_K, the trailing d (Q2_K: trailing d, dmin); the quants
// are every other byte in order.
// MXFP4 keeps its one E8M0 byte e instead of an f16: its scales are
// scales[blocks][16], byte e of row r at r of that block's scales.
// Q4_0, IQ4_NL and MXFP4 (qb 16), Q8_0 (qb 32), Q2_K (qb 80), Q3_K (qb 108),
// Q4_K (qb 140), Q5_K (qb 172), Q6_K (qb 208) and IQ4_XS (qb 132) take
// g = 4: for Q4_0, IQ4_NL and MXFP4 a 64-byte group holds elements 4l..4l+3 (low nibbles) and
// 16+4l..16+4l+3 (high nibbles) of 16 rows; for Q8_0 it holds elements
// 4l..4l+3 of 16 rows, still signed. For Q4_K groups 0-2 are the 12 bytes of
// packed 6-bit scales and mins and groups 3 + l the qs bytes 4l..4l+3; Q5_K
// the same but for qh between them: groups 3-10 qh, 11 + l qs 4l..4l+3; for
// Q6_K groups 0-31 are ql, 32-47 qh, 48-51 the int8 sub-block scales (Q6_K,
// Q5_K and Q3_K panels hold their groups in the order their kernels read them:
// panel_groups.h); for
// IQ4_XS group 0 is scales_l, 1 + 4j + t the qs bytes 16j + 4t..16j + 4t + 3
// of sub-block j (elements 32j + 4t.. in the low nibbles, 32j + 16 + 4t.. high);
// for Q3_K groups 0-7 are hmask, 8-23 qs, 24-26 the packed 6-bit scales; for
// Q2_K groups 0-3 are the 4-bit scale / min bytes, 4-19 qs. (A qs group t of
// either holds bytes 4t..4t+3: crumb c of it is elements 128 (t / 8) + 32 c +
// 4 (t % 8) .., and Q3_K's hmask group t % 8 holds their high bits.)
// F16 (a 32-element "block" of 64 bytes, no scales) takes g = 2:
// 32 bytes per k, element k of 16 rows, so a row-block of 16 is one f16
// vector. F16 rows are repacked only when their length is a multiple of 32.
// The repack is a byte permutation but for Q6_K, whose ql / qh bytes are
// re-encoded three at a time (panel_groups.h, Q6KTriple); get_tensor returns
// exactly the bytes set_tensor received, for any range (a partial Q6_K triple
// is decoded, patched and encoded again), and clear(v) reads back as v
// everywhere.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "tessera/core/dtype.h"
#include "tessera/runtime/buffer.h"

namespace tessera::cpu {

inline constexpr int kPanelRows = 16;

struct PanelLayout {
  DType type = DType::kF32;
  int64_t rows = 0;         // ne[1]
  int64_t blocks = 0;       // blocks per row (32 elements; K-quants, IQ4_XS: 256)
  int64_t panels = 0;       // per matrix: ceil(rows / 16)
  int64_t matrices = 0;     // ne[2] * ne[3]
  size_t block_bytes = 0;   // GGUF block: 18 (Q4_0, IQ4_NL), 17 (MXFP4), 34 (Q8_0), 84 (Q2_K),
                            // 110 (Q3_K), 144 (Q4_K), 176 (Q5_K), 210 (Q6_K),
                            // 136 (IQ4_XS); 64 (F16)
  size_t scale_bytes = 0;   // scale bytes per block: 2 (Q2_K, Q4_K, Q5_K, IQ4_XS: 4;
                            // MXFP4: 1, its E8M0 byte), or 0 (F16)
  size_t scale_at = 0;      // where they are in the GGUF block: 0 (Q6_K: 208, Q3_K:
                            // 108, Q2_K: 80)
  size_t quant_bytes = 0;   // the block's other bytes: 16, 32, 80, 108, 140, 172, 208,
                            // 132 or 64
  size_t group_bytes = 0;   // bytes of one row per interleaved group: 4, or 2 (F16)
  size_t panel_bytes = 0;   // 16 * blocks * block_bytes
  size_t matrix_bytes = 0;  // panels * panel_bytes
  size_t row_bytes() const { return static_cast<size_t>(blocks) * block_bytes; }
  size_t total_bytes() const { return matrix_bytes * static_cast<size_t>(matrices); }
};

// Whether the weights buffer repacks t: Q4_0, Q8_0, IQ4_NL, MXFP4, Q2_K, Q3_K, Q4_K,
// Q5_K, Q6_K, IQ4_XS, and F16 with
// rows of a multiple of 32 elements.
bool repacks(const Tensor& t);
// The panel layout of a contiguous tensor the weights buffer repacks.
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
  // Panels already in place (a weights image mapped from a file).
  std::unique_ptr<Buffer> wrap(void* base, size_t bytes, std::shared_ptr<void> keep) override;

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
