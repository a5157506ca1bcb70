// Activation quantizers over a tier's vector type V (avx2/vec.h or
// avx512/vec.h): the same arithmetic as quantize_q8_ref and
// quantize_row_q8_K_ref, lane by lane, so the results are bit-exact.
// Include after the tier's vec.h; internal linkage per tier.
#pragma once

#include "tessera/core/half.h"

#include <cstring>

#include "cpu/kernels/kernels.h"

namespace tessera::cpu {
namespace {

template <class V>
void quantize_q8(const float* x, BlockQ8* y, int64_t k) {
  constexpr int kVecs = kQK / V::kLanes;
  for (int64_t b = 0; b < k / kQK; ++b, x += kQK) {
    typename V::F v[kVecs];
    typename V::F amax = V::zero();
    for (int i = 0; i < kVecs; ++i) {
      v[i] = V::load(x + i * V::kLanes);
      amax = V::max_skip_nan(V::abs(v[i]), amax);
    }
    // Scalar divisions, exactly as the reference computes d and 1/d.
    const float d = V::hmax(amax) / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    typename V::I sum = V::zero_i(), low = V::zero_i();
    for (int i = 0; i < kVecs; ++i) {
      const typename V::I q = V::round_q8(V::mul(v[i], V::set1(id)));
      V::store_i8(y[b].qs + i * V::kLanes, q);
      sum = V::add_i(sum, q);
      low = V::add_i(low, V::low_pairs_i(q));
    }
    y[b].d = d;
    y[b].sum = V::hsum_i(sum);
    // set_q4_bias's sums from the vectors (k = 0, 1 mod 4, and the rest)
    // instead of a byte loop over the quants just stored.
    const int32_t lo = V::hsum_i(low);
    y[b].q4_bias[0] = static_cast<int16_t>(-8 * lo);
    y[b].q4_bias[1] = static_cast<int16_t>(-8 * (y[b].sum - lo));
  }
}

template <class V>
void quantize_q8_k(const float* x, block_q8_K* y, int64_t k) {
  constexpr int kVecs = kQKK / V::kLanes;
  for (int64_t b = 0; b < k / kQKK; ++b, x += kQKK) {
    block_q8_K& out = y[b];
    typename V::F amax = V::zero();
    for (int i = 0; i < kVecs; ++i) {
      amax = V::max_skip_nan(V::abs(V::load(x + i * V::kLanes)), amax);
    }
    const float m = V::hmax(amax);
    if (m == 0.0f) {
      std::memset(&out, 0, sizeof out);
      continue;
    }
    // The signed value of the first element of largest magnitude.
    float max = 0.0f;
    for (int i = 0; i < kVecs; ++i) {
      const uint32_t hits = V::eq_mask(V::abs(V::load(x + i * V::kLanes)), m);
      if (hits != 0) {
        max = x[i * V::kLanes + __builtin_ctz(hits)];
        break;
      }
    }
    const float iscale = -127.0f / max;
    for (int i = 0; i < kVecs; ++i) {
      const typename V::I q = V::round_q8k(V::mul(V::load(x + i * V::kLanes), V::set1(iscale)));
      V::store_i8(out.qs + i * V::kLanes, q);
    }
    for (int j = 0; j < 16; ++j) {
      int sum = 0;
      for (int l = 0; l < 16; ++l) sum += out.qs[16 * j + l];
      out.bsums[j] = static_cast<int16_t>(sum);
    }
    out.d = 1.0f / iscale;
  }
}

// f32 -> f16 of a row, 8 at a time with F16C (both x86 tiers have it): round
// to nearest even, NaNs quieted with their top payload bits, as fp32_to_fp16
// does, so the result is bit-exact with it (MXCSR's DAZ is never set here).
inline void to_f16_row(const float* x, uint16_t* y, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(y + i), h);
  }
  for (; i < n; ++i) y[i] = fp32_to_fp16(x[i]);
}

}  // namespace
}  // namespace tessera::cpu
