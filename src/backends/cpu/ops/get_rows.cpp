// GET_ROWS: dst[:, i, j, k] = a[:, ids[i, j, k], j, k], converted to f32
// (i32 rows are copied as they are). Ids out of range are an Error.
#include <cstring>
#include <vector>

#include "backends/cpu/ops/op.h"
#include "tessera/error.h"

namespace tessera::cpu {
namespace {

bool supports(const Tensor& node) {
  const Tensor& a = *node.src[0];
  const Tensor& ids = *node.src[1];
  if (ids.type != DType::kI32 || ids.nb[0] != sizeof(int32_t)) return false;
  if (a.type == DType::kI32) return node.type == DType::kI32 && a.nb[0] == sizeof(int32_t);
  if (node.type != DType::kF32 || node.nb[0] != sizeof(float)) return false;
  // Rows are converted whole: they must be contiguous in dim 0.
  const DTypeInfo& info = dtype_info(a.type);
  return info.has_dequantize && a.nb[0] == info.block_bytes;
}

void compute(Tensor& node, const OpContext& ctx) {
  const Tensor& a = *node.src[0];
  const Tensor& ids = *node.src[1];
  const int64_t n = ids.ne[0] * ids.ne[1] * ids.ne[2];
  const Range r = split_rows(n, ctx.ith, ctx.nth);
  for (int64_t flat = r.begin; flat < r.end; ++flat) {
    const int64_t i = flat % ids.ne[0];
    const int64_t j = (flat / ids.ne[0]) % ids.ne[1];
    const int64_t k = flat / (ids.ne[0] * ids.ne[1]);
    int32_t row;
    std::memcpy(&row, element_ptr(ids, i, j, k, 0), sizeof row);
    if (row < 0 || row >= a.ne[1]) {
      fail(ErrorCategory::kInvalidArgument, "[GET_ROWS] row id {} at [{}, {}, {}], expected 0..{}",
           row, i, j, k, a.ne[1] - 1);
    }
    const uint8_t* src = row_ptr(a, row, j, k);
    uint8_t* dst = row_ptr(node, i, j, k);
    if (a.type == DType::kI32) {
      std::memcpy(dst, src, static_cast<size_t>(a.ne[0]) * sizeof(int32_t));
    } else {
      row_to_float(a.type, src, reinterpret_cast<float*>(dst), a.ne[0]);
    }
  }
}

}  // namespace

extern const OpImpl kGetRowsOp{supports, nullptr, compute};

}  // namespace tessera::cpu
