#include "tessera/core/half.h"

namespace tessera {

void fp16_to_fp32_row(const uint16_t* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = fp16_to_fp32(src[i]);
}

void fp32_to_fp16_row(const float* src, uint16_t* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = fp32_to_fp16(src[i]);
}

void bf16_to_fp32_row(const uint16_t* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_fp32(src[i]);
}

void fp32_to_bf16_row(const float* src, uint16_t* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = fp32_to_bf16(src[i]);
}

}  // namespace tessera
