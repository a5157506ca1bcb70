// cuBLAS, opened with dlopen the first time a GPU needs it. Linking it would
// map ~600 MB of libraries into every tessera process, GPU or not (every
// test binary pays that at start); a machine without a GPU never opens it.
#pragma once

#include <cublas_v2.h>

#include <string>

namespace tessera::cuda {

struct Cublas {
  decltype(&cublasCreate_v2) create = nullptr;
  decltype(&cublasDestroy_v2) destroy = nullptr;
  decltype(&cublasSetStream_v2) set_stream = nullptr;
  decltype(&cublasSetWorkspace_v2) set_workspace = nullptr;
  decltype(&cublasSetMathMode) set_math_mode = nullptr;
  // cublasGemmEx is overloaded in C++ (a legacy cudaDataType compute type): the C one.
  cublasStatus_t (*gemm_ex)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
                            const void*, const void*, cudaDataType, int, const void*,
                            cudaDataType, int, const void*, void*, cudaDataType, int,
                            cublasComputeType_t, cublasGemmAlgo_t) = nullptr;
  decltype(&cublasGetStatusString) status_string = nullptr;
};

// The loaded library; throws Error(kUnsupported) naming the file and dlerror()
// when it cannot be opened or lacks a function.
const Cublas& cublas();

// Throws Error(kDevice) "[CUDA<dev>] <what>: <cuBLAS's message>" unless ok.
void check_cublas(cublasStatus_t status, int device, const char* what);

}  // namespace tessera::cuda
