// Scalar references for IQ4_NL (blocks of 32) and IQ4_XS (super-blocks of
// 256): 4-bit indices into kvalues_iq4nl, scaled per block or sub-block.
//
// Dequantizers evaluate each value with the same float operations, in the same
// order, as ggml's dequantize_row_iq4_*, so results match it bit for bit.
//
// Quantizers reproduce the bytes of ggml's quantize_iq4_nl / quantize_iq4_xs,
// the functions llama-quantize calls, with their 15-step scale search (ntry 7),
// with or without an importance matrix. ggml's quantize_row_iq4_nl_ref skips
// that search and gives other bytes; tessera follows the file writer.
#include "quants_search.h"

#include <array>
#include <cmath>
#include <cstring>

#include "tessera/core/half.h"
#include "tessera/core/quants.h"

namespace tessera {
namespace {

using quant_search::clamp_int;
using quant_search::kGroupMaxEps;
using quant_search::nearest_int;

constexpr int kSearchSteps = 7;  // inverse scales (values[0] + t) / max, t in -7..7

// The table as floats (ascending).
constexpr std::array<float, 16> kLevels = [] {
  std::array<float, 16> a{};
  for (int i = 0; i < 16; ++i) a[static_cast<size_t>(i)] = kvalues_iq4nl[i];
  return a;
}();

// Index of the table value nearest v; ties between neighbours go up. Without
// branches (a binary search mispredicted about every other step: 87% of an
// IQ4_XS quantization's time): lo counts the entries above the first that
// are <= v, the largest entry <= v when v is inside the table, and 0 or 15
// outside it, where the distance test below keeps 0 and 15 is returned.
int nearest_level(float v) {
  int lo = 0;
  for (size_t i = 1; i < 16; ++i) lo += v >= kLevels[i] ? 1 : 0;
  if (lo == 15) return 15;
  const auto l = static_cast<size_t>(lo);
  return v - kLevels[l] < kLevels[l + 1] - v ? lo : lo + 1;
}

// Element weights of one block of 32: x^2, or with an importance matrix
// qw * sqrt(sigma2 + x^2), sigma2 twice the mean square of the (super-)block.
void block_weights(const float* x, const float* qw, float sigma2, float* w) {
  for (int j = 0; j < 32; ++j) w[j] = qw != nullptr ? qw[j] * std::sqrt(sigma2 + x[j] * x[j]) : x[j] * x[j];
}

float twice_mean_square(const float* x, int n) {
  float s = 0;
  for (int j = 0; j < n; ++j) s += x[j] * x[j];
  s *= 2.f / static_cast<float>(n);
  return s;
}

// Best scale for one block of 32 (x ~ d * table[L]), weights w: start from
// the signed max mapped to the table's first entry, refit by least squares,
// then try 15 inverse scales around it, keeping the one maximising
// (sum w q x)^2 / sum w q^2. Writes the codes of the starting fit to L.
float fit_block(const float* x, const float* weight, uint8_t* L) {
  float amax = 0, max = 0;
  for (int j = 0; j < 32; ++j) {
    const float ax = std::fabs(x[j]);
    if (ax > amax) {
      amax = ax;
      max = x[j];
    }
  }
  if (amax < kGroupMaxEps) return 0.0f;
  const float first = static_cast<float>(kvalues_iq4nl[0]);
  float d = -max / first;
  float id = 1 / d;
  float sumqx = 0, sumq2 = 0;
  for (int j = 0; j < 32; ++j) {
    const int l = nearest_level(id * x[j]);
    L[j] = static_cast<uint8_t>(l);
    const float q = static_cast<float>(kvalues_iq4nl[l]);
    const float w = weight[j];
    sumqx += w * q * x[j];
    sumq2 += w * q * q;
  }
  d = sumqx / sumq2;
  float best = d * sumqx;
  for (int t = -kSearchSteps; t <= kSearchSteps; ++t) {
    id = static_cast<float>(t + kvalues_iq4nl[0]) / max;
    sumqx = sumq2 = 0;
    for (int j = 0; j < 32; ++j) {
      const float q = static_cast<float>(kvalues_iq4nl[nearest_level(id * x[j])]);
      const float w = weight[j];
      sumqx += w * q * x[j];
      sumq2 += w * q * q;
    }
    if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
      d = sumqx / sumq2;
      best = d * sumqx;
    }
  }
  return d;
}

// Packs 32 codes of one block: element j in the low nibble of qs[j], j + 16 high.
void pack_nibbles(const uint8_t* L, uint8_t* qs) {
  for (int j = 0; j < 16; ++j) qs[j] = static_cast<uint8_t>(L[j] | (L[j + 16] << 4));
}

}  // namespace

