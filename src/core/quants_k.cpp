// Scalar references for the K-quants (256-element super-blocks).
//
// Dequantizers evaluate each value with the same float operations, in the same
// order, as ggml's dequantize_row_*_K, so results match it bit for bit.
//
// Quantizers (no importance matrix) are ggml's algorithms, with its search
// parameters and its float operations in its order, so that the bytes match
// what llama-quantize writes; they live in quants_k_search.cpp.
#include <cmath>
#include <cstring>

#include "tessera/core/half.h"
#include "tessera/core/quants.h"

namespace tessera {
namespace {

// round-to-nearest-even of v, clamped to [lo, hi]; NaN gives lo.
int nearest_clamp(float v, int lo, int hi) {
  if (!(v > static_cast<float>(lo))) return lo;
  if (v >= static_cast<float>(hi)) return hi;
  return static_cast<int>(std::nearbyint(v));
}

// 2-bit field g (0..3) of byte b.
inline int crumb(uint8_t b, int g) {
  return (b >> (2 * g)) & 3;
}

}  // namespace

void dequantize_row_q2_K_ref(const block_q2_K* x, float* y, int64_t n) {
  for (int64_t b = 0; b < n / kQKK; ++b, y += kQKK) {
    const float d = fp16_to_fp32(x[b].d);
    const float dmin = fp16_to_fp32(x[b].dmin);
    for (int e = 0; e < kQKK; ++e) {
      const uint8_t sc = x[b].scales[e / 16];
      const float dl = d * static_cast<float>(sc & 0xF);
      const float ml = dmin * static_cast<float>(sc >> 4);
      const int q = crumb(x[b].qs[32 * (e / 128) + e % 32], (e / 32) % 4);
      y[e] = dl * static_cast<float>(q) - ml;
    }
  }
}

void dequantize_row_q3_K_ref(const block_q3_K* x, float* y, int64_t n) {
  for (int64_t b = 0; b < n / kQKK; ++b, y += kQKK) {
    const float d = fp16_to_fp32(x[b].d);
    int scales[16];
    for (int j = 0; j < 16; ++j) {
      const int low = j < 8 ? x[b].scales[j] & 0xF : x[b].scales[j - 8] >> 4;
      const int high = crumb(x[b].scales[8 + j % 4], j / 4);
      scales[j] = (low | (high << 4)) - 32;
    }
    for (int e = 0; e < kQKK; ++e) {
      const float dl = d * static_cast<float>(scales[e / 16]);
      const int low = crumb(x[b].qs[32 * (e / 128) + e % 32], (e / 32) % 4);
      const bool high = (x[b].hmask[e % 32] >> (e / 32)) & 1;
      y[e] = dl * static_cast<float>(low - (high ? 0 : 4));
    }
  }
}

void dequantize_row_q4_K_ref(const block_q4_K* x, float* y, int64_t n) {
  for (int64_t b = 0; b < n / kQKK; ++b, y += kQKK) {
    const float d = fp16_to_fp32(x[b].d);
    const float dmin = fp16_to_fp32(x[b].dmin);
    for (int j = 0; j < 8; ++j) {  // sub-block j: elements 32 j .. 32 j + 31
      uint8_t sc, m;
      scale_min_k4(j, x[b].scales, &sc, &m);
      const float dl = d * static_cast<float>(sc);
      const float ml = dmin * static_cast<float>(m);
      const uint8_t* q = x[b].qs + 32 * (j / 2);
      const int shift = 4 * (j % 2);
      for (int l = 0; l < 32; ++l) {
        y[32 * j + l] = dl * static_cast<float>((q[l] >> shift) & 0xF) - ml;
      }
    }
  }
}

void dequantize_row_q5_K_ref(const block_q5_K* x, float* y, int64_t n) {
  for (int64_t b = 0; b < n / kQKK; ++b, y += kQKK) {
    const float d = fp16_to_fp32(x[b].d);
    const float dmin = fp16_to_fp32(x[b].dmin);
    for (int j = 0; j < 8; ++j) {
      uint8_t sc, m;
      scale_min_k4(j, x[b].scales, &sc, &m);
      const float dl = d * static_cast<float>(sc);
      const float ml = dmin * static_cast<float>(m);
      const uint8_t* q = x[b].qs + 32 * (j / 2);
      const int shift = 4 * (j % 2);
      for (int l = 0; l < 32; ++l) {
        const int high = (x[b].qh[l] >> j) & 1;
        y[32 * j + l] = dl * static_cast<float>(((q[l] >> shift) & 0xF) + 16 * high) - ml;
      }
    }
  }
}

void dequantize_row_q6_K_ref(const block_q6_K* x, float* y, int64_t n) {
  for (int64_t b = 0; b < n / kQKK; ++b, y += kQKK) {
    const float d = fp16_to_fp32(x[b].d);
    for (int e = 0; e < kQKK; ++e) {
      const int h = e / 128, g = (e / 32) % 4, l = e % 32;
      const int low = (x[b].ql[64 * h + 32 * (g % 2) + l] >> (4 * (g / 2))) & 0xF;
      const int high = crumb(x[b].qh[32 * h + l], g);
      const int q = (low | (high << 4)) - 32;
      y[e] = d * static_cast<float>(x[b].scales[e / 16]) * static_cast<float>(q);
    }
  }
}

void dequantize_row_q8_K_ref(const block_q8_K* x, float* y, int64_t n) {
  for (int64_t b = 0; b < n / kQKK; ++b, y += kQKK) {
    for (int e = 0; e < kQKK; ++e) y[e] = x[b].d * static_cast<float>(x[b].qs[e]);
  }
}

void quantize_row_q8_K_ref(const float* x, block_q8_K* y, int64_t n) {
  for (int64_t b = 0; b < n / kQKK; ++b, x += kQKK) {
    block_q8_K& out = y[b];
    float max = 0.0f, amax = 0.0f;
    for (int e = 0; e < kQKK; ++e) {
      if (std::fabs(x[e]) > amax) {
        amax = std::fabs(x[e]);
        max = x[e];
      }
    }
    if (amax == 0.0f) {
      std::memset(&out, 0, sizeof out);
      continue;
    }
    const float iscale = -127.0f / max;
    for (int e = 0; e < kQKK; ++e) {
      out.qs[e] = static_cast<int8_t>(nearest_clamp(iscale * x[e], -128, 127));
    }
    for (int j = 0; j < 16; ++j) {
      int sum = 0;
      for (int l = 0; l < 16; ++l) sum += out.qs[16 * j + l];
      out.bsums[j] = static_cast<int16_t>(sum);
    }
    out.d = 1.0f / iscale;
  }
}

}  // namespace tessera
