#include "cuda/cuda_backend.h"

#include <cuda_runtime_api.h>

#include <cstdlib>

#include "cuda/common.h"
#include "cuda/cublas_lib.h"
#include "cuda/ops/launch.h"
#include "cuda/ops/ops.h"
#include "cuda/stream.h"
#include "tessera/core/error.h"

namespace tessera::cuda {
namespace {

bool pinned_wanted() {
  const char* v = std::getenv("TESSERA_CUDA_NO_PINNED");
  return v == nullptr || *v == '\0' || std::string_view(v) == "0";
}

}  // namespace

CudaDevice::CudaDevice(CudaBackend& backend, int index)
    : backend_(backend),
      index_(index),
      name_(fmt::format("CUDA{}", index)),
      pinned_(pinned_wanted()),
      buffer_type_(*this, name_, /*split=*/false),
      weights_type_(*this, name_ + "_Split", /*split=*/true),
      host_type_(*this, name_ + "_Host") {
  cudaDeviceProp prop{};
  TESSERA_CUDA_CHECK(cudaGetDeviceProperties(&prop, index), index);
  description_ = prop.name;
  sm_count_ = prop.multiProcessorCount > 0 ? prop.multiProcessorCount : 1;
  total_ = prop.totalGlobalMem;
}

std::vector<std::string> CudaDevice::notes() const {
  try {
    (void)cublas();
    return {};
  } catch (const Error& e) {
    return {fmt::format("cuBLAS cannot be opened ({}): batches of more than {} tokens, and f16 / "
                        "f32 / Q4_0 / Q8_0 weights outside the decode kernels, run on the CPU",
                        e.what(), k::kMaxMmvColumns)};
  }
}

CudaDevice::~CudaDevice() {
  if (transfer_ != nullptr) {
    DeviceScope scope(index_, std::nothrow);
    cudaStreamDestroy(transfer_);
  }
}

cudaStream_t CudaDevice::transfer_stream() {
  if (transfer_ == nullptr) {
    TESSERA_CUDA_CHECK(cudaStreamCreateWithFlags(&transfer_, cudaStreamNonBlocking), index_);
  }
  return transfer_;
}

void CudaDevice::copy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
  DeviceScope scope(index_);
  std::lock_guard lock(transfer_mutex_);
  const cudaStream_t t = transfer_stream();
  TESSERA_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, kind, t), index_);
  TESSERA_CUDA_CHECK(cudaStreamSynchronize(t), index_);
}

void CudaDevice::copy_from_peer(void* dst, const void* src, int src_device, size_t bytes) {
  DeviceScope scope(index_);
  std::lock_guard lock(transfer_mutex_);
  const cudaStream_t t = transfer_stream();
  TESSERA_CUDA_CHECK(cudaMemcpyPeerAsync(dst, index_, src, src_device, bytes, t), index_);
  TESSERA_CUDA_CHECK(cudaStreamSynchronize(t), index_);
}

void CudaDevice::fill(void* dst, int value, size_t bytes) {
  DeviceScope scope(index_);
  std::lock_guard lock(transfer_mutex_);
  const cudaStream_t t = transfer_stream();
  TESSERA_CUDA_CHECK(cudaMemsetAsync(dst, value, bytes, t), index_);
  TESSERA_CUDA_CHECK(cudaStreamSynchronize(t), index_);
}

MemoryInfo CudaDevice::memory() const {
  DeviceScope scope(index_);
  size_t free = 0, total = 0;
  TESSERA_CUDA_CHECK(cudaMemGetInfo(&free, &total), index_);
  return {free, total};
}

DeviceCaps CudaDevice::caps() const {
  return {.async = true, .host_buffer = pinned_, .buffer_from_host_ptr = false, .events = true};
}

Backend& CudaDevice::backend() const { return backend_; }

std::unique_ptr<Stream> CudaDevice::make_stream() { return std::make_unique<CudaStream>(*this); }

bool CudaDevice::supports_op(const Tensor& node) const { return cuda::supports(node); }

bool CudaDevice::supports_buffer_type(const BufferType& type) const {
  const auto* t = dynamic_cast<const CudaBufferType*>(&type);
  return t != nullptr && &t->device() == this;
}

std::unique_ptr<Event> CudaDevice::make_event() { return std::make_unique<CudaEvent>(*this); }

void* CudaBackend::proc_address(std::string_view name) {
  if (name == kNoDevicesReasonProc) {
    static constexpr NoDevicesReasonFn fn = [](Backend& b) {
      return dynamic_cast<CudaBackend&>(b).absent_reason().c_str();
    };
    return reinterpret_cast<void*>(fn);
  }
  if (name == kMeasureCeilingsProc) {
    static constexpr MeasureCeilingsFn fn = [](Device& d, int /*threads*/) {
      return measure_gpu_ceilings(dynamic_cast<CudaDevice&>(d));
    };
    return reinterpret_cast<void*>(fn);
  }
  return nullptr;
}

CudaBackend::CudaBackend() {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    // No driver, or no GPU: the backend is there with no devices.
    absent_reason_ = fmt::format("no usable CUDA driver or GPU: {}", cudaGetErrorString(err));
    cudaGetLastError();
    return;
  }
  if (count == 0) absent_reason_ = "no CUDA GPU found";
  std::string failures;
  for (int i = 0; i < count; ++i) {
    try {
      devices_.push_back(std::make_unique<CudaDevice>(*this, i));
    } catch (const Error& e) {
      failures += fmt::format("{}{}", failures.empty() ? "" : "; ", e.what());
    }
  }
  if (devices_.empty() && !failures.empty()) absent_reason_ = failures;
}

}  // namespace tessera::cuda
