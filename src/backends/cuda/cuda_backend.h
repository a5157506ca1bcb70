// The CUDA backend: one device per GPU ("CUDA0", ...), each with device and
// pinned-host buffer types, streams that own a scratch pool (virtual memory
// by default, best-fit with TESSERA_CUDA_POOL=bestfit) and a cuBLAS handle,
// events, and CUDA graphs for plans replayed token after token. A machine
// without a GPU (or driver) has a CUDA backend with zero devices.
#pragma once

#include <cuda_runtime_api.h>

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "cuda/buffers.h"
#include "tessera/backends/ceilings.h"
#include "tessera/runtime/device.h"
#include "tessera/runtime/stream.h"

namespace tessera::cuda {

class CudaBackend;

class CudaDevice final : public Device {
 public:
  CudaDevice(CudaBackend& backend, int index);
  ~CudaDevice() override;
  CudaDevice(const CudaDevice&) = delete;
  CudaDevice& operator=(const CudaDevice&) = delete;

  std::string_view name() const override { return name_; }
  std::string_view description() const override { return description_; }
  DeviceType type() const override { return DeviceType::kGpu; }
  MemoryInfo memory() const override;
  DeviceCaps caps() const override;
  Backend& backend() const override;
  std::vector<std::string> notes() const override;

  std::unique_ptr<Stream> make_stream() override;
  BufferType& buffer_type() override { return buffer_type_; }
  BufferType& weights_buffer_type() override { return weights_type_; }
  BufferType* host_buffer_type() override { return pinned_ ? &host_type_ : nullptr; }

  bool supports_op(const Tensor& node) const override;
  bool supports_buffer_type(const BufferType& type) const override;
  std::unique_ptr<Event> make_event() override;

  int index() const { return index_; }
  int sm_count() const { return sm_count_; }
  size_t total_memory() const { return total_; }

  // Synchronous transfers for buffers (set/get/clear/copy): queued on the
  // device's own non-blocking stream and waited for. Never the legacy
  // default stream, whose implicit synchronization would break a CUDA graph
  // being captured on a compute stream in another thread.
  void copy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind);
  void copy_from_peer(void* dst, const void* src, int src_device, size_t bytes);
  void fill(void* dst, int value, size_t bytes);

 private:
  CudaBackend& backend_;
  int index_;
  std::string name_;
  std::string description_;
  int sm_count_ = 1;
  size_t total_ = 0;
  bool pinned_ = true;
  cudaStream_t transfer_stream();  // made on first use, under transfer_mutex_
  cudaStream_t transfer_ = nullptr;
  std::mutex transfer_mutex_;  // one synchronous transfer at a time
  CudaBufferType buffer_type_;
  CudaBufferType weights_type_;
  CudaHostBufferType host_type_;
};

class CudaBackend final : public Backend {
 public:
  // GPUs that fail to start are left out (their reasons joined in
  // absent_reason when none starts); the runtime carries on without them.
  CudaBackend();
  std::string_view name() const override { return "CUDA"; }
  size_t device_count() const override { return devices_.size(); }
  // Why there are no devices ("" when there are): no driver, no GPU, ...
  const std::string& absent_reason() const { return absent_reason_; }
  // kNoDevicesReasonProc (tessera/device.h) and kMeasureCeilingsProc
  // (tessera/ceilings.h: copy bandwidth as read_gbs, the f16 GEMM rate as
  // fma_gflops and int8_gops).
  void* proc_address(std::string_view name) override;

 protected:
  Device& device_at(size_t i) override { return *devices_[i]; }

 private:
  std::vector<std::unique_ptr<CudaDevice>> devices_;
  std::string absent_reason_;
};

// Copy bandwidth and f16 GEMM rate of `device`, measured now (ceilings.cpp).
Ceilings measure_gpu_ceilings(CudaDevice& device);

}  // namespace tessera::cuda
