// What MUL_MAT and MUL_MAT_ID share: the kernel a weight layout takes, the
// activation formats it reads, and where a block of weight rows starts.
#pragma once

#include <cstddef>
#include <cstdint>

#include "cpu/kernels/kernels.h"
#include "tessera/core/tensor.h"

namespace tessera::cpu::matmul {

inline constexpr size_t kLine = 64;             // keeps per-thread scratch on its own cache lines
inline constexpr int64_t kGemvCols = 8;         // up to this many columns: GEMV-like
inline constexpr int64_t kGemvRunsPerSlot = 4;  // GEMV: runs of rows per slot, for balance ...
inline constexpr int64_t kGemvMinRows = 64;     // ... each long enough to stream (Q4_0, K 2048: 72 KB)
inline constexpr int64_t kChunkRows = 64;       // GEMM chunk: 4 panels ...
inline constexpr int64_t kChunkCols = 64;       // ... by 64 columns (Q4_0, K 4096: 147 KB + 320 KB)
static_assert(kChunkCols % kActGroup == 0, "a chunk starts at a kF32Groups group");

inline size_t round_up(size_t v, size_t to) {
  return (v + to - 1) / to * to;
}

// The tier's kernel for w's type and layout; null when it has none (then the
// op's scalar reference runs).
const MatKernel* fast_kernel(const Kernels* k, const Tensor& w);

// The format the kernels read w's activations in, on a tier that has one.
ActFormat act_format_for(DType wt);

// Bytes of one converted activation column of k elements (kF32: 0, read in place).
size_t act_bytes(ActFormat act, int64_t k);

// MatArgs::w and w_stride for rows [r0, ...) of matrix (i2, i3) of w.
void set_weight_rows(const Tensor& w, int64_t r0, int64_t i2, int64_t i3, MatArgs& a);

// The rows and columns of one GEMM chunk the kernel mk takes.
inline int64_t gemm_rows(const MatKernel& mk) {
  return mk.gemm_rows > 0 ? mk.gemm_rows : kChunkRows;
}
inline int64_t gemm_cols(const MatKernel& mk) {
  return mk.gemm_cols > 0 ? mk.gemm_cols : kChunkCols;
}

}  // namespace tessera::cpu::matmul
