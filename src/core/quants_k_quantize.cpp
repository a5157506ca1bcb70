// K-quant quantizers without an importance matrix: ggml's searches
// (make_qkx2_quants for Q2_K / Q4_K / Q5_K, make_q3_quants for Q3_K,
// make_qx_quants for Q6_K), with its parameters and its float operations in
// its order, so the bytes match ggml's quantize_row_q*_K_ref and therefore what
// llama-quantize writes. Each expression below is written with the operand
// order and int-to-float conversions of the original; do not "simplify" them.
//
// Shape of every quantizer: fit each sub-block (scale, and for the asymmetric
// types a min), quantize the sub-block scales against the largest one (6 bits,
// 4 bits for Q2_K, 8 bits for Q6_K), round the super-block scales to f16, then
// re-round each element against the scale the block will actually decode with.
// A sub-block whose stored scale is 0 keeps the codes of its own fit.
#include "core/quants_search.h"

#include <cmath>
#include <cstring>

#include "core/quants.h"
#include "tessera/half.h"

namespace tessera {
namespace {

using quant_search::clamp_int;
using quant_search::kGroupMaxEps;
using quant_search::nearest_int;

// Search parameters of make_qkx2_quants: inverse scales (rmin + rdelta * is +
// nmax) / range for is in 0..nstep; mad selects |error| over squared error.
struct AsymmetricSearch {
  int nmax;
  float rmin;
  float rdelta;
  int nstep;
  bool mad;
};

// Fits x ~ scale * L - min_out (codes L in [0, nmax], min_out >= 0) minimising
// the weighted error; returns scale. Keeps the codes of the best fit in L.
float fit_scale_min(int n, const float* x, const float* w, uint8_t* L, float* min_out,
                    const AsymmetricSearch& p) {
  float min = x[0];
  float max = x[0];
  float sum_w = w[0];
  float sum_x = sum_w * x[0];
  for (int i = 1; i < n; ++i) {
    if (x[i] < min) min = x[i];
    if (x[i] > max) max = x[i];
    sum_w += w[i];
    sum_x += w[i] * x[i];
  }
  if (min > 0) min = 0;
  if (max == min) {
    std::memset(L, 0, static_cast<size_t>(n));
    *min_out = -min;
    return 0.0f;
  }
  const float fnmax = static_cast<float>(p.nmax);
  auto error_of = [&](float diff) { return p.mad ? std::fabs(diff) : diff * diff; };
  float iscale = fnmax / (max - min);
  float scale = 1 / iscale;
  float best_error = 0;
  for (int i = 0; i < n; ++i) {
    L[i] = static_cast<uint8_t>(clamp_int(nearest_int(iscale * (x[i] - min)), 0, p.nmax));
    const float diff = scale * static_cast<float>(L[i]) + min - x[i];
    best_error += w[i] * error_of(diff);
  }
  uint8_t aux[32];
  for (int is = 0; is <= p.nstep; ++is) {
    iscale = (p.rmin + p.rdelta * static_cast<float>(is) + fnmax) / (max - min);
    float sum_l = 0, sum_l2 = 0, sum_xl = 0;
    for (int i = 0; i < n; ++i) {
      const int l = clamp_int(nearest_int(iscale * (x[i] - min)), 0, p.nmax);
      aux[i] = static_cast<uint8_t>(l);
      const float fl = static_cast<float>(l);
      sum_l += w[i] * fl;
      sum_l2 += w[i] * fl * fl;
      sum_xl += w[i] * fl * x[i];
    }
    const float det = sum_w * sum_l2 - sum_l * sum_l;
    if (!(det > 0)) continue;
    float this_scale = (sum_w * sum_xl - sum_x * sum_l) / det;
    float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / det;
    if (this_min > 0) {  // the format only subtracts a min
      this_min = 0;
      this_scale = sum_xl / sum_l2;
    }
    float error = 0;
    for (int i = 0; i < n; ++i) {
      const float diff = this_scale * static_cast<float>(aux[i]) + this_min - x[i];
      error += w[i] * error_of(diff);
    }
    if (error < best_error) {
      std::memcpy(L, aux, static_cast<size_t>(n));
      best_error = error;
      scale = this_scale;
      min = this_min;
    }
  }
  *min_out = -min;
  return scale;
}

// Symmetric fit x ~ scale * (L - nmax), L in [0, 2 nmax - 1], weights x^2:
// the signed max maps to -nmax, then 18 nearby inverse scales are tried and the
// one maximising (sum w x l)^2 / sum w l^2 kept (ggml's make_qx_quants, rmse_type 1).
float fit_symmetric(int n, int nmax, const float* x, int8_t* L) {
  float max = 0, amax = 0;
  for (int i = 0; i < n; ++i) {
    const float ax = std::fabs(x[i]);
    if (ax > amax) {
      amax = ax;
      max = x[i];
    }
  }
  if (amax < kGroupMaxEps) {
    std::memset(L, 0, static_cast<size_t>(n));
    return 0.0f;
  }
  float iscale = static_cast<float>(-nmax) / max;
  float sumlx = 0, suml2 = 0;
  for (int i = 0; i < n; ++i) {
    const int l = clamp_int(nearest_int(iscale * x[i]), -nmax, nmax - 1);
    L[i] = static_cast<int8_t>(l + nmax);
    const float w = x[i] * x[i];
    const float fl = static_cast<float>(l);
    sumlx += w * x[i] * fl;
    suml2 += w * fl * fl;
  }
  float scale = suml2 != 0 ? sumlx / suml2 : 0.0f;
  float best = scale * sumlx;
  for (int is = -9; is <= 9; ++is) {
    if (is == 0) continue;
    iscale = -(static_cast<float>(nmax) + 0.1f * static_cast<float>(is)) / max;
    sumlx = suml2 = 0;
    for (int i = 0; i < n; ++i) {
      const float fl = static_cast<float>(clamp_int(nearest_int(iscale * x[i]), -nmax, nmax - 1));
      const float w = x[i] * x[i];
      sumlx += w * x[i] * fl;
      suml2 += w * fl * fl;
    }
    if (suml2 > 0 && sumlx * sumlx > best * suml2) {
      for (int i = 0; i < n; ++i) {
        L[i] = static_cast<int8_t>(nmax + clamp_int(nearest_int(iscale * x[i]), -nmax, nmax - 1));
      }
      scale = sumlx / suml2;
      best = scale * sumlx;
    }
  }
  return scale;
}

// Q3_K's sub-block fit: codes from the signed max mapped to -nmax, then up to
// five passes moving single codes where that raises (sum w x l)^2 / sum w l^2,
// weights x^2 (ggml's make_q3_quants with do_rmse). L in [0, 2 nmax - 1].
float fit_q3(int n, int nmax, const float* x, int8_t* L) {
  float max = 0, amax = 0;
  for (int i = 0; i < n; ++i) {
    const float ax = std::fabs(x[i]);
    if (ax > amax) {
      amax = ax;
      max = x[i];
    }
  }
  if (amax < kGroupMaxEps) {
    std::memset(L, 0, static_cast<size_t>(n));
    return 0.0f;
  }
  const float iscale = static_cast<float>(-nmax) / max;
  float sumlx = 0, suml2 = 0;
  for (int i = 0; i < n; ++i) {
    const int l = clamp_int(nearest_int(iscale * x[i]), -nmax, nmax - 1);
    L[i] = static_cast<int8_t>(l);
    const float w = x[i] * x[i];
    sumlx += w * x[i] * static_cast<float>(l);
    suml2 += w * static_cast<float>(l) * static_cast<float>(l);
  }
  for (int pass = 0; pass < 5; ++pass) {
    int changed = 0;
    for (int i = 0; i < n; ++i) {
      const float w = x[i] * x[i];
      const float li = static_cast<float>(L[i]);
      float slx = sumlx - w * x[i] * li;
      if (!(slx > 0)) continue;
      float sl2 = suml2 - w * li * li;
      const int new_l = clamp_int(nearest_int(x[i] * sl2 / slx), -nmax, nmax - 1);
      if (new_l == L[i]) continue;
      const float fl = static_cast<float>(new_l);
      slx += w * x[i] * fl;
      sl2 += w * fl * fl;
      if (sl2 > 0 && slx * slx * suml2 > sumlx * sumlx * sl2) {
        L[i] = static_cast<int8_t>(new_l);
        sumlx = slx;
        suml2 = sl2;
        ++changed;
      }
    }
    if (changed == 0) break;
  }
  for (int i = 0; i < n; ++i) L[i] = static_cast<int8_t>(L[i] + nmax);
  return sumlx / suml2;
}

// Packs 2-bit codes: element e = 128 h + 32 g + l at bits 2g of qs[32 h + l].
void pack_crumbs(const uint8_t* L, uint8_t* qs) {
  for (int h = 0; h < 2; ++h) {
    for (int l = 0; l < 32; ++l) {
      const uint8_t* c = L + 128 * h + l;
      qs[32 * h + l] = static_cast<uint8_t>(c[0] | (c[32] << 2) | (c[64] << 4) | (c[96] << 6));
    }
  }
}

// Stores 6-bit scale ls and min lm of sub-block j (0..7) as scale_min_k4 reads them.
void put_scale_min_k4(int j, uint8_t ls, uint8_t lm, uint8_t* scales) {
  if (j < 4) {
    scales[j] = ls;
    scales[j + 4] = lm;
  } else {
    scales[j + 4] = static_cast<uint8_t>((ls & 0xF) | ((lm & 0xF) << 4));
    scales[j - 4] = static_cast<uint8_t>(scales[j - 4] | ((ls >> 4) << 6));
    scales[j] = static_cast<uint8_t>(scales[j] | ((lm >> 4) << 6));
  }
}

// Q4_K and Q5_K share everything but the code range (nmax 15 / 31) and the
// search (rmin -1 / -0.5, 20 / 15 steps). Fills d, dmin, scales and the codes L.
void quantize_scale_min_32(const float* x, int nmax, float rmin, int nstep, uint16_t* d_out,
                           uint16_t* dmin_out, uint8_t* scales_out, uint8_t* L) {
  float scales[8], mins[8], weights[32];
  float max_scale = 0, max_min = 0;
  const AsymmetricSearch search{nmax, rmin, 0.1f, nstep, false};
  for (int j = 0; j < 8; ++j) {
    const float* xs = x + 32 * j;
    float sum_x2 = 0;
    for (int l = 0; l < 32; ++l) sum_x2 += xs[l] * xs[l];
    const float av_x = std::sqrt(sum_x2 / 32);
    for (int l = 0; l < 32; ++l) weights[l] = av_x + std::fabs(xs[l]);
    scales[j] = fit_scale_min(32, xs, weights, L + 32 * j, &mins[j], search);
    if (scales[j] > max_scale) max_scale = scales[j];
    if (mins[j] > max_min) max_min = mins[j];
  }
  const float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
  const float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
  std::memset(scales_out, 0, 12);
  for (int j = 0; j < 8; ++j) {
    // ggml stores the rounded value into a uint8_t before clamping to 63.
    uint8_t ls = static_cast<uint8_t>(nearest_int(inv_scale * scales[j]));
    uint8_t lm = static_cast<uint8_t>(nearest_int(inv_min * mins[j]));
    if (ls > 63) ls = 63;
    if (lm > 63) lm = 63;
    put_scale_min_k4(j, ls, lm, scales_out);
  }
  *d_out = fp32_to_fp16(max_scale / 63.f);
  *dmin_out = fp32_to_fp16(max_min / 63.f);
  for (int j = 0; j < 8; ++j) {
    uint8_t sc, m;
    scale_min_k4(j, scales_out, &sc, &m);
    const float d = fp16_to_fp32(*d_out) * static_cast<float>(sc);
    if (d == 0) continue;
    const float dm = fp16_to_fp32(*dmin_out) * static_cast<float>(m);
    for (int l = 0; l < 32; ++l) {
      L[32 * j + l] = static_cast<uint8_t>(clamp_int(nearest_int((x[32 * j + l] + dm) / d), 0, nmax));
    }
  }
}

}  // namespace

void quantize_row_q2_K_ref(const float* x, block_q2_K* y, int64_t n) {
  const AsymmetricSearch search{3, -0.5f, 0.1f, 15, true};
  for (int64_t b = 0; b < n / kQKK; ++b, x += kQKK) {
    block_q2_K& out = y[b];
    uint8_t L[kQKK];
    float scales[16], mins[16], weights[16];
    float max_scale = 0, max_min = 0;
    for (int j = 0; j < 16; ++j) {
      for (int l = 0; l < 16; ++l) weights[l] = std::fabs(x[16 * j + l]);
      scales[j] = fit_scale_min(16, x + 16 * j, weights, L + 16 * j, &mins[j], search);
      if (scales[j] > max_scale) max_scale = scales[j];
      if (mins[j] > max_min) max_min = mins[j];
    }
    if (max_scale > 0) {
      const float iscale = 15.f / max_scale;
      for (int j = 0; j < 16; ++j) out.scales[j] = static_cast<uint8_t>(nearest_int(iscale * scales[j]));
      out.d = fp32_to_fp16(max_scale / 15.f);
    } else {
      std::memset(out.scales, 0, sizeof out.scales);
      out.d = fp32_to_fp16(0.f);
    }
    if (max_min > 0) {
      const float iscale = 15.f / max_min;
      for (int j = 0; j < 16; ++j) {
        out.scales[j] = static_cast<uint8_t>(out.scales[j] | (nearest_int(iscale * mins[j]) << 4));
      }
      out.dmin = fp32_to_fp16(max_min / 15.f);
    } else {
      out.dmin = fp32_to_fp16(0.f);
    }
    for (int j = 0; j < 16; ++j) {
      const float d = fp16_to_fp32(out.d) * static_cast<float>(out.scales[j] & 0xF);
      if (d == 0) continue;
      const float dm = fp16_to_fp32(out.dmin) * static_cast<float>(out.scales[j] >> 4);
      for (int l = 0; l < 16; ++l) {
        L[16 * j + l] = static_cast<uint8_t>(clamp_int(nearest_int((x[16 * j + l] + dm) / d), 0, 3));
      }
    }
    pack_crumbs(L, out.qs);
  }
}

void quantize_row_q3_K_ref(const float* x, block_q3_K* y, int64_t n) {
  for (int64_t b = 0; b < n / kQKK; ++b, x += kQKK) {
    block_q3_K& out = y[b];
    int8_t L[kQKK];
    float scales[16];
    float max_scale = 0, amax = 0;
    for (int j = 0; j < 16; ++j) {
      scales[j] = fit_q3(16, 4, x + 16 * j, L + 16 * j);
      const float a = std::fabs(scales[j]);
      if (a > amax) {
        amax = a;
        max_scale = scales[j];
      }
    }
    std::memset(out.scales, 0, sizeof out.scales);
    if (max_scale != 0) {
      const float iscale = -32.f / max_scale;
      for (int j = 0; j < 16; ++j) {
        // ggml narrows the rounded scale to int8_t before clamping.
        const int8_t r = static_cast<int8_t>(nearest_int(iscale * scales[j]));
        const int l = clamp_int(r, -32, 31) + 32;
        if (j < 8) {
          out.scales[j] = static_cast<uint8_t>(l & 0xF);
        } else {
          out.scales[j - 8] = static_cast<uint8_t>(out.scales[j - 8] | ((l & 0xF) << 4));
        }
        out.scales[8 + j % 4] = static_cast<uint8_t>(out.scales[8 + j % 4] | ((l >> 4) << (2 * (j / 4))));
      }
      out.d = fp32_to_fp16(1 / iscale);
    } else {
      out.d = fp32_to_fp16(0.f);
    }
    for (int j = 0; j < 16; ++j) {
      const int low = j < 8 ? out.scales[j] & 0xF : out.scales[j - 8] >> 4;
      const int sc = (low | (((out.scales[8 + j % 4] >> (2 * (j / 4))) & 3) << 4)) - 32;
      const float d = fp16_to_fp32(out.d) * static_cast<float>(sc);
      if (d == 0) continue;
      for (int l = 0; l < 16; ++l) {
        L[16 * j + l] = static_cast<int8_t>(clamp_int(nearest_int(x[16 * j + l] / d), -4, 3) + 4);
      }
    }
    // Bit 2 of code e goes to bit e / 32 of hmask[e % 32]; the low 2 bits as in Q2_K.
    std::memset(out.hmask, 0, sizeof out.hmask);
    uint8_t low[kQKK];
    for (int e = 0; e < kQKK; ++e) {
      int l = L[e];
      if (l > 3) {
        out.hmask[e % 32] = static_cast<uint8_t>(out.hmask[e % 32] | (1 << (e / 32)));
        l -= 4;
      }
      low[e] = static_cast<uint8_t>(l);
    }
    pack_crumbs(low, out.qs);
  }
}

void quantize_row_q4_K_ref(const float* x, block_q4_K* y, int64_t n) {
  for (int64_t b = 0; b < n / kQKK; ++b, x += kQKK) {
    block_q4_K& out = y[b];
    uint8_t L[kQKK];
    quantize_scale_min_32(x, 15, -1.f, 20, &out.d, &out.dmin, out.scales, L);
    for (int c = 0; c < 4; ++c) {  // element 64 c + 32 k + l: nibble k of qs[32 c + l]
      for (int l = 0; l < 32; ++l) {
        out.qs[32 * c + l] = static_cast<uint8_t>(L[64 * c + l] | (L[64 * c + 32 + l] << 4));
      }
    }
  }
}

void quantize_row_q5_K_ref(const float* x, block_q5_K* y, int64_t n) {
  for (int64_t b = 0; b < n / kQKK; ++b, x += kQKK) {
    block_q5_K& out = y[b];
    uint8_t L[kQKK];
    quantize_scale_min_32(x, 31, -0.5f, 15, &out.d, &out.dmin, out.scales, L);
    std::memset(out.qh, 0, sizeof out.qh);
    for (int c = 0; c < 4; ++c) {  // bit 4 of element 64 c + 32 k + l: bit 2c + k of qh[l]
      for (int l = 0; l < 32; ++l) {
        const int lo = L[64 * c + l], hi = L[64 * c + 32 + l];
        out.qh[l] = static_cast<uint8_t>(out.qh[l] | ((lo >> 4) << (2 * c)) | ((hi >> 4) << (2 * c + 1)));
        out.qs[32 * c + l] = static_cast<uint8_t>((lo & 0xF) | ((hi & 0xF) << 4));
      }
    }
  }
}

void quantize_row_q6_K_ref(const float* x, block_q6_K* y, int64_t n) {
  for (int64_t b = 0; b < n / kQKK; ++b, x += kQKK) {
    block_q6_K& out = y[b];
    int8_t L[kQKK];
    float scales[16];
    float max_scale = 0, max_abs_scale = 0;
    for (int j = 0; j < 16; ++j) {
      scales[j] = fit_symmetric(16, 32, x + 16 * j, L + 16 * j);
      const float a = std::fabs(scales[j]);
      if (a > max_abs_scale) {
        max_abs_scale = a;
        max_scale = scales[j];
      }
    }
    if (max_abs_scale < kGroupMaxEps) {
      std::memset(&out, 0, sizeof out);
      continue;
    }
    const float iscale = -128.f / max_scale;
    out.d = fp32_to_fp16(1 / iscale);
    for (int j = 0; j < 16; ++j) {
      const int r = nearest_int(iscale * scales[j]);
      out.scales[j] = static_cast<int8_t>(r < 127 ? r : 127);
    }
    for (int j = 0; j < 16; ++j) {
      const float d = fp16_to_fp32(out.d) * static_cast<float>(out.scales[j]);
      if (d == 0) continue;
      for (int l = 0; l < 16; ++l) {
        L[16 * j + l] = static_cast<int8_t>(clamp_int(nearest_int(x[16 * j + l] / d), -32, 31) + 32);
      }
    }
    for (int h = 0; h < 2; ++h) {  // element 128 h + 32 g + l
      for (int l = 0; l < 32; ++l) {
        const int8_t* c = L + 128 * h + l;
        out.ql[64 * h + l] = static_cast<uint8_t>((c[0] & 0xF) | ((c[64] & 0xF) << 4));
        out.ql[64 * h + 32 + l] = static_cast<uint8_t>((c[32] & 0xF) | ((c[96] & 0xF) << 4));
        out.qh[32 * h + l] = static_cast<uint8_t>((c[0] >> 4) | ((c[32] >> 4) << 2) |
                                                  ((c[64] >> 4) << 4) | ((c[96] >> 4) << 6));
      }
    }
  }
}

}  // namespace tessera
