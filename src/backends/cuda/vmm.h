// Device memory for the shared pools (tessera/pool.h): plain cudaMalloc
// allocations for the best-fit pool, and the driver's virtual memory API
// (reserve an address range, map physical chunks into it) for the virtual
// pool. The driver's functions are looked up through the runtime
// (cudaGetDriverEntryPointByVersion), so nothing links libcuda itself and a
// machine without a driver still starts.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "tessera/runtime/pool.h"

namespace tessera::cuda {

class CudaRawMemory final : public RawMemory {
 public:
  CudaRawMemory(int device, std::string name) : device_(device), name_(std::move(name)) {}
  std::string_view device_name() const override { return name_; }
  void* allocate(size_t bytes) override;
  void release(void* ptr, size_t bytes) override;

 private:
  int device_;
  std::string name_;
};

class CudaVirtualMemory final : public VirtualMemory {
 public:
  // Null when the device or driver has no virtual memory management.
  static std::unique_ptr<CudaVirtualMemory> create(int device, std::string name);

  std::string_view device_name() const override { return name_; }
  size_t granularity() const override { return granularity_; }
  void* reserve(size_t bytes) override;
  void commit(void* addr, size_t bytes) override;
  void decommit(void* addr, size_t bytes) override;
  void unreserve(void* addr, size_t bytes) override;

 private:
  CudaVirtualMemory(int device, std::string name, size_t granularity)
      : device_(device), name_(std::move(name)), granularity_(granularity) {}

  int device_;
  std::string name_;
  size_t granularity_;
};

// Bytes the device has free, for messages.
size_t device_free_bytes(int device);

}  // namespace tessera::cuda
