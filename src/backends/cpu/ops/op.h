// How the CPU backend runs one op: an OpImpl per op kind says whether a node
// is supported (exactly), how much scratch it needs, and computes it in nth
// slots, each taking its share by `ith`. Slots run on whichever threads of
// the pool claim them (possibly several on one thread, one after another),
// so a slot never waits for another: an op that needs all shares of one
// step done before the next declares phases, run one after the other.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "cpu/thread_pool.h"
#include "tessera/core/tensor.h"

namespace tessera::cpu {

struct Kernels;

struct OpContext {
  int ith = 0;
  int nth = 1;
  int phase = 0;
  uint8_t* work = nullptr;  // scratch shared by all slots, work_size() bytes
  size_t work_size = 0;
  const Kernels* kernels = nullptr;  // the device's ISA tier (kernels/kernels.h); null: ref
  // Zero at the start of each phase: slots take work items from it.
  std::atomic<int64_t>* counter = nullptr;
  // The work block already holds this node's converted input (ConvertedInput).
  bool input_ready = false;
};

// An op that converts one input into the start of its work block, in a
// layout fixed by that input, `format` and `copies` alone (MUL_MAT's
// quantized activations: one copy split over the slots in a phase 0 of its
// own, or, for GEMV shapes, one copy per slot made at the start of its only
// phase). A later node with the same input, format and copies may start from
// the kept block: the device then sets OpContext::input_ready, and skips
// phase 0 when the op has more than one phase.
struct ConvertedInput {
  const Tensor* input = nullptr;  // null: no such conversion
  int format = 0;
  int copies = 0;
};

struct OpImpl {
  bool (*supports)(const Tensor& node);
  size_t (*work_size)(const Tensor& node, int nth);  // nullptr: none
  void (*compute)(Tensor& node, const OpContext& ctx);
  // Phases of the node with nth slots on the tier (nullptr: one).
  int (*phases)(const Tensor& node, int nth, const Kernels* kernels) = nullptr;
  // nullptr: phase 0 is never a shareable conversion.
  ConvertedInput (*converted_input)(const Tensor& node, int nth, const Kernels* kernels) = nullptr;
};

// The implementation for node.op; nullptr when the CPU has none.
const OpImpl* find_op(Op op);
// supports_op for the CPU device: find_op and its supports().
bool cpu_supports(const Tensor& node);

// Rows [begin, end) of `n` split evenly over nth threads.
struct Range {
  int64_t begin, end;
};
inline Range split_rows(int64_t n, int ith, int nth) {
  const int64_t per = (n + nth - 1) / nth;
  const int64_t b = per * ith < n ? per * ith : n;
  const int64_t e = b + per < n ? b + per : n;
  return {b, e};
}

inline const uint8_t* element_ptr(const Tensor& t, int64_t i0, int64_t i1, int64_t i2, int64_t i3) {
  return static_cast<const uint8_t*>(t.data) + i0 * static_cast<int64_t>(t.nb[0]) +
         i1 * static_cast<int64_t>(t.nb[1]) + i2 * static_cast<int64_t>(t.nb[2]) +
         i3 * static_cast<int64_t>(t.nb[3]);
}
inline uint8_t* element_ptr(Tensor& t, int64_t i0, int64_t i1, int64_t i2, int64_t i3) {
  return const_cast<uint8_t*>(element_ptr(static_cast<const Tensor&>(t), i0, i1, i2, i3));
}
inline const uint8_t* row_ptr(const Tensor& t, int64_t i1, int64_t i2, int64_t i3) {
  return element_ptr(t, 0, i1, i2, i3);
}
inline uint8_t* row_ptr(Tensor& t, int64_t i1, int64_t i2, int64_t i3) {
  return element_ptr(t, 0, i1, i2, i3);
}

// Reads/writes one element of an F32, F16 or BF16 tensor as float.
float load_float(DType type, const uint8_t* p);
void store_float(DType type, uint8_t* p, float v);
bool is_float_type(DType type);  // F32, F16, BF16

// Converts a row of `n` elements of `type` (rows contiguous in dim 0) to floats.
void row_to_float(DType type, const uint8_t* src, float* dst, int64_t n);

}  // namespace tessera::cpu
