// MUL_MAT, scalar reference: dst[i, j] = sum_k w[k, i] * x[k, j] per batch,
// weights broadcast over dims 2 and 3. Each thread takes a range of weight
// rows, converts each row to f32 once and dots it with every input column.
#include <cstring>

#include "backends/cpu/ops/op.h"

namespace tessera::cpu {
namespace {

bool supports(const Tensor& node) {
  const Tensor& w = *node.src[0];
  const Tensor& x = *node.src[1];
  const DTypeInfo& wi = dtype_info(w.type);
  return node.type == DType::kF32 && x.type == DType::kF32 && wi.has_dequantize &&
         w.nb[0] == wi.block_bytes && x.nb[0] == sizeof(float) && node.nb[0] == sizeof(float) &&
         w.ne[0] == x.ne[0] && x.ne[2] % w.ne[2] == 0 && x.ne[3] % w.ne[3] == 0 &&
         node.ne[0] == w.ne[1] && node.ne[1] == x.ne[1] && node.ne[2] == x.ne[2] &&
         node.ne[3] == x.ne[3];
}

constexpr size_t kLine = 64;  // keep each thread's scratch on its own cache lines

size_t row_scratch(const Tensor& node) {
  const size_t bytes = static_cast<size_t>(node.src[0]->ne[0]) * sizeof(float);
  return (bytes + kLine - 1) / kLine * kLine;
}

size_t work_size(const Tensor& node, int nth) {
  return row_scratch(node) * static_cast<size_t>(nth);
}

void compute(Tensor& node, const OpContext& ctx) {
  const Tensor& w = *node.src[0];
  const Tensor& x = *node.src[1];
  const int64_t k = w.ne[0];
  const int64_t r2 = x.ne[2] / w.ne[2];
  const int64_t r3 = x.ne[3] / w.ne[3];
  float* wrow = reinterpret_cast<float*>(ctx.work + row_scratch(node) * static_cast<size_t>(ctx.ith));
  // Work items: (weight row, weight batch) pairs.
  const int64_t items = w.ne[1] * w.ne[2] * w.ne[3];
  const Range r = split_rows(items, ctx.ith, ctx.nth);
  for (int64_t item = r.begin; item < r.end; ++item) {
    const int64_t i = item % w.ne[1];
    const int64_t w2 = (item / w.ne[1]) % w.ne[2];
    const int64_t w3 = item / (w.ne[1] * w.ne[2]);
    row_to_float(w.type, row_ptr(w, i, w2, w3), wrow, k);
    for (int64_t x3 = w3 * r3; x3 < (w3 + 1) * r3; ++x3) {
      for (int64_t x2 = w2 * r2; x2 < (w2 + 1) * r2; ++x2) {
        for (int64_t j = 0; j < x.ne[1]; ++j) {
          const float* xr = reinterpret_cast<const float*>(row_ptr(x, j, x2, x3));
          float sum = 0.0f;
          for (int64_t kk = 0; kk < k; ++kk) sum += wrow[kk] * xr[kk];
          *reinterpret_cast<float*>(element_ptr(node, i, j, x2, x3)) = sum;
        }
      }
    }
  }
}

}  // namespace

extern const OpImpl kMulMatOp{supports, work_size, compute};

}  // namespace tessera::cpu
