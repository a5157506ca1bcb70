// Scalar references for the K-quants (256-element super-blocks).
//
// Dequantizers evaluate each value with the same float operations, in the same
// order, as ggml's dequantize_row_*_K, so results match it bit for bit.
//
// Quantizers: Q8_K follows ggml's reference exactly. Q4_K and Q6_K use their
// own search, close to ggml's in spirit and quality but not bit-identical:
//  - each sub-block gets a real-valued scale (and for Q4_K a min) from a small
//    grid search over the inverse scale; for every candidate the codes are
//    rounded, the scale (and min) refitted by least squares, and the candidate
//    with the lowest unweighted squared error is kept (ggml weights the error
//    by |x| + rms, which favours large weights; we minimise plain MSE);
//  - the super-block scale maps the largest sub-block scale to the top of the
//    6-bit (Q4_K) or 8-bit (Q6_K) range;
//  - the codes are then re-rounded against the scales actually stored (f16
//    super-scale times the small integer scale), so each element's code is the
//    nearest one for what the block will dequantize to.
#include <cmath>
#include <cstring>

#include "core/quants.h"
#include "tessera/half.h"

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

// Least-squares scale for codes in [-nmax, nmax - 1] (x ~ s * l), searched over
// 19 inverse scales around nmax / max. Returns 0 for an all-zero sub-block.
float fit_symmetric(const float* x, int n, int nmax) {
  float max = 0.0f;
  float amax = 0.0f;
  for (int i = 0; i < n; ++i) {
    if (std::fabs(x[i]) > amax) {
      amax = std::fabs(x[i]);
      max = x[i];
    }
  }
  if (amax < 1e-30f) return 0.0f;
  float best_scale = 0.0f;
  float best = -1.0f;  // sumlx^2 / suml2: the error is sum x^2 minus this
  for (int step = -9; step <= 9; ++step) {
    const float iscale = -(static_cast<float>(nmax) + 0.1f * static_cast<float>(step)) / max;
    float sumlx = 0.0f;
    float suml2 = 0.0f;
    for (int i = 0; i < n; ++i) {
      const float l = static_cast<float>(nearest_clamp(iscale * x[i], -nmax, nmax - 1));
      sumlx += x[i] * l;
      suml2 += l * l;
    }
    if (suml2 > 0.0f && sumlx * sumlx / suml2 > best) {
      best = sumlx * sumlx / suml2;
      best_scale = sumlx / suml2;
    }
  }
  return best_scale;
}

