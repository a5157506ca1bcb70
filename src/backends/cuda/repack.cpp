#include "cuda/repack.h"

#include <cstring>

#include "tessera/core/error.h"

namespace tessera::cuda {

bool splits_blocks(DType type) { return type == DType::kQ4_0 || type == DType::kQ8_0; }

BlockSplit block_split(DType type, size_t blocks) {
  TESSERA_CHECK(splits_blocks(type), "no CUDA block split for {}", dtype_name(type));
  const DTypeInfo& info = dtype_info(type);
  return {info.block_bytes, info.block_bytes - 2, blocks};
}

void split_range(const BlockSplit& s, const uint8_t* src, size_t n, uint8_t* quants,
                 uint8_t* scales) {
  for (size_t b = 0; b < n; ++b) {
    const uint8_t* block = src + b * s.block_bytes;
    std::memcpy(scales + 2 * b, block, 2);
    std::memcpy(quants + b * s.quant_bytes, block + 2, s.quant_bytes);
  }
}

void join_range(const BlockSplit& s, const uint8_t* quants, const uint8_t* scales, size_t n,
                uint8_t* dst) {
  for (size_t b = 0; b < n; ++b) {
    uint8_t* block = dst + b * s.block_bytes;
    std::memcpy(block, scales + 2 * b, 2);
    std::memcpy(block + 2, quants + b * s.quant_bytes, s.quant_bytes);
  }
}

void split_blocks(const BlockSplit& s, const uint8_t* src, size_t first, size_t n, uint8_t* dst) {
  TESSERA_CHECK(first + n <= s.blocks);
  split_range(s, src, n, dst + first * s.quant_bytes, dst + s.scales_offset() + 2 * first);
}

void join_blocks(const BlockSplit& s, const uint8_t* split, size_t first, size_t n, uint8_t* dst) {
  TESSERA_CHECK(first + n <= s.blocks);
  join_range(s, split + first * s.quant_bytes, split + s.scales_offset() + 2 * first, n, dst);
}

}  // namespace tessera::cuda
