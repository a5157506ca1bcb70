#include "cpu/ops/rows.h"

#include <cstring>

#include "tessera/core/error.h"
#include "tessera/core/half.h"

namespace tessera::cpu {
namespace {

constexpr size_t kLineFloats = 64 / sizeof(float);

bool f32_in_place(const Tensor& t) {
  return t.type == DType::kF32 && t.nb[0] == sizeof(float);
}

// Strided f16/bf16/f32 loads and stores with the type chosen once per row.
template <class Convert>
void load_strided(const uint8_t* p, size_t stride, int64_t n, float* dst, Convert convert) {
  for (int64_t i = 0; i < n; ++i, p += stride) dst[i] = convert(p);
}
template <class Convert>
void store_strided(uint8_t* p, size_t stride, int64_t n, const float* src, Convert convert) {
  for (int64_t i = 0; i < n; ++i, p += stride) convert(p, src[i]);
}

}  // namespace

bool readable_rows(const Tensor& t) {
  if (is_float_type(t.type)) return true;
  const DTypeInfo& info = dtype_info(t.type);
  return info.has_dequantize && t.nb[0] == info.block_bytes;
}

const float* read_row(const Tensor& t, int64_t i1, int64_t i2, int64_t i3, float* scratch) {
  const uint8_t* p = row_ptr(t, i1, i2, i3);
  const int64_t n = t.ne[0];
  const size_t stride = t.nb[0];
  switch (t.type) {
    case DType::kF32:
      if (stride == sizeof(float)) return reinterpret_cast<const float*>(p);
      load_strided(p, stride, n, scratch, [](const uint8_t* q) {
        float v;
        std::memcpy(&v, q, sizeof v);
        return v;
      });
      return scratch;
    case DType::kF16:
    case DType::kBF16: {
      const bool half = t.type == DType::kF16;
      load_strided(p, stride, n, scratch, [half](const uint8_t* q) {
        uint16_t h;
        std::memcpy(&h, q, sizeof h);
        return half ? fp16_to_fp32(h) : bf16_to_fp32(h);
      });
      return scratch;
    }
    default:  // quantized, blocks contiguous (readable_rows)
      dequantize_row(t.type, p, scratch, n);
      return scratch;
  }
}

float* row_out(Tensor& t, int64_t i1, int64_t i2, int64_t i3, float* scratch) {
  return f32_in_place(t) ? reinterpret_cast<float*>(row_ptr(t, i1, i2, i3)) : scratch;
}

void write_row(Tensor& t, int64_t i1, int64_t i2, int64_t i3, const float* src) {
  uint8_t* p = row_ptr(t, i1, i2, i3);
  if (reinterpret_cast<const uint8_t*>(src) == p) return;  // computed in place
  const int64_t n = t.ne[0];
  const size_t stride = t.nb[0];
  switch (t.type) {
    case DType::kF32:
      store_strided(p, stride, n, src, [](uint8_t* q, float v) { std::memcpy(q, &v, sizeof v); });
      return;
    case DType::kF16:
    case DType::kBF16: {
      const bool half = t.type == DType::kF16;
      store_strided(p, stride, n, src, [half](uint8_t* q, float v) {
        const uint16_t h = half ? fp32_to_fp16(v) : fp32_to_bf16(v);
        std::memcpy(q, &h, sizeof h);
      });
      return;
    }
    default:
      TESSERA_CHECK(false, "write_row of {}", dtype_name(t.type));
  }
}

size_t scratch_floats(int64_t n) {
  const size_t u = static_cast<size_t>(n > 0 ? n : 1);
  return (u + kLineFloats - 1) / kLineFloats * kLineFloats;
}

const uint8_t* flat_element(const Tensor& t, int64_t flat) {
  const int64_t i0 = flat % t.ne[0];
  const int64_t row = flat / t.ne[0];
  const RowIndex r = row_index(t, row);
  return element_ptr(t, i0, r.i1, r.i2, r.i3);
}

}  // namespace tessera::cpu