// Fits x ~ scale * l - min_off with codes l in [0, nmax], scale >= 0 and
// min_off >= 0 (the format stores -min_off as a non-negative 6-bit multiple).
// Searches 21 inverse scales from (nmax - 1) / range to (nmax + 1) / range,
// refitting scale and offset by least squares for each set of codes.
void fit_asymmetric(const float* x, int n, int nmax, float* scale, float* min_off) {
  float mn = x[0];
  float mx = x[0];
  float sum_x = 0.0f;
  for (int i = 0; i < n; ++i) {
    if (x[i] < mn) mn = x[i];
    if (x[i] > mx) mx = x[i];
    sum_x += x[i];
  }
  if (mn > 0.0f) mn = 0.0f;
  if (mx == mn) {
    *scale = 0.0f;
    *min_off = -mn;
    return;
  }
  const float range = mx - mn;
  float best_a = range / static_cast<float>(nmax);
  float best_b = mn;
  float best_err = 0.0f;
  for (int i = 0; i < n; ++i) {
    const float l = static_cast<float>(nearest_clamp((x[i] - mn) / best_a, 0, nmax));
    const float diff = best_a * l + mn - x[i];
    best_err += diff * diff;
  }
  const float fn = static_cast<float>(n);
  for (int step = 0; step <= 20; ++step) {
    const float iscale =
        (static_cast<float>(nmax) - 1.0f + 0.1f * static_cast<float>(step)) / range;
    float sum_l = 0.0f, sum_l2 = 0.0f, sum_xl = 0.0f;
    uint8_t codes[32];
    for (int i = 0; i < n; ++i) {
      const int l = nearest_clamp(iscale * (x[i] - mn), 0, nmax);
      codes[i] = static_cast<uint8_t>(l);
      sum_l += static_cast<float>(l);
      sum_l2 += static_cast<float>(l * l);
      sum_xl += x[i] * static_cast<float>(l);
    }
    const float det = fn * sum_l2 - sum_l * sum_l;
    if (!(det > 0.0f)) continue;
    float a = (fn * sum_xl - sum_x * sum_l) / det;
    float b = (sum_l2 * sum_x - sum_l * sum_xl) / det;
    if (b > 0.0f) {  // the format cannot add a positive offset
      b = 0.0f;
      a = sum_xl / sum_l2;
    }
    if (!(a > 0.0f)) continue;
    float err = 0.0f;
    for (int i = 0; i < n; ++i) {
      const float diff = a * static_cast<float>(codes[i]) + b - x[i];
      err += diff * diff;
    }
    if (err < best_err) {
      best_err = err;
      best_a = a;
      best_b = b;
    }
  }
  *scale = best_a;
  *min_off = -best_b;
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

void quantize_row_q4_K_ref(const float* x, block_q4_K* y, int64_t n) {
  for (int64_t b = 0; b < n / kQKK; ++b, x += kQKK) {
    float scales[8], mins[8];
    float max_scale = 0.0f, max_min = 0.0f;
    for (int j = 0; j < 8; ++j) {
      fit_asymmetric(x + 32 * j, 32, 15, &scales[j], &mins[j]);
      max_scale = std::fmax(max_scale, scales[j]);
      max_min = std::fmax(max_min, mins[j]);
    }
    const float inv_scale = max_scale > 0.0f ? 63.0f / max_scale : 0.0f;
    const float inv_min = max_min > 0.0f ? 63.0f / max_min : 0.0f;
    block_q4_K& out = y[b];
    std::memset(out.scales, 0, sizeof out.scales);
    for (int j = 0; j < 8; ++j) {
      const int ls = nearest_clamp(inv_scale * scales[j], 0, 63);
      const int lm = nearest_clamp(inv_min * mins[j], 0, 63);
      if (j < 4) {
        out.scales[j] = static_cast<uint8_t>(ls);
        out.scales[j + 4] = static_cast<uint8_t>(lm);
      } else {
        out.scales[j + 4] = static_cast<uint8_t>((ls & 0xF) | ((lm & 0xF) << 4));
        out.scales[j - 4] |= static_cast<uint8_t>((ls >> 4) << 6);
        out.scales[j] |= static_cast<uint8_t>((lm >> 4) << 6);
      }
    }
    out.d = fp32_to_fp16(max_scale / 63.0f);
    out.dmin = fp32_to_fp16(max_min / 63.0f);
    const float d = fp16_to_fp32(out.d);
    const float dmin = fp16_to_fp32(out.dmin);
    std::memset(out.qs, 0, sizeof out.qs);
    for (int j = 0; j < 8; ++j) {
      uint8_t sc, m;
      scale_min_k4(j, out.scales, &sc, &m);
      const float dl = d * static_cast<float>(sc);
      if (dl == 0.0f) continue;  // every code dequantizes to -dmin * m
      const float ml = dmin * static_cast<float>(m);
      uint8_t* q = out.qs + 32 * (j / 2);
      const int shift = 4 * (j % 2);
      for (int l = 0; l < 32; ++l) {
        const int code = nearest_clamp((x[32 * j + l] + ml) / dl, 0, 15);
        q[l] = static_cast<uint8_t>(q[l] | (code << shift));
      }
    }
  }
}

void quantize_row_q6_K_ref(const float* x, block_q6_K* y, int64_t n) {
  for (int64_t b = 0; b < n / kQKK; ++b, x += kQKK) {
    block_q6_K& out = y[b];
    std::memset(&out, 0, sizeof out);
    float scales[16];
    float max_scale = 0.0f, amax_scale = 0.0f;
    for (int j = 0; j < 16; ++j) {
      scales[j] = fit_symmetric(x + 16 * j, 16, 32);
      if (std::fabs(scales[j]) > amax_scale) {
        amax_scale = std::fabs(scales[j]);
        max_scale = scales[j];
      }
    }
    int codes[kQKK];
    if (amax_scale < 1e-30f) {  // all zero: d = 0 and codes meaning 0
      for (int& c : codes) c = 32;
    } else {
      // The largest sub-block scale maps to -128, the end of int8 with no positive twin.
      const float iscale = -128.0f / max_scale;
      out.d = fp32_to_fp16(1.0f / iscale);
      for (int j = 0; j < 16; ++j) {
        out.scales[j] = static_cast<int8_t>(nearest_clamp(iscale * scales[j], -128, 127));
      }
      const float d = fp16_to_fp32(out.d);
      for (int e = 0; e < kQKK; ++e) {
        const float dl = d * static_cast<float>(out.scales[e / 16]);
        codes[e] = dl == 0.0f ? 32 : nearest_clamp(x[e] / dl, -32, 31) + 32;
      }
    }
    for (int e = 0; e < kQKK; ++e) {
      const int h = e / 128, g = (e / 32) % 4, l = e % 32;
      uint8_t& low = out.ql[64 * h + 32 * (g % 2) + l];
      low = static_cast<uint8_t>(low | ((codes[e] & 0xF) << (4 * (g / 2))));
      uint8_t& high = out.qh[32 * h + l];
      high = static_cast<uint8_t>(high | ((codes[e] >> 4) << (2 * g)));
    }
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
