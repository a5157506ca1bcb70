// Row helpers for the scalar reference ops: they compute on f32 rows. A row of
// an f32 tensor with unit stride is used where it lies; any other row (f16,
// bf16, strided, or quantized with contiguous blocks) goes through per-thread
// scratch. Cost: one conversion pass per row that is not f32 in place.
#pragma once

#include <cstddef>
#include <cstdint>

#include "cpu/ops/op.h"

namespace tessera::cpu {

// Row index `row` of a tensor with ne1 x ne2 x ne3 rows, as (i1, i2, i3).
struct RowIndex {
  int64_t i1, i2, i3;
};
inline RowIndex row_index(const Tensor& t, int64_t row) {
  return {row % t.ne[1], (row / t.ne[1]) % t.ne[2], row / (t.ne[1] * t.ne[2])};
}

// True when rows of `t` can be read as f32 by read_row: F32/F16/BF16 with any
// element stride, or a type with a dequantizer whose blocks are contiguous.
bool readable_rows(const Tensor& t);
// True when rows of `t` can be written from f32 by write_row: F32/F16/BF16.
inline bool writable_rows(const Tensor& t) {
  return is_float_type(t.type);
}

// Row (i1, i2, i3) of `t` (t.ne[0] elements) as f32: in place when it is
// contiguous f32, else converted into `scratch`.
const float* read_row(const Tensor& t, int64_t i1, int64_t i2, int64_t i3, float* scratch);
inline const float* read_row(const Tensor& t, RowIndex r, float* scratch) {
  return read_row(t, r.i1, r.i2, r.i3, scratch);
}
// Where to compute row (i1, i2, i3) of `t`: the row itself when it is
// contiguous f32, else `scratch`; finish with write_row.
float* row_out(Tensor& t, int64_t i1, int64_t i2, int64_t i3, float* scratch);
inline float* row_out(Tensor& t, RowIndex r, float* scratch) {
  return row_out(t, r.i1, r.i2, r.i3, scratch);
}
// Stores `src` (t.ne[0] floats) as row (i1, i2, i3); nothing when `src` is
// already that row.
void write_row(Tensor& t, int64_t i1, int64_t i2, int64_t i3, const float* src);
inline void write_row(Tensor& t, RowIndex r, const float* src) {
  write_row(t, r.i1, r.i2, r.i3, src);
}

// Per-thread f32 scratch: `rows` buffers of `n` floats for each of nth
// threads, each buffer on its own cache lines.
size_t scratch_floats(int64_t n);  // n rounded up to a cache line of floats
inline size_t row_work_size(int nth, int rows, int64_t n) {
  return static_cast<size_t>(nth) * static_cast<size_t>(rows) * scratch_floats(n) * sizeof(float);
}
// Buffer `k` (0..rows-1) of this thread.
inline float* thread_row(const OpContext& ctx, int rows, int k, int64_t n) {
  const size_t stride = scratch_floats(n);
  return reinterpret_cast<float*>(ctx.work) +
         (static_cast<size_t>(ctx.ith) * static_cast<size_t>(rows) + static_cast<size_t>(k)) *
             stride;
}

// This thread's share of the rows of a one-input row op: f(index, x, d) fills
// the output row d (n floats) from the input row x, both f32. Needs
// row_work_size(nth, 2, node.ne[0]) of scratch.
template <class F>
void map_rows(Tensor& node, const OpContext& ctx, F f) {
  const Tensor& a = *node.src[0];
  const int64_t n = node.ne[0];
  float* sa = thread_row(ctx, 2, 0, n);
  float* sd = thread_row(ctx, 2, 1, n);
  const Range r = split_rows(node.n_rows(), ctx.ith, ctx.nth);
  for (int64_t row = r.begin; row < r.end; ++row) {
    const RowIndex i = row_index(node, row);
    const float* x = read_row(a, i, sa);
    float* d = row_out(node, i, sd);
    f(i, x, d);
    write_row(node, i, d);
  }
}

// Address of element `flat` (row-major in t's own shape) of a plain-typed tensor.
const uint8_t* flat_element(const Tensor& t, int64_t flat);
inline uint8_t* flat_element(Tensor& t, int64_t flat) {
  return const_cast<uint8_t*>(flat_element(static_cast<const Tensor&>(t), flat));
}

}  // namespace tessera::cpu
