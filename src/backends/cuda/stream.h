// A CUDA stream: copies and kernels queued in order on one GPU, a scratch
// pool for the ops' temporaries, and a cuBLAS handle made when first needed.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <memory>

#include "cuda/vmm.h"
#include "tessera/runtime/pool.h"
#include "tessera/runtime/stream.h"

namespace tessera::cuda {

class CudaDevice;

class CudaEvent final : public Event {
 public:
  explicit CudaEvent(CudaDevice& device);
  ~CudaEvent() override;
  CudaEvent(const CudaEvent&) = delete;
  CudaEvent& operator=(const CudaEvent&) = delete;
  Device& device() const override;
  void synchronize() override;
  cudaEvent_t get() const { return event_; }

 private:
  CudaDevice& device_;
  cudaEvent_t event_ = nullptr;
};

// Which pool the streams use: TESSERA_CUDA_POOL=bestfit picks the best-fit
// pool, else the virtual-memory pool where the device has VMM.
enum class PoolKind { kVirtual, kBestFit };
PoolKind pool_kind_from_env();

class CudaStream final : public Stream {
 public:
  explicit CudaStream(CudaDevice& device);
  ~CudaStream() override;
  CudaStream(const CudaStream&) = delete;
  CudaStream& operator=(const CudaStream&) = delete;

  Device& device() const override;
  void set_tensor_async(Tensor& t, const void* src, size_t offset, size_t size) override;
  void get_tensor_async(const Tensor& t, void* dst, size_t offset, size_t size) override;
  bool copy_tensor_async(const Tensor& src, Tensor& dst) override;
  void synchronize() override;
  void compute(std::span<Tensor* const> nodes) override;
  // A CUDA graph of the nodes, captured on their second run (the first
  // grows the pool to its size), when TESSERA_CUDA_GRAPHS is not 0 and
  // the nodes are a decode step (no matmul of more than 8 columns).
  std::unique_ptr<StreamGraph> prepare(std::span<Tensor* const> nodes) override;
  void compute(StreamGraph& handle, std::span<Tensor* const> nodes) override;
  void record(Event& event) override;
  void wait(Event& event) override;

  cudaStream_t get() const { return stream_; }
  const Pool& pool() const { return *pool_; }
  PoolKind pool_kind() const { return pool_kind_; }
  int graphs_launched() const { return graphs_launched_; }

 private:
  void run(std::span<Tensor* const> nodes);
  void make_cublas();

  CudaDevice& device_;
  cudaStream_t stream_ = nullptr;
  std::unique_ptr<RawMemory> raw_;
  std::unique_ptr<CudaVirtualMemory> virtual_;
  std::unique_ptr<Pool> pool_;
  PoolKind pool_kind_ = PoolKind::kVirtual;
  cublasHandle_t cublas_ = nullptr;
  void* cublas_workspace_ = nullptr;
  int* bad_row_id_ = nullptr;  // host-mapped flag the row kernels set (ops.h)
  int graphs_launched_ = 0;
};

}  // namespace tessera::cuda
