// Scalar references for IQ4_NL (blocks of 32) and IQ4_XS (super-blocks of
// 256): 4-bit indices into kvalues_iq4nl, scaled per block or sub-block.
//
// Dequantizers evaluate each value with the same float operations, in the same
// order, as ggml's dequantize_row_iq4_*, so results match it bit for bit.
#include "core/quants.h"
#include "tessera/half.h"

namespace tessera {

void dequantize_row_iq4_nl_ref(const block_iq4_nl* x, float* y, int64_t n) {
  for (int64_t b = 0; b < n / kQK; ++b, y += kQK) {
    const float d = fp16_to_fp32(x[b].d);
    for (int j = 0; j < kQK / 2; ++j) {
      y[j] = d * static_cast<float>(kvalues_iq4nl[x[b].qs[j] & 0xF]);
      y[j + kQK / 2] = d * static_cast<float>(kvalues_iq4nl[x[b].qs[j] >> 4]);
    }
  }
}

void dequantize_row_iq4_xs_ref(const block_iq4_xs* x, float* y, int64_t n) {
  for (int64_t b = 0; b < n / kQKK; ++b) {
    const float d = fp16_to_fp32(x[b].d);
    for (int j = 0; j < kQKK / 32; ++j, y += 32) {
      const int low = (x[b].scales_l[j / 2] >> (4 * (j % 2))) & 0xF;
      const int high = (x[b].scales_h >> (2 * j)) & 3;
      const float dl = d * static_cast<float>((low | (high << 4)) - 32);
      const uint8_t* qs = x[b].qs + 16 * j;
      for (int l = 0; l < 16; ++l) {
        y[l] = dl * static_cast<float>(kvalues_iq4nl[qs[l] & 0xF]);
        y[l + 16] = dl * static_cast<float>(kvalues_iq4nl[qs[l] >> 4]);
      }
    }
  }
}

}  // namespace tessera
