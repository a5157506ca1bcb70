// SUM_ROWS (sums in double) and ARGSORT (stable: ties keep index order), per
// row of an F32/F16/BF16 tensor in any strides.
#include <algorithm>
#include <cstring>
#include <numeric>

#include "cpu/ops/rows.h"
#include "tessera/core/op_params.h"

namespace tessera::cpu {
namespace {

bool sum_rows_supports(const Tensor& node) {
  const Tensor& a = *node.src[0];
  return is_float_type(node.type) && is_float_type(a.type) && node.ne[0] == 1 &&
         node.ne[1] == a.ne[1] && node.ne[2] == a.ne[2] && node.ne[3] == a.ne[3];
}

size_t sum_rows_work_size(const Tensor& node, int nth) {
  return row_work_size(nth, 1, node.src[0]->ne[0]);
}

void sum_rows_compute(Tensor& node, const OpContext& ctx) {
  const Tensor& a = *node.src[0];
  float* scratch = thread_row(ctx, 1, 0, a.ne[0]);
  const Range r = split_rows(a.n_rows(), ctx.ith, ctx.nth);
  for (int64_t row = r.begin; row < r.end; ++row) {
    const RowIndex i = row_index(a, row);
    const float* x = read_row(a, i, scratch);
    double sum = 0.0;
    for (int64_t k = 0; k < a.ne[0]; ++k) sum += x[k];
    store_float(node.type, element_ptr(node, 0, i.i1, i.i2, i.i3), static_cast<float>(sum));
  }
}

bool argsort_supports(const Tensor& node) {
  const Tensor& a = *node.src[0];
  const SortOrder order = ArgsortParams::get(node).order;
  return node.type == DType::kI32 && is_float_type(a.type) && same_shape(node, a) &&
         (order == SortOrder::kAscending || order == SortOrder::kDescending);
}

// Row values and the index permutation, both ne0 long.
size_t argsort_work_size(const Tensor& node, int nth) {
  return row_work_size(nth, 2, node.ne[0]);
}

void argsort_compute(Tensor& node, const OpContext& ctx) {
  const Tensor& a = *node.src[0];
  const bool descending = ArgsortParams::get(node).order == SortOrder::kDescending;
  const int64_t n = node.ne[0];
  float* scratch = thread_row(ctx, 2, 0, n);
  auto* idx = reinterpret_cast<int32_t*>(thread_row(ctx, 2, 1, n));
  const Range r = split_rows(node.n_rows(), ctx.ith, ctx.nth);
  for (int64_t row = r.begin; row < r.end; ++row) {
    const RowIndex i = row_index(node, row);
    const float* x = read_row(a, i, scratch);
    std::iota(idx, idx + n, 0);
    std::stable_sort(idx, idx + n, [x, descending](int32_t l, int32_t rr) {
      return descending ? x[l] > x[rr] : x[l] < x[rr];
    });
    for (int64_t k = 0; k < n; ++k) {
      std::memcpy(element_ptr(node, k, i.i1, i.i2, i.i3), &idx[k], sizeof(int32_t));
    }
  }
}

}  // namespace

extern const OpImpl kSumRowsOp{sum_rows_supports, sum_rows_work_size, sum_rows_compute};
extern const OpImpl kArgsortOp{argsort_supports, argsort_work_size, argsort_compute};

}  // namespace tessera::cpu
