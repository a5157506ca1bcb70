// Host-side helpers shared by the CUDA backend's files: runtime-API calls
// checked into tessera::Error, and the device made current for a scope.
#pragma once

#include <cuda_runtime_api.h>

#include <new>
#include <string_view>

#include "tessera/core/error.h"

namespace tessera::cuda {

// Throws Error(kDevice) "[CUDA<dev>] <what>: <CUDA's message>" when err is not cudaSuccess.
void check(cudaError_t err, int device, std::string_view what);

#define TESSERA_CUDA_CHECK(call, device) ::tessera::cuda::check((call), (device), #call)

// Makes `device` current for the calls in this scope (CUDA's current device
// is per host thread; one process may drive several GPUs).
class DeviceScope {
 public:
  explicit DeviceScope(int device);
  // For destructors: errors (a runtime that is unloading, a dead context)
  // are ignored instead of thrown.
  DeviceScope(int device, std::nothrow_t);
  ~DeviceScope();
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

 private:
  int previous_ = -1;
};

}  // namespace tessera::cuda
