// Scalar references for MXFP4 (the OCP microscaling FP4 format gpt-oss ships
// in): blocks of 32 e2m1 values sharing one E8M0 exponent. The quantizer
// reproduces the bytes of ggml's quantize_row_mxfp4_ref: the exponent from
// the block's largest magnitude, each value the nearest of the 16 codes (the
// first on a tie, codes scanned 0..15).
#include <cmath>
#include <cstring>

#include "tessera/core/quants.h"

namespace tessera {

float e8m0_to_fp32_half(uint8_t e) {
  // 2^(e - 128): a subnormal for e 0 and 1, else exponent field e - 1.
  const uint32_t bits = e < 2 ? uint32_t{0x00200000} << e : static_cast<uint32_t>(e - 1) << 23;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

namespace {

int nearest_code(float x, float d) {
  int best = 0;
  float best_err = std::fabs(static_cast<float>(kvalues_mxfp4[0]) * d - x);
  for (int i = 1; i < 16; ++i) {
    const float err = std::fabs(static_cast<float>(kvalues_mxfp4[i]) * d - x);
    if (err < best_err) {
      best = i;
      best_err = err;
    }
  }
  return best;
}

// floor(log2(amax)) - 2 + 127 as ggml stores it in a byte: the low byte of
// the integer conversion, as x86 gives it (a block of infinities or NaNs
// gets 0, where the conversion yields INT_MIN).
uint8_t exponent_for(float amax) {
  if (!(amax > 0.0f)) return 0;
  const float v = std::floor(std::log2(amax)) - 2.0f + 127.0f;
  if (!std::isfinite(v)) return 0;
  return static_cast<uint8_t>(static_cast<int32_t>(v) & 0xFF);
}

}  // namespace

void quantize_row_mxfp4_ref(const float* x, block_mxfp4* y, int64_t n) {
  for (int64_t b = 0; b < n / kQK; ++b, x += kQK) {
    float amax = 0.0f;
    for (int j = 0; j < kQK; ++j) {
      if (amax < std::fabs(x[j])) amax = std::fabs(x[j]);
    }
    const uint8_t e = exponent_for(amax);
    const float d = e8m0_to_fp32_half(e);
    y[b].e = e;
    for (int j = 0; j < kQK / 2; ++j) {
      y[b].qs[j] = static_cast<uint8_t>(nearest_code(x[j], d) | nearest_code(x[j + kQK / 2], d) << 4);
    }
  }
}

void dequantize_row_mxfp4_ref(const block_mxfp4* x, float* y, int64_t n) {
  for (int64_t b = 0; b < n / kQK; ++b, y += kQK) {
    const float d = e8m0_to_fp32_half(x[b].e);
    for (int j = 0; j < kQK / 2; ++j) {
      y[j] = static_cast<float>(kvalues_mxfp4[x[b].qs[j] & 0xF]) * d;
      y[j + kQK / 2] = static_cast<float>(kvalues_mxfp4[x[b].qs[j] >> 4]) * d;
    }
  }
}

}  // namespace tessera
