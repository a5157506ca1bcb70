// Host memory for the CPU device: plain aligned allocations, and reserved
// address space committed in page or huge-page chunks (for VirtualPool).
#pragma once

#include <cstddef>
#include <string>

#include "tessera/runtime/pool.h"

namespace tessera::host {

// Bytes the kernel says are available now (MemAvailable) and in total.
size_t host_free_bytes();
size_t host_total_bytes();

// Anonymous memory of `bytes`, aligned to `alignment`; 2 MiB and larger
// requests ask for transparent huge pages. Throws Error(kOutOfMemory) naming
// `device`, the bytes asked and the bytes free.
void* host_allocate(size_t bytes, size_t alignment, std::string_view device);
void host_release(void* ptr, size_t bytes);

class HostRawMemory final : public RawMemory {
 public:
  explicit HostRawMemory(std::string device) : device_(std::move(device)) {}
  std::string_view device_name() const override { return device_; }
  void* allocate(size_t bytes) override;
  void release(void* ptr, size_t bytes) override;

 private:
  std::string device_;
};

class HostVirtualMemory final : public VirtualMemory {
 public:
  // granularity: the page size, or 2 MiB for huge-page chunks.
  HostVirtualMemory(std::string device, size_t granularity);
  std::string_view device_name() const override { return device_; }
  size_t granularity() const override { return granularity_; }
  void* reserve(size_t bytes) override;
  void commit(void* addr, size_t bytes) override;
  void decommit(void* addr, size_t bytes) override;
  void unreserve(void* addr, size_t bytes) override;

 private:
  std::string device_;
  size_t granularity_;
};

size_t page_size();
inline constexpr size_t kHugePageSize = 2u << 20;

}  // namespace tessera::host
