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
#include "quants_search.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "tessera/core/half.h"
#include "tessera/core/quants.h"

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

// Symmetric fit x ~ scale * (L - nmax), L in [0, 2 nmax - 1], weights qw (or
// x^2 when null): the signed max maps to -nmax, then 18 nearby inverse scales
// are tried and the one maximising (sum w x l)^2 / sum w l^2 kept (ggml's
// make_qx_quants, rmse_type 1).
float fit_symmetric(int n, int nmax, const float* x, int8_t* L, const float* qw = nullptr) {
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
    const float w = qw != nullptr ? qw[i] : x[i] * x[i];
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
      const float w = qw != nullptr ? qw[i] : x[i] * x[i];
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

// Quantizes non-negative sub-block scales (or mins) x to codes L in [0, nmax]
// against one scale, weights w: the max maps to nmax, 8 nearby inverse scales
// are tried by weighted squared error, then up to five passes move single
// codes where that raises (sum w x l)^2 / sum w l^2 (ggml's make_qp_quants).
// Returns the scale.
float fit_positive(int n, int nmax, const float* x, uint8_t* L, const float* w) {
  float max = 0;
  for (int i = 0; i < n; ++i) max = x[i] > max ? x[i] : max;
  if (max == 0) {
    std::memset(L, 0, static_cast<size_t>(n));
    return 0.0f;
  }
  const float fnmax = static_cast<float>(nmax);
  float iscale = fnmax / max;
  for (int i = 0; i < n; ++i) L[i] = static_cast<uint8_t>(nearest_int(iscale * x[i]));
  const float scale = 1 / iscale;
  float best_mse = 0;
  for (int i = 0; i < n; ++i) {
    const float diff = x[i] - scale * static_cast<float>(L[i]);
    best_mse += w[i] * diff * diff;
  }
  for (int is = -4; is <= 4; ++is) {
    if (is == 0) continue;
    const float iscale_is = (0.1f * static_cast<float>(is) + fnmax) / max;
    const float scale_is = 1 / iscale_is;
    float mse = 0;
    for (int i = 0; i < n; ++i) {
      const int l = std::min(nmax, nearest_int(iscale_is * x[i]));
      const float diff = x[i] - scale_is * static_cast<float>(l);
      mse += w[i] * diff * diff;
    }
    if (mse < best_mse) {
      best_mse = mse;
      iscale = iscale_is;
    }
  }
  float sumlx = 0, suml2 = 0;
  for (int i = 0; i < n; ++i) {
    const int l = std::min(nmax, nearest_int(iscale * x[i]));
    L[i] = static_cast<uint8_t>(l);
    const float fl = static_cast<float>(l);
    sumlx += w[i] * x[i] * fl;
    suml2 += w[i] * fl * fl;
  }
  for (int pass = 0; pass < 5; ++pass) {
    int changed = 0;
    for (int i = 0; i < n; ++i) {
      const float li = static_cast<float>(L[i]);
      float slx = sumlx - w[i] * x[i] * li;
      float sl2 = suml2 - w[i] * li * li;
      if (!(slx > 0 && sl2 > 0)) continue;
      const int new_l = std::min(nmax, nearest_int(x[i] * sl2 / slx));
      if (new_l == L[i]) continue;
      const float fl = static_cast<float>(new_l);
      slx += w[i] * x[i] * fl;
      sl2 += w[i] * fl * fl;
      if (slx * slx * suml2 > sumlx * sumlx * sl2) {
        L[i] = static_cast<uint8_t>(new_l);
        sumlx = slx;
        suml2 = sl2;
        ++changed;
      }
    }
    if (changed == 0) break;
  }
  return sumlx / suml2;
}

// ggml's make_qkx3_quants as the importance-weighted paths call it: the
// make_qkx2_quants search, 37 finer steps, squared error.
constexpr float kWeightedRmin = -0.9f, kWeightedRdelta = 0.05f;
constexpr int kWeightedSteps = 36;

// sum of x^2 over n elements, in order.
float sum_squares(const float* x, int64_t n) {
  float s = 0;
  for (int64_t i = 0; i < n; ++i) s += x[i] * x[i];
  return s;
}

// Importance of each element: imatrix weight times sqrt(sigma2 + x^2).
void importance(const float* x, const float* qw, float sigma2, int n, float* w) {
  for (int i = 0; i < n; ++i) w[i] = qw[i] * std::sqrt(sigma2 + x[i] * x[i]);
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

// ---- the last steps every Q*_K quantizer shares: re-round, pack ----

// Q2_K: codes against d * (sc & 15) and dmin * (sc >> 4); packed as crumbs.
void finish_q2_K(const float* x, block_q2_K& out, uint8_t* L) {
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

// Q3_K: codes against d * (6-bit scale - 32); bit 2 of code e goes to bit
// e / 32 of hmask[e % 32], the low 2 bits as in Q2_K.
void finish_q3_K(const float* x, block_q3_K& out, int8_t* L) {
  for (int j = 0; j < 16; ++j) {
    const int low = j < 8 ? out.scales[j] & 0xF : out.scales[j - 8] >> 4;
    const int sc = (low | (((out.scales[8 + j % 4] >> (2 * (j / 4))) & 3) << 4)) - 32;
    const float d = fp16_to_fp32(out.d) * static_cast<float>(sc);
    if (d == 0) continue;
    for (int l = 0; l < 16; ++l) {
      L[16 * j + l] = static_cast<int8_t>(clamp_int(nearest_int(x[16 * j + l] / d), -4, 3) + 4);
    }
  }
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

// Q3_K's 16 6-bit scales (stored + 32): low 4 bits in nibbles of bytes 0..7,
// high 2 bits in bytes 8..11.
void put_scales_q3_K(const int* ls, uint8_t* scales) {
  std::memset(scales, 0, 12);
  for (int j = 0; j < 16; ++j) {
    const int l = ls[j];
    if (j < 8) {
      scales[j] = static_cast<uint8_t>(l & 0xF);
    } else {
      scales[j - 8] = static_cast<uint8_t>(scales[j - 8] | ((l & 0xF) << 4));
    }
    scales[8 + j % 4] = static_cast<uint8_t>(scales[8 + j % 4] | ((l >> 4) << (2 * (j / 4))));
  }
}

// Element 64 c + 32 k + l: nibble k of qs[32 c + l].
void pack_q4_K(const uint8_t* L, block_q4_K& out) {
  for (int c = 0; c < 4; ++c) {
    for (int l = 0; l < 32; ++l) {
      out.qs[32 * c + l] = static_cast<uint8_t>(L[64 * c + l] | (L[64 * c + 32 + l] << 4));
    }
  }
}

// As Q4_K; bit 4 of element 64 c + 32 k + l goes to bit 2c + k of qh[l].
void pack_q5_K(const uint8_t* L, block_q5_K& out) {
  std::memset(out.qh, 0, sizeof out.qh);
  for (int c = 0; c < 4; ++c) {
    for (int l = 0; l < 32; ++l) {
      const int lo = L[64 * c + l], hi = L[64 * c + 32 + l];
      out.qh[l] = static_cast<uint8_t>(out.qh[l] | ((lo >> 4) << (2 * c)) | ((hi >> 4) << (2 * c + 1)));
      out.qs[32 * c + l] = static_cast<uint8_t>((lo & 0xF) | ((hi & 0xF) << 4));
    }
  }
}

// Q6_K: codes against d * scales[j]; element 128 h + 32 g + l packed as the
// layout in quants.h says.
void finish_q6_K(const float* x, block_q6_K& out, int8_t* L) {
  for (int j = 0; j < 16; ++j) {
    const float d = fp16_to_fp32(out.d) * static_cast<float>(out.scales[j]);
    if (d == 0) continue;
    for (int l = 0; l < 16; ++l) {
      L[16 * j + l] = static_cast<int8_t>(clamp_int(nearest_int(x[16 * j + l] / d), -32, 31) + 32);
    }
  }
  for (int h = 0; h < 2; ++h) {
    for (int l = 0; l < 32; ++l) {
      const int8_t* c = L + 128 * h + l;
      out.ql[64 * h + l] = static_cast<uint8_t>((c[0] & 0xF) | ((c[64] & 0xF) << 4));
      out.ql[64 * h + 32 + l] = static_cast<uint8_t>((c[32] & 0xF) | ((c[96] & 0xF) << 4));
      out.qh[32 * h + l] = static_cast<uint8_t>((c[0] >> 4) | ((c[32] >> 4) << 2) |
                                                ((c[64] >> 4) << 4) | ((c[96] >> 4) << 6));
    }
  }
}

// Re-rounds each element of a Q4_K / Q5_K super-block against the scale and
// min it will decode with; sub-blocks with a zero scale keep their codes.
void requantize_scale_min_32(const float* x, int nmax, uint16_t d16, uint16_t dmin16,
                             const uint8_t* scales, uint8_t* L) {
  for (int j = 0; j < 8; ++j) {
    uint8_t sc, m;
    scale_min_k4(j, scales, &sc, &m);
    const float d = fp16_to_fp32(d16) * static_cast<float>(sc);
    if (d == 0) continue;
    const float dm = fp16_to_fp32(dmin16) * static_cast<float>(m);
    for (int l = 0; l < 32; ++l) {
      L[32 * j + l] = static_cast<uint8_t>(clamp_int(nearest_int((x[32 * j + l] + dm) / d), 0, nmax));
    }
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
  requantize_scale_min_32(x, nmax, *d_out, *dmin_out, scales_out, L);
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
    finish_q2_K(x, out, L);
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
      int ls[16];
      for (int j = 0; j < 16; ++j) {
        // ggml narrows the rounded scale to int8_t before clamping.
        const int8_t r = static_cast<int8_t>(nearest_int(iscale * scales[j]));
        ls[j] = clamp_int(r, -32, 31) + 32;
      }
      put_scales_q3_K(ls, out.scales);
      out.d = fp32_to_fp16(1 / iscale);
    } else {
      out.d = fp32_to_fp16(0.f);
    }
    finish_q3_K(x, out, L);
  }
}

void quantize_row_q4_K_ref(const float* x, block_q4_K* y, int64_t n) {
  for (int64_t b = 0; b < n / kQKK; ++b, x += kQKK) {
    block_q4_K& out = y[b];
    uint8_t L[kQKK];
    quantize_scale_min_32(x, 15, -1.f, 20, &out.d, &out.dmin, out.scales, L);
    pack_q4_K(L, out);
  }
}

void quantize_row_q5_K_ref(const float* x, block_q5_K* y, int64_t n) {
  for (int64_t b = 0; b < n / kQKK; ++b, x += kQKK) {
    block_q5_K& out = y[b];
    uint8_t L[kQKK];
    quantize_scale_min_32(x, 31, -0.5f, 15, &out.d, &out.dmin, out.scales, L);
    pack_q5_K(L, out);
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
    finish_q6_K(x, out, L);
  }
}

// ---- with an importance matrix: ggml's quantize_row_q*_K_impl ----
// `qw` holds one weight per column of the row (n floats); the searches
// minimise the error weighted by qw * sqrt(sigma2 + x^2), and the sub-block
// scales themselves are fitted (make_qp_quants) instead of scaled to the max.

void quantize_row_q2_K_weighted(const float* x, block_q2_K* y, int64_t n, const float* qw) {
  const AsymmetricSearch search{3, kWeightedRmin, kWeightedRdelta, kWeightedSteps, false};
  for (int64_t b = 0; b < n / kQKK; ++b, x += kQKK, qw += kQKK) {
    block_q2_K& out = y[b];
    uint8_t L[kQKK], Ls[16], Lm[16];
    float scales[16], mins[16], sw[16], weight[16];
    const float sigma2 = sum_squares(x, kQKK) / kQKK;
    for (int j = 0; j < 16; ++j) {
      importance(x + 16 * j, qw + 16 * j, sigma2, 16, weight);
      sw[j] = 0;
      for (int l = 0; l < 16; ++l) sw[j] += weight[l];
      scales[j] = fit_scale_min(16, x + 16 * j, weight, L + 16 * j, &mins[j], search);
    }
    out.d = fp32_to_fp16(fit_positive(16, 15, scales, Ls, sw));
    out.dmin = fp32_to_fp16(fit_positive(16, 15, mins, Lm, sw));
    for (int j = 0; j < 16; ++j) out.scales[j] = static_cast<uint8_t>(Ls[j] | (Lm[j] << 4));
    finish_q2_K(x, out, L);
  }
}

void quantize_row_q3_K_weighted(const float* x, block_q3_K* y, int64_t n, const float* qw) {
  for (int64_t b = 0; b < n / kQKK; ++b, x += kQKK, qw += kQKK) {
    block_q3_K& out = y[b];
    int8_t L[kQKK], Ls[16];
    float scales[16], sw[16], weight[16];
    const float sigma2 = 2 * sum_squares(x, kQKK) / kQKK;
    for (int j = 0; j < 16; ++j) {
      importance(x + 16 * j, qw + 16 * j, sigma2, 16, weight);
      float sumw = 0;
      for (int l = 0; l < 16; ++l) sumw += weight[l];
      sw[j] = sumw;
      scales[j] = fit_symmetric(16, 4, x + 16 * j, L + 16 * j, weight);
    }
    const float d_block = fit_symmetric(16, 32, scales, Ls, sw);
    int ls[16];
    for (int j = 0; j < 16; ++j) ls[j] = Ls[j];
    put_scales_q3_K(ls, out.scales);
    out.d = fp32_to_fp16(d_block);
    finish_q3_K(x, out, L);
  }
}

namespace {

// Q4_K / Q5_K with weights: both scales and mins fitted by make_qp_quants.
void quantize_scale_min_32_weighted(const float* x, const float* qw, int nmax, uint16_t* d_out,
                                    uint16_t* dmin_out, uint8_t* scales_out, uint8_t* L) {
  float scales[8], mins[8], sw[8], weights[32];
  uint8_t Ls[8], Lm[8];
  const AsymmetricSearch search{nmax, kWeightedRmin, kWeightedRdelta, kWeightedSteps, false};
  const float sigma2 = 2 * sum_squares(x, kQKK) / kQKK;
  for (int j = 0; j < 8; ++j) {
    importance(x + 32 * j, qw + 32 * j, sigma2, 32, weights);
    float sumw = 0;
    for (int l = 0; l < 32; ++l) sumw += weights[l];
    sw[j] = sumw;
    scales[j] = fit_scale_min(32, x + 32 * j, weights, L + 32 * j, &mins[j], search);
  }
  const float d_block = fit_positive(8, 63, scales, Ls, sw);
  const float m_block = fit_positive(8, 63, mins, Lm, sw);
  std::memset(scales_out, 0, 12);
  for (int j = 0; j < 8; ++j) put_scale_min_k4(j, std::min<uint8_t>(63, Ls[j]), std::min<uint8_t>(63, Lm[j]), scales_out);
  *d_out = fp32_to_fp16(d_block);
  *dmin_out = fp32_to_fp16(m_block);
  requantize_scale_min_32(x, nmax, *d_out, *dmin_out, scales_out, L);
}

}  // namespace

void quantize_row_q4_K_weighted(const float* x, block_q4_K* y, int64_t n, const float* qw) {
  for (int64_t b = 0; b < n / kQKK; ++b, x += kQKK, qw += kQKK) {
    uint8_t L[kQKK];
    quantize_scale_min_32_weighted(x, qw, 15, &y[b].d, &y[b].dmin, y[b].scales, L);
    pack_q4_K(L, y[b]);
  }
}

void quantize_row_q5_K_weighted(const float* x, block_q5_K* y, int64_t n, const float* qw) {
  for (int64_t b = 0; b < n / kQKK; ++b, x += kQKK, qw += kQKK) {
    uint8_t L[kQKK];
    quantize_scale_min_32_weighted(x, qw, 31, &y[b].d, &y[b].dmin, y[b].scales, L);
    pack_q5_K(L, y[b]);
  }
}

// Q6_K passes the imatrix weights to the sub-block fit as they are (no sigma2 term).
void quantize_row_q6_K_weighted(const float* x, block_q6_K* y, int64_t n, const float* qw) {
  for (int64_t b = 0; b < n / kQKK; ++b, x += kQKK, qw += kQKK) {
    block_q6_K& out = y[b];
    int8_t L[kQKK];
    float scales[16];
    float max_scale = 0, max_abs_scale = 0;
    for (int j = 0; j < 16; ++j) {
      scales[j] = fit_symmetric(16, 32, x + 16 * j, L + 16 * j, qw + 16 * j);
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
    for (int j = 0; j < 16; ++j) out.scales[j] = static_cast<int8_t>(std::min(127, nearest_int(iscale * scales[j])));
    finish_q6_K(x, out, L);
  }
}

// ---- legacy 32-element types with weights (ggml's quantize_row_q4_0_impl ...) ----
// sigma2 here is the mean square of the whole row.

void quantize_row_q4_0_weighted(const float* x, block_q4_0* y, int64_t n, const float* qw) {
  const float sigma2 = sum_squares(x, n) / static_cast<float>(n);
  for (int64_t b = 0; b < n / kQK; ++b) {
    float weight[kQK];
    int8_t L[kQK];
    importance(x + kQK * b, qw + kQK * b, sigma2, kQK, weight);
    y[b].d = fp32_to_fp16(fit_symmetric(kQK, 8, x + kQK * b, L, weight));
    for (int j = 0; j < 16; ++j) y[b].qs[j] = static_cast<uint8_t>(L[j] | (L[j + 16] << 4));
  }
}

void quantize_row_q5_0_weighted(const float* x, block_q5_0* y, int64_t n, const float* qw) {
  const float sigma2 = sum_squares(x, n) / static_cast<float>(n);
  for (int64_t b = 0; b < n / kQK; ++b) {
    float weight[kQK];
    int8_t L[kQK];
    importance(x + kQK * b, qw + kQK * b, sigma2, kQK, weight);
    y[b].d = fp32_to_fp16(fit_symmetric(kQK, 16, x + kQK * b, L, weight));
    uint32_t qh = 0;
    for (int j = 0; j < 16; ++j) {
      const uint32_t lo = static_cast<uint8_t>(L[j]), hi = static_cast<uint8_t>(L[j + 16]);
      y[b].qs[j] = static_cast<uint8_t>((lo & 0xF) | ((hi & 0xF) << 4));
      qh |= ((lo & 0x10u) >> 4) << j;
      qh |= ((hi & 0x10u) >> 4) << (j + 16);
    }
    std::memcpy(y[b].qh, &qh, sizeof qh);
  }
}

void quantize_row_q4_1_weighted(const float* x, block_q4_1* y, int64_t n, const float* qw) {
  const AsymmetricSearch search{15, kWeightedRmin, kWeightedRdelta, kWeightedSteps, false};
  const float sigma2 = sum_squares(x, n) / static_cast<float>(n);
  for (int64_t b = 0; b < n / kQK; ++b) {
    float weight[kQK], min;
    uint8_t L[kQK];
    importance(x + kQK * b, qw + kQK * b, sigma2, kQK, weight);
    y[b].d = fp32_to_fp16(fit_scale_min(kQK, x + kQK * b, weight, L, &min, search));
    y[b].m = fp32_to_fp16(-min);
    for (int j = 0; j < 16; ++j) y[b].qs[j] = static_cast<uint8_t>(L[j] | (L[j + 16] << 4));
  }
}

void quantize_row_q5_1_weighted(const float* x, block_q5_1* y, int64_t n, const float* qw) {
  const AsymmetricSearch search{31, kWeightedRmin, kWeightedRdelta, kWeightedSteps, false};
  const float sigma2 = sum_squares(x, n) / static_cast<float>(n);
  for (int64_t b = 0; b < n / kQK; ++b) {
    float weight[kQK], min;
    uint8_t L[kQK];
    importance(x + kQK * b, qw + kQK * b, sigma2, kQK, weight);
    y[b].d = fp32_to_fp16(fit_scale_min(kQK, x + kQK * b, weight, L, &min, search));
    y[b].m = fp32_to_fp16(-min);
    uint32_t qh = 0;
    for (int j = 0; j < 16; ++j) {
      const uint32_t lo = L[j], hi = L[j + 16];
      y[b].qs[j] = static_cast<uint8_t>((lo & 0xF) | ((hi & 0xF) << 4));
      qh |= ((lo & 0x10u) >> 4) << j;
      qh |= ((hi & 0x10u) >> 4) << (j + 16);
    }
    std::memcpy(y[b].qh, &qh, sizeof qh);
  }
}

}  // namespace tessera
