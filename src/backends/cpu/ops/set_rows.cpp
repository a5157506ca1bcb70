// SET_ROWS: row (ids[i, i2 % ne2', i3 % ne3'], i2, i3) of the destination (the
// node, a view of src[2]) = row (i, i2, i3) of the f32 values (any element
// stride), stored as the destination's type: F32/F16/BF16 by write_row (any
// element stride), a type with a quantizer by quantize_row (blocks
// contiguous). Other rows are not touched. Ids are i32 or i64; one out of
// [0, R) is an Error. Rows named twice within one (i2, i3) race, as in ggml.
//
// F16 rows (the default KV cache) go through the tier's F16C conversion and
// Q8_0 rows through its activation quantizer, both bit-exact with the scalar
// reference (kernels.h). The ref tier keeps the scalar code: it is the oracle
// the other tiers are held to.
#include <algorithm>
#include <cstddef>
#include <cstring>

#include "cpu/kernels/kernels.h"
#include "cpu/ops/rows.h"
#include "tessera/core/error.h"
#include "tessera/core/half.h"
#include "tessera/core/quants.h"

namespace tessera::cpu {
namespace {

bool supports(const Tensor& node) {
  const Tensor* values = node.src[0];
  const Tensor* ids = node.src[1];
  const Tensor* dst = node.src[2];
  if (values == nullptr || ids == nullptr || dst == nullptr) return false;
  // The rows are written through the node's own descriptor: it must be dst's.
  if (node.type != dst->type || node.ne != dst->ne || node.nb != dst->nb) return false;
  const DTypeInfo& info = dtype_info(node.type);
  const bool dst_ok = is_float_type(node.type) ||
                      (info.quantized && info.has_quantize && node.nb[0] == info.block_bytes);
  const bool values_ok = values->type == DType::kF32 && readable_rows(*values) &&
                         values->ne[0] == node.ne[0] && values->ne[2] == node.ne[2] &&
                         values->ne[3] == node.ne[3];
  const bool ids_ok = (ids->type == DType::kI32 || ids->type == DType::kI64) && ids->ne[3] == 1 &&
                      ids->ne[0] == values->ne[1] && ids->ne[1] >= 1 && ids->ne[2] >= 1 &&
                      node.ne[2] % ids->ne[1] == 0 && node.ne[3] % ids->ne[2] == 0;
  return dst_ok && values_ok && ids_ok;
}

size_t work_size(const Tensor& node, int nth) {
  return row_work_size(nth, 1, node.ne[0]);  // a strided values row, as f32
}

int64_t load_id(const Tensor& ids, int64_t i0, int64_t i1, int64_t i2) {
  const uint8_t* p = element_ptr(ids, i0, i1, i2, 0);
  if (ids.type == DType::kI64) {
    int64_t v;
    std::memcpy(&v, p, sizeof v);
    return v;
  }
  int32_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// A Q8_0 row through the tier's quantizer: its qs and d are the reference's,
// d kept f32 and rounded to f16 here exactly as the reference rounds it. Up
// to kChunk blocks per call, in a stack buffer (BlockQ8 is wider than
// block_q8_0, so it cannot be written in place).
void quantize_q8_0(const Kernels& k, const float* x, uint8_t* dst, int64_t n) {
  constexpr int64_t kChunk = 8;
  BlockQ8 tmp[kChunk];
  const int64_t blocks = n / kQK;
  for (int64_t b = 0; b < blocks; b += kChunk) {
    const int64_t m = std::min(kChunk, blocks - b);
    k.quantize_q8(x + b * kQK, tmp, m * kQK);
    for (int64_t j = 0; j < m; ++j) {
      uint8_t* out = dst + static_cast<size_t>(b + j) * sizeof(block_q8_0);
      const uint16_t d = fp32_to_fp16(tmp[j].d);
      std::memcpy(out + offsetof(block_q8_0, d), &d, sizeof d);
      std::memcpy(out + offsetof(block_q8_0, qs), tmp[j].qs, kQK);
    }
  }
}

void compute(Tensor& node, const OpContext& ctx) {
  const Tensor& values = *node.src[0];
  const Tensor& ids = *node.src[1];
  const int64_t n = node.ne[0];
  float* scratch = thread_row(ctx, 1, 0, n);
  const bool plain = is_float_type(node.type);
  const Kernels* fast =
      ctx.kernels != nullptr && ctx.kernels->isa != Isa::kRef && ctx.kernels->quantize_q8 != nullptr
          ? ctx.kernels
          : nullptr;
  const bool q8 = node.type == DType::kQ8_0 && fast != nullptr;
  // F16 rows with contiguous elements (the KV cache) through the tier's F16C.
  const bool f16 = node.type == DType::kF16 && node.nb[0] == sizeof(uint16_t) && fast != nullptr &&
                   fast->to_f16 != nullptr;
  const Range r = split_rows(values.n_rows(), ctx.ith, ctx.nth);
  for (int64_t flat = r.begin; flat < r.end; ++flat) {
    const RowIndex s = row_index(values, flat);
    const int64_t j2 = s.i2 % ids.ne[1], j3 = s.i3 % ids.ne[2];
    const int64_t row = load_id(ids, s.i1, j2, j3);
    if (row < 0 || row >= node.ne[1]) {
      fail(ErrorCategory::kInvalidArgument, "[SET_ROWS] row id {} at [{}, {}, {}], expected 0..{}",
           row, s.i1, j2, j3, node.ne[1] - 1);
    }
    const float* x = read_row(values, s, scratch);
    if (f16) {
      fast->to_f16(x, reinterpret_cast<uint16_t*>(row_ptr(node, row, s.i2, s.i3)), n);
    } else if (plain) {
      write_row(node, row, s.i2, s.i3, x);
    } else if (q8) {
      quantize_q8_0(*fast, x, row_ptr(node, row, s.i2, s.i3), n);
    } else {
      quantize_row(node.type, x, row_ptr(node, row, s.i2, s.i3), n);
    }
  }
}

}  // namespace

extern const OpImpl kSetRowsOp{supports, work_size, compute};

}  // namespace tessera::cpu
