// Scalar references for the legacy 32-element block types, and the
// DType-dispatching dequantize_row / quantize_row. The quantizers follow ggml's
// reference quantizers (quantize_row_*_ref), so files written with them match
// the ones llama.cpp's reference path writes.
#include <cmath>
#include <cstring>

#include "tessera/core/dtype.h"
#include "tessera/core/error.h"
#include "tessera/core/half.h"
#include "tessera/core/quants.h"

namespace tessera {
namespace {

// The element of largest magnitude, with its sign (the first one on ties).
float signed_absmax(const float* x, int n) {
  float amax = 0.0f;
  float max = 0.0f;
  for (int j = 0; j < n; ++j) {
    if (std::fabs(x[j]) > amax) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  }
  return max;
}

void min_max(const float* x, int n, float* min, float* max) {
  *min = x[0];
  *max = x[0];
  for (int j = 1; j < n; ++j) {
    if (x[j] < *min) *min = x[j];
    if (x[j] > *max) *max = x[j];
  }
}

// trunc(v) clamped to [0, hi]. Callers pass value + 0.5, so for the
// non-negative values this is round-half-up, exactly as ggml computes it.
// NaN (from non-finite input) gives 0 rather than undefined behaviour.
uint8_t trunc_clamp(float v, int hi) {
  if (!(v >= 1.0f)) return 0;
  if (v >= static_cast<float>(hi)) return static_cast<uint8_t>(hi);
  return static_cast<uint8_t>(v);
}

// round-half-away(v) into int8, clamped, NaN to 0.
int8_t round_int8(float v) {
  const float r = std::round(v);
  if (!(r >= -127.0f)) return r < 0.0f ? int8_t{-127} : int8_t{0};
  return static_cast<int8_t>(r > 127.0f ? 127.0f : r);
}

uint32_t load_u32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, sizeof v);  // little-endian host, as GGUF files are
  return v;
}

}  // namespace

void quantize_row_q4_0_ref(const float* x, block_q4_0* y, int64_t n) {
  for (int64_t b = 0; b < n / kQK; ++b, x += kQK) {
    // The largest-magnitude element maps to -8, the one code with no positive twin.
    const float d = signed_absmax(x, kQK) / -8.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[b].d = fp32_to_fp16(d);
    for (int j = 0; j < kQK / 2; ++j) {
      const uint8_t lo = trunc_clamp(x[j] * id + 8.5f, 15);
      const uint8_t hi = trunc_clamp(x[j + kQK / 2] * id + 8.5f, 15);
      y[b].qs[j] = static_cast<uint8_t>(lo | (hi << 4));
    }
  }
}

void quantize_row_q4_1_ref(const float* x, block_q4_1* y, int64_t n) {
  for (int64_t b = 0; b < n / kQK; ++b, x += kQK) {
    float min, max;
    min_max(x, kQK, &min, &max);
    const float d = (max - min) / 15.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[b].d = fp32_to_fp16(d);
    y[b].m = fp32_to_fp16(min);
    for (int j = 0; j < kQK / 2; ++j) {
      const uint8_t lo = trunc_clamp((x[j] - min) * id + 0.5f, 15);
      const uint8_t hi = trunc_clamp((x[j + kQK / 2] - min) * id + 0.5f, 15);
      y[b].qs[j] = static_cast<uint8_t>(lo | (hi << 4));
    }
  }
}

void quantize_row_q5_0_ref(const float* x, block_q5_0* y, int64_t n) {
  for (int64_t b = 0; b < n / kQK; ++b, x += kQK) {
    const float d = signed_absmax(x, kQK) / -16.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[b].d = fp32_to_fp16(d);
    uint32_t qh = 0;
    for (int j = 0; j < kQK / 2; ++j) {
      const uint8_t lo = trunc_clamp(x[j] * id + 16.5f, 31);
      const uint8_t hi = trunc_clamp(x[j + kQK / 2] * id + 16.5f, 31);
      y[b].qs[j] = static_cast<uint8_t>((lo & 0xF) | ((hi & 0xF) << 4));
      qh |= static_cast<uint32_t>(lo >> 4) << j;
      qh |= static_cast<uint32_t>(hi >> 4) << (j + kQK / 2);
    }
    std::memcpy(y[b].qh, &qh, sizeof qh);
  }
}

