// What the CUDA device computes: supports() is exact (the scheduler and the
// conformance suite rely on it) and compute() queues one node's kernels.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "tessera/core/tensor.h"
#include "tessera/runtime/pool.h"

namespace tessera::cuda {

struct OpContext {
  cudaStream_t stream = nullptr;
  int device = 0;
  int sm_count = 1;
  Pool* pool = nullptr;              // scratch, freed in LIFO order per node
  cublasHandle_t cublas = nullptr;   // bound to `stream`; null until a node needs it
  int* bad_row_id = nullptr;         // host-mapped; GET_ROWS / SET_ROWS set it for a bad id
};

bool supports(const Tensor& node);
// True when computing `node` calls cuBLAS (the stream makes its handle first).
bool needs_cublas(const Tensor& node);
// Queues `node` (a supported op, not a view) on ctx.stream.
void compute(const OpContext& ctx, const Tensor& node);

}  // namespace tessera::cuda
