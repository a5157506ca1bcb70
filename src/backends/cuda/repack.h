// The CUDA weights layout (docs/cuda.md, "Split Q4_0/Q8_0 weights"): a Q4_0 or Q8_0 tensor's blocks
// are split into two arrays, all quants first (16 or 32 bytes per block, so
// each block's quants start 16-byte aligned and load as one or two uint4),
// then all f16 scales (2 bytes per block), block order unchanged. Like the
// CANN backend's transform, it is a pure byte permutation: get_tensor returns
// exactly the bytes set_tensor received. Host-side code only (no CUDA), so
// the CPU test suite checks it.
#pragma once

#include <cstddef>
#include <cstdint>

#include "tessera/core/dtype.h"

namespace tessera::cuda {

// Types the CUDA weights buffer splits.
bool splits_blocks(DType type);

struct BlockSplit {
  size_t block_bytes = 0;  // GGUF block: 18 (Q4_0) or 34 (Q8_0)
  size_t quant_bytes = 0;  // 16 or 32
  size_t blocks = 0;       // blocks in the tensor
  size_t scales_offset() const { return blocks * quant_bytes; }  // where the scales start
  size_t total_bytes() const { return blocks * block_bytes; }
};

// The split of a tensor of `type` holding `blocks` blocks.
BlockSplit block_split(DType type, size_t blocks);

// GGUF blocks [first, first + n) from `src` into the split layout at `dst`
// (the whole tensor's split storage), and back.
void split_blocks(const BlockSplit& s, const uint8_t* src, size_t first, size_t n, uint8_t* dst);
void join_blocks(const BlockSplit& s, const uint8_t* split, size_t first, size_t n, uint8_t* dst);

// The same, for staging: blocks [first, first + n) as two contiguous pieces,
// quants (n * quant_bytes) and scales (n * 2 bytes), to copy to / from
// scales_offset-relative places on the device.
void split_range(const BlockSplit& s, const uint8_t* src, size_t n, uint8_t* quants,
                 uint8_t* scales);
void join_range(const BlockSplit& s, const uint8_t* quants, const uint8_t* scales, size_t n,
                uint8_t* dst);

}  // namespace tessera::cuda
