#include "cuda/common.h"

namespace tessera::cuda {

void check(cudaError_t err, int device, std::string_view what) {
  if (err == cudaSuccess) return;
  cudaGetLastError();  // clears the sticky copy of a non-fatal error
  fail(ErrorCategory::kDevice, "[CUDA{}] {}: {} ({})", device, what, cudaGetErrorString(err),
       cudaGetErrorName(err));
}

DeviceScope::DeviceScope(int device) {
  TESSERA_CUDA_CHECK(cudaGetDevice(&previous_), device);
  if (previous_ != device) TESSERA_CUDA_CHECK(cudaSetDevice(device), device);
}

DeviceScope::DeviceScope(int device, std::nothrow_t) {
  if (cudaGetDevice(&previous_) != cudaSuccess) {
    cudaGetLastError();
    previous_ = -1;
    return;
  }
  if (previous_ != device && cudaSetDevice(device) != cudaSuccess) cudaGetLastError();
}

DeviceScope::~DeviceScope() {
  if (previous_ < 0) return;
  int now = -1;
  if (cudaGetDevice(&now) == cudaSuccess && now != previous_) cudaSetDevice(previous_);
}

}  // namespace tessera::cuda