void quantize_row_iq4_nl_weighted(const float* x, block_iq4_nl* y, int64_t n, const float* qw) {
  for (int64_t b = 0; b < n / kQK; ++b, x += kQK) {
    uint8_t L[kQK];
    float weight[kQK];
    const float* qb = qw != nullptr ? qw + kQK * b : nullptr;
    block_weights(x, qb, qb != nullptr ? twice_mean_square(x, kQK) : 0.f, weight);
    const float d = fit_block(x, weight, L);
    y[b].d = fp32_to_fp16(d);
    // Codes against the unrounded scale, as ggml does.
    const float id = d != 0 ? 1 / d : 0;
    for (int j = 0; j < kQK; ++j) L[j] = static_cast<uint8_t>(nearest_level(id * x[j]));
    pack_nibbles(L, y[b].qs);
  }
}

void quantize_row_iq4_nl_ref(const float* x, block_iq4_nl* y, int64_t n) {
  quantize_row_iq4_nl_weighted(x, y, n, nullptr);
}

void quantize_row_iq4_xs_weighted(const float* x, block_iq4_xs* y, int64_t n, const float* qw) {
  for (int64_t b = 0; b < n / kQKK; ++b, x += kQKK) {
    block_iq4_xs& out = y[b];
    uint8_t L[kQKK];
    float scales[8], weight[32];
    float max_scale = 0, amax_scale = 0;
    const float* qb = qw != nullptr ? qw + kQKK * b : nullptr;
    const float sigma2 = qb != nullptr ? twice_mean_square(x, kQKK) : 0.f;
    for (int j = 0; j < 8; ++j) {
      block_weights(x + 32 * j, qb != nullptr ? qb + 32 * j : nullptr, sigma2, weight);
      scales[j] = fit_block(x + 32 * j, weight, L + 32 * j);
      const float a = std::fabs(scales[j]);
      if (a > amax_scale) {
        amax_scale = a;
        max_scale = scales[j];
      }
    }
    // The largest block scale maps to -32 (6-bit scales stored with +32); an
    // all-zero super-block stores d = -0 as ggml does.
    const float d = -max_scale / 32;
    out.d = fp32_to_fp16(d);
    out.scales_h = 0;
    std::memset(out.scales_l, 0, sizeof out.scales_l);
    const float id = d != 0 ? 1 / d : 0.f;
    for (int j = 0; j < 8; ++j) {
      const int l = clamp_int(nearest_int(id * scales[j]), -32, 31);
      const float dl = d * static_cast<float>(l);
      const float idl = dl != 0 ? 1 / dl : 0.f;
      for (int e = 0; e < 32; ++e) L[32 * j + e] = static_cast<uint8_t>(nearest_level(idl * x[32 * j + e]));
      const int stored = l + 32;
      out.scales_l[j / 2] = static_cast<uint8_t>(out.scales_l[j / 2] | ((stored & 0xF) << (4 * (j % 2))));
      out.scales_h = static_cast<uint16_t>(out.scales_h | ((stored >> 4) << (2 * j)));
    }
    for (int j = 0; j < 8; ++j) pack_nibbles(L + 32 * j, out.qs + 16 * j);
  }
}

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

void quantize_row_iq4_xs_ref(const float* x, block_iq4_xs* y, int64_t n) {
  quantize_row_iq4_xs_weighted(x, y, n, nullptr);
}

}  // namespace tessera
