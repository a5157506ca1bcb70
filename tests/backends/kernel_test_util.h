// Helpers for the CPU kernel tests: random data, matrices in any weight type,
// the tiers this machine runs, and error measures.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/isa.h"
#include "backends/cpu/kernels/kernels.h"
#include "tessera/core/dtype.h"

namespace tessera::cpu::testing {

inline uint32_t fresh_seed() {
  return std::random_device{}();
}

// Uniform in [-1, 1], scaled per 32-block by a random power of two in
// [2^-6, 2^6] so blocks of very different magnitude meet in one dot product.
inline std::vector<float> random_floats(size_t n, std::mt19937& rng, bool vary_scale = true) {
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::uniform_int_distribution<int> exp(-6, 6);
  std::vector<float> v(n);
  float scale = 1.0f;
  for (size_t i = 0; i < n; ++i) {
    if (vary_scale && i % 32 == 0) scale = std::ldexp(1.0f, exp(rng));
    v[i] = dist(rng) * scale;
  }
  return v;
}

inline std::vector<uint8_t> random_bytes(size_t n, std::mt19937& rng) {
  std::uniform_int_distribution<int> dist(0, 255);
  std::vector<uint8_t> v(n);
  for (uint8_t& b : v) b = static_cast<uint8_t>(dist(rng));
  return v;
}

// rows x k floats quantized (or converted) row by row with the reference quantizer.
inline std::vector<uint8_t> to_type(DType type, const std::vector<float>& x, int64_t rows,
                                    int64_t k) {
  const size_t row = *row_bytes(type, k);
  std::vector<uint8_t> out(row * static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    quantize_row(type, x.data() + r * k, out.data() + static_cast<size_t>(r) * row, k);
  }
  return out;
}

inline std::vector<float> to_float(DType type, const std::vector<uint8_t>& bytes, int64_t rows,
                                   int64_t k) {
  const size_t row = *row_bytes(type, k);
  std::vector<float> out(static_cast<size_t>(rows * k));
  for (int64_t r = 0; r < rows; ++r) {
    dequantize_row(type, bytes.data() + static_cast<size_t>(r) * row, out.data() + r * k, k);
  }
  return out;
}

// Weights split as the kernels add them: w = scaled + min (min nonzero only
// for Q4_1, Q5_1, Q4_K, Q5_K, which keep (d, m) / (d, dmin) as their first two f16:
// zeroing one leaves the other part; and Q6_K, whose kernels add d sc q with
// q in [0, 63] and the offset -32 d sc apart: the block with every q 0 holds
// the offset alone; Q3_K likewise, q' = the 2 low bits | hbit << 2 in [0, 7] and
// the offset -4 d sc: the block with hmask and qs zero holds it; Q2_K keeps d,
// dmin last).
inline void split_parts(DType type, const std::vector<uint8_t>& bytes, int64_t rows, int64_t k,
                        std::vector<float>* scaled, std::vector<float>* min) {
  if (type == DType::kQ6_K || type == DType::kQ3_K) {
    const std::vector<float> w = to_float(type, bytes, rows, k);
    std::vector<uint8_t> offset = bytes;
    const bool q6 = type == DType::kQ6_K;
    const size_t block = q6 ? sizeof(block_q6_K) : sizeof(block_q3_K);
    const size_t quants = q6 ? offsetof(block_q6_K, scales) : offsetof(block_q3_K, scales);
    for (size_t at = 0; at < bytes.size(); at += block) {
      std::memset(offset.data() + at, 0, quants);  // ql, qh / hmask, qs
    }
    *min = to_float(type, offset, rows, k);
    scaled->resize(w.size());
    for (size_t i = 0; i < w.size(); ++i) (*scaled)[i] = w[i] - (*min)[i];
    return;
  }
  if (type != DType::kQ4_1 && type != DType::kQ5_1 && type != DType::kQ4_K &&
      type != DType::kQ5_K && type != DType::kQ2_K) {
    *scaled = to_float(type, bytes, rows, k);
    min->assign(scaled->size(), 0.0f);
    return;
  }
  const size_t block = dtype_info(type).block_bytes;
  const size_t d_at = type == DType::kQ2_K ? offsetof(block_q2_K, d) : 0;  // then the min's f16
  std::vector<uint8_t> s = bytes, m = bytes;
  for (size_t at = 0; at < bytes.size(); at += block) {
    std::memset(s.data() + at + d_at + 2, 0, 2);
    std::memset(m.data() + at + d_at, 0, 2);
  }
  *scaled = to_float(type, s, rows, k);
  *min = to_float(type, m, rows, k);
}

// The activation format the SIMD tiers quantize `type`'s inputs to.
inline ActFormat act_format_of(DType type) {
  if (type == DType::kQ2_K || type == DType::kQ3_K || type == DType::kQ4_K ||
      type == DType::kQ5_K || type == DType::kQ6_K || type == DType::kIQ4_XS) {
    return ActFormat::kQ8K;
  }
  return dtype_info(type).quantized ? ActFormat::kQ8 : ActFormat::kF32;
}

// What rows of k activations stand for after the reference quantizer of `act`.
inline std::vector<double> act_values(ActFormat act, const std::vector<float>& x, int64_t k) {
  std::vector<double> out(x.begin(), x.end());
  const int64_t rows = static_cast<int64_t>(x.size()) / k;
  const bool exact = act == ActFormat::kF32 || act == ActFormat::kF32Groups;
  for (int64_t r = 0; r < rows && !exact; ++r) {
    const float* src = x.data() + r * k;
    if (act == ActFormat::kQ8) {
      std::vector<BlockQ8> q(static_cast<size_t>(k / kQK));
      quantize_q8_ref(src, q.data(), k);
      for (int64_t i = 0; i < k; ++i) {
        out[static_cast<size_t>(r * k + i)] =
            static_cast<double>(q[i / kQK].d) * q[i / kQK].qs[i % kQK];
      }
    } else {
      std::vector<block_q8_K> q(static_cast<size_t>(k / kQKK));
      quantize_row_q8_K_ref(src, q.data(), k);
      for (int64_t i = 0; i < k; ++i) {
        out[static_cast<size_t>(r * k + i)] =
            static_cast<double>(q[i / kQKK].d) * q[i / kQKK].qs[i % kQKK];
      }
    }
  }
  return out;
}

// Normalized mean squared error of `got` against `want` (ggml's NMSE).
inline double nmse(const std::vector<float>& got, const std::vector<double>& want) {
  double err = 0, norm = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    err += (got[i] - want[i]) * (got[i] - want[i]);
    norm += want[i] * want[i];
  }
  return norm > 0 ? err / norm : err;
}

// Tiers this CPU runs, as test parameters named "ref", "avx2", "avx512".
inline std::vector<Isa> tiers() {
  return supported_isas();
}
inline std::vector<Isa> simd_tiers() {
  std::vector<Isa> out;
  for (Isa t : supported_isas()) {
    if (t != Isa::kRef) out.push_back(t);
  }
  return out;
}
inline std::string tier_name(const ::testing::TestParamInfo<Isa>& info) {
  return std::string(isa_name(info.param));
}

}  // namespace tessera::cpu::testing
