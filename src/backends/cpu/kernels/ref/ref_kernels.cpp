// The ref tier: scalar activation quantizers (the oracle every other tier is
// held to bit for bit) and no matrix kernels, so MUL_MAT runs its scalar path.
#include <cmath>
#include <cstring>

#include "cpu/kernels/kernels.h"

namespace tessera::cpu {
namespace {

// round-half-away-from-zero into [-127, 127]; NaN gives 0 (as quantize_row_q8_0_ref).
int8_t round_q8(float v) {
  const float r = std::round(v);
  if (!(r >= -127.0f)) return r < 0.0f ? int8_t{-127} : int8_t{0};
  return static_cast<int8_t>(r > 127.0f ? 127.0f : r);
}

}  // namespace

void quantize_q8_ref(const float* x, BlockQ8* y, int64_t k) {
  for (int64_t b = 0; b < k / kQK; ++b, x += kQK) {
    float amax = 0.0f;  // fmax skips NaN
    for (int j = 0; j < kQK; ++j) amax = std::fmax(amax, std::fabs(x[j]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    int32_t sum = 0;
    for (int j = 0; j < kQK; ++j) {
      y[b].qs[j] = round_q8(x[j] * id);
      sum += y[b].qs[j];
    }
    y[b].d = d;
    y[b].sum = sum;
    set_q4_bias(y[b]);
  }
}

void quantize_q8_k_ref(const float* x, block_q8_K* y, int64_t k) {
  quantize_row_q8_K_ref(x, y, k);
}

extern const Kernels kRefKernels{
    .isa = Isa::kRef,
    .quantize_q8 = quantize_q8_ref,
    .quantize_q8_k = quantize_q8_k_ref,
};

}  // namespace tessera::cpu
