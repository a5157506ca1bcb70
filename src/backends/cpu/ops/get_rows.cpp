// GET_ROWS: dst[:, i, j, k] = a[:, ids[i, j, k], j, k], converted to f32 from
// any type with a dequantizer (F32/F16/BF16 rows may be strided, quantized
// rows need contiguous blocks; weights repacked into panels are read through
// kernels/repack.h); i32 rows are copied as they are. Ids out of range are an
// Error.
#include <cstring>

#include "cpu/kernels/repack.h"
#include "cpu/ops/rows.h"
#include "tessera/core/error.h"

namespace tessera::cpu {
namespace {

bool supports(const Tensor& node) {
  const Tensor& a = *node.src[0];
  const Tensor& ids = *node.src[1];
  const bool shape = ids.type == DType::kI32 && ids.ne[3] == 1 && node.ne[0] == a.ne[0] &&
                     node.ne[1] == ids.ne[0] && node.ne[2] == ids.ne[1] &&
                     node.ne[3] == ids.ne[2] && ids.ne[1] == a.ne[2] && ids.ne[2] == a.ne[3];
  if (!shape) return false;
  if (a.type == DType::kI32) return node.type == DType::kI32;
  return node.type == DType::kF32 && readable_rows(a);
}

size_t work_size(const Tensor& node, int nth) {
  return row_work_size(nth, 1, node.ne[0]);
}

void compute(Tensor& node, const OpContext& ctx) {
  const Tensor& a = *node.src[0];
  const Tensor& ids = *node.src[1];
  float* scratch = thread_row(ctx, 1, 0, node.ne[0]);
  const bool panels = is_repacked(a);
  const Range r = split_rows(node.n_rows(), ctx.ith, ctx.nth);
  for (int64_t flat = r.begin; flat < r.end; ++flat) {
    const RowIndex d = row_index(node, flat);
    int32_t row;
    std::memcpy(&row, element_ptr(ids, d.i1, d.i2, d.i3, 0), sizeof row);
    if (row < 0 || row >= a.ne[1]) {
      fail(ErrorCategory::kInvalidArgument, "[GET_ROWS] row id {} at [{}, {}, {}], expected 0..{}",
           row, d.i1, d.i2, d.i3, a.ne[1] - 1);
    }
    if (a.type == DType::kI32) {
      for (int64_t k = 0; k < a.ne[0]; ++k) {
        std::memcpy(element_ptr(node, k, d.i1, d.i2, d.i3), element_ptr(a, k, row, d.i2, d.i3),
                    sizeof(int32_t));
      }
    } else if (panels) {
      read_row_f32(a, row, d.i2, d.i3, scratch);
      write_row(node, d, scratch);
    } else {
      write_row(node, d, read_row(a, row, d.i2, d.i3, scratch));
    }
  }
}

}  // namespace

extern const OpImpl kGetRowsOp{supports, work_size, compute};

}  // namespace tessera::cpu