void quantize_row_q5_1_ref(const float* x, block_q5_1* y, int64_t n) {
  for (int64_t b = 0; b < n / kQK; ++b, x += kQK) {
    float min, max;
    min_max(x, kQK, &min, &max);
    const float d = (max - min) / 31.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[b].d = fp32_to_fp16(d);
    y[b].m = fp32_to_fp16(min);
    uint32_t qh = 0;
    for (int j = 0; j < kQK / 2; ++j) {
      const uint8_t lo = trunc_clamp((x[j] - min) * id + 0.5f, 31);
      const uint8_t hi = trunc_clamp((x[j + kQK / 2] - min) * id + 0.5f, 31);
      y[b].qs[j] = static_cast<uint8_t>((lo & 0xF) | ((hi & 0xF) << 4));
      qh |= static_cast<uint32_t>(lo >> 4) << j;
      qh |= static_cast<uint32_t>(hi >> 4) << (j + kQK / 2);
    }
    std::memcpy(y[b].qh, &qh, sizeof qh);
  }
}

void quantize_row_q8_0_ref(const float* x, block_q8_0* y, int64_t n) {
  for (int64_t b = 0; b < n / kQK; ++b, x += kQK) {
    float amax = 0.0f;
    for (int j = 0; j < kQK; ++j) amax = std::fmax(amax, std::fabs(x[j]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[b].d = fp32_to_fp16(d);
    for (int j = 0; j < kQK; ++j) y[b].qs[j] = round_int8(x[j] * id);
  }
}

void dequantize_row_q4_0_ref(const block_q4_0* x, float* y, int64_t n) {
  for (int64_t b = 0; b < n / kQK; ++b, y += kQK) {
    const float d = fp16_to_fp32(x[b].d);
    for (int j = 0; j < kQK / 2; ++j) {
      y[j] = static_cast<float>((x[b].qs[j] & 0xF) - 8) * d;
      y[j + kQK / 2] = static_cast<float>((x[b].qs[j] >> 4) - 8) * d;
    }
  }
}

void dequantize_row_q4_1_ref(const block_q4_1* x, float* y, int64_t n) {
  for (int64_t b = 0; b < n / kQK; ++b, y += kQK) {
    const float d = fp16_to_fp32(x[b].d);
    const float m = fp16_to_fp32(x[b].m);
    for (int j = 0; j < kQK / 2; ++j) {
      y[j] = static_cast<float>(x[b].qs[j] & 0xF) * d + m;
      y[j + kQK / 2] = static_cast<float>(x[b].qs[j] >> 4) * d + m;
    }
  }
}

void dequantize_row_q5_0_ref(const block_q5_0* x, float* y, int64_t n) {
  for (int64_t b = 0; b < n / kQK; ++b, y += kQK) {
    const float d = fp16_to_fp32(x[b].d);
    const uint32_t qh = load_u32(x[b].qh);
    for (int j = 0; j < kQK / 2; ++j) {
      const int lo = (x[b].qs[j] & 0xF) | static_cast<int>(((qh >> j) & 1u) << 4);
      const int hi = (x[b].qs[j] >> 4) | static_cast<int>(((qh >> (j + kQK / 2)) & 1u) << 4);
      y[j] = static_cast<float>(lo - 16) * d;
      y[j + kQK / 2] = static_cast<float>(hi - 16) * d;
    }
  }
}

void dequantize_row_q5_1_ref(const block_q5_1* x, float* y, int64_t n) {
  for (int64_t b = 0; b < n / kQK; ++b, y += kQK) {
    const float d = fp16_to_fp32(x[b].d);
    const float m = fp16_to_fp32(x[b].m);
    const uint32_t qh = load_u32(x[b].qh);
    for (int j = 0; j < kQK / 2; ++j) {
      const int lo = (x[b].qs[j] & 0xF) | static_cast<int>(((qh >> j) & 1u) << 4);
      const int hi = (x[b].qs[j] >> 4) | static_cast<int>(((qh >> (j + kQK / 2)) & 1u) << 4);
      y[j] = static_cast<float>(lo) * d + m;
      y[j + kQK / 2] = static_cast<float>(hi) * d + m;
    }
  }
}

void dequantize_row_q8_0_ref(const block_q8_0* x, float* y, int64_t n) {
  for (int64_t b = 0; b < n / kQK; ++b, y += kQK) {
    const float d = fp16_to_fp32(x[b].d);
    for (int j = 0; j < kQK; ++j) y[j] = static_cast<float>(x[b].qs[j]) * d;
  }
}

namespace {

// Throws unless n is a whole, non-negative number of `type` blocks.
void check_row(const char* where, DType type, int64_t n) {
  const DTypeInfo& info = dtype_info(type);
  if (n < 0 || n % info.block_size != 0) {
    fail(ErrorCategory::kInvalidArgument,
         "[{}] found {} elements of {}, expected a non-negative multiple of {}", where, n,
         info.name, info.block_size);
  }
}

}  // namespace

void dequantize_row(DType type, const void* src, float* dst, int64_t n) {
  check_row("dequantize_row", type, n);
  switch (type) {
    case DType::kF32:
      if (n > 0) std::memmove(dst, src, static_cast<size_t>(n) * sizeof(float));
      return;
    case DType::kF16:
      return fp16_to_fp32_row(static_cast<const uint16_t*>(src), dst, n);
    case DType::kBF16:
      return bf16_to_fp32_row(static_cast<const uint16_t*>(src), dst, n);
    case DType::kQ4_0:
      return dequantize_row_q4_0_ref(static_cast<const block_q4_0*>(src), dst, n);
    case DType::kQ4_1:
      return dequantize_row_q4_1_ref(static_cast<const block_q4_1*>(src), dst, n);
    case DType::kQ5_0:
      return dequantize_row_q5_0_ref(static_cast<const block_q5_0*>(src), dst, n);
    case DType::kQ5_1:
      return dequantize_row_q5_1_ref(static_cast<const block_q5_1*>(src), dst, n);
    case DType::kQ8_0:
      return dequantize_row_q8_0_ref(static_cast<const block_q8_0*>(src), dst, n);
    case DType::kQ2_K:
      return dequantize_row_q2_K_ref(static_cast<const block_q2_K*>(src), dst, n);
    case DType::kQ3_K:
      return dequantize_row_q3_K_ref(static_cast<const block_q3_K*>(src), dst, n);
    case DType::kQ4_K:
      return dequantize_row_q4_K_ref(static_cast<const block_q4_K*>(src), dst, n);
    case DType::kQ5_K:
      return dequantize_row_q5_K_ref(static_cast<const block_q5_K*>(src), dst, n);
    case DType::kQ6_K:
      return dequantize_row_q6_K_ref(static_cast<const block_q6_K*>(src), dst, n);
    case DType::kQ8_K:
      return dequantize_row_q8_K_ref(static_cast<const block_q8_K*>(src), dst, n);
    case DType::kIQ4_NL:
      return dequantize_row_iq4_nl_ref(static_cast<const block_iq4_nl*>(src), dst, n);
    case DType::kIQ4_XS:
      return dequantize_row_iq4_xs_ref(static_cast<const block_iq4_xs*>(src), dst, n);
    case DType::kMXFP4:
      return dequantize_row_mxfp4_ref(static_cast<const block_mxfp4*>(src), dst, n);
    default:
      fail(ErrorCategory::kUnsupported,
           "[dequantize_row] found type {}, expected one with a reference dequantizer "
           "(f32, f16, bf16, q4_0, q4_1, q5_0, q5_1, q8_0, q2_k..q6_k, q8_k, iq4_nl, iq4_xs, mxfp4)",
           dtype_name(type));
  }
}

void quantize_row(DType type, const float* src, void* dst, int64_t n) {
  check_row("quantize_row", type, n);
  switch (type) {
    case DType::kF32:
      if (n > 0) std::memmove(dst, src, static_cast<size_t>(n) * sizeof(float));
      return;
    case DType::kF16:
      return fp32_to_fp16_row(src, static_cast<uint16_t*>(dst), n);
    case DType::kBF16:
      return fp32_to_bf16_row(src, static_cast<uint16_t*>(dst), n);
    case DType::kQ4_0:
      return quantize_row_q4_0_ref(src, static_cast<block_q4_0*>(dst), n);
    case DType::kQ4_1:
      return quantize_row_q4_1_ref(src, static_cast<block_q4_1*>(dst), n);
    case DType::kQ5_0:
      return quantize_row_q5_0_ref(src, static_cast<block_q5_0*>(dst), n);
    case DType::kQ5_1:
      return quantize_row_q5_1_ref(src, static_cast<block_q5_1*>(dst), n);
    case DType::kQ8_0:
      return quantize_row_q8_0_ref(src, static_cast<block_q8_0*>(dst), n);
    case DType::kQ2_K:
      return quantize_row_q2_K_ref(src, static_cast<block_q2_K*>(dst), n);
    case DType::kQ3_K:
      return quantize_row_q3_K_ref(src, static_cast<block_q3_K*>(dst), n);
    case DType::kQ4_K:
      return quantize_row_q4_K_ref(src, static_cast<block_q4_K*>(dst), n);
    case DType::kQ5_K:
      return quantize_row_q5_K_ref(src, static_cast<block_q5_K*>(dst), n);
    case DType::kQ6_K:
      return quantize_row_q6_K_ref(src, static_cast<block_q6_K*>(dst), n);
    case DType::kIQ4_NL:
      return quantize_row_iq4_nl_ref(src, static_cast<block_iq4_nl*>(dst), n);
    case DType::kIQ4_XS:
      return quantize_row_iq4_xs_ref(src, static_cast<block_iq4_xs*>(dst), n);
    case DType::kQ8_K:
      return quantize_row_q8_K_ref(src, static_cast<block_q8_K*>(dst), n);
    case DType::kMXFP4:
      return quantize_row_mxfp4_ref(src, static_cast<block_mxfp4*>(dst), n);
    default:
      fail(ErrorCategory::kUnsupported,
           "[quantize_row] found type {}, expected one with a reference quantizer "
           "(f32, f16, bf16, q4_0, q4_1, q5_0, q5_1, q8_0, q2_k..q6_k, q8_k, iq4_nl, iq4_xs, mxfp4)",
           dtype_name(type));
  }
}

void quantize_row_weighted(DType type, const float* src, void* dst, int64_t n,
                           const float* importance) {
  if (importance == nullptr) return quantize_row(type, src, dst, n);
  check_row("quantize_row_weighted", type, n);
  switch (type) {
    case DType::kQ4_0:
      return quantize_row_q4_0_weighted(src, static_cast<block_q4_0*>(dst), n, importance);
    case DType::kQ4_1:
      return quantize_row_q4_1_weighted(src, static_cast<block_q4_1*>(dst), n, importance);
    case DType::kQ5_0:
      return quantize_row_q5_0_weighted(src, static_cast<block_q5_0*>(dst), n, importance);
    case DType::kQ5_1:
      return quantize_row_q5_1_weighted(src, static_cast<block_q5_1*>(dst), n, importance);
    case DType::kQ2_K:
      return quantize_row_q2_K_weighted(src, static_cast<block_q2_K*>(dst), n, importance);
    case DType::kQ3_K:
      return quantize_row_q3_K_weighted(src, static_cast<block_q3_K*>(dst), n, importance);
    case DType::kQ4_K:
      return quantize_row_q4_K_weighted(src, static_cast<block_q4_K*>(dst), n, importance);
    case DType::kQ5_K:
      return quantize_row_q5_K_weighted(src, static_cast<block_q5_K*>(dst), n, importance);
    case DType::kQ6_K:
      return quantize_row_q6_K_weighted(src, static_cast<block_q6_K*>(dst), n, importance);
    case DType::kIQ4_NL:
      return quantize_row_iq4_nl_weighted(src, static_cast<block_iq4_nl*>(dst), n, importance);
    case DType::kIQ4_XS:
      return quantize_row_iq4_xs_weighted(src, static_cast<block_iq4_xs*>(dst), n, importance);
    default:
      return quantize_row(type, src, dst, n);
  }
}

}  // namespace tessera
