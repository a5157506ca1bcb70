#include "tessera/runtime/host_memory.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>

#include "tessera/core/error.h"

namespace tessera::host {
namespace {

size_t meminfo_bytes(std::string_view key) {
  std::ifstream in("/proc/meminfo");
  std::string name;
  size_t kib = 0;
  std::string unit;
  while (in >> name >> kib) {
    std::getline(in, unit);
    if (name.size() == key.size() + 1 && name.starts_with(key)) return kib * 1024;
  }
  return 0;
}

[[noreturn]] void out_of_memory(std::string_view device, size_t bytes, const char* what) {
  fail(ErrorCategory::kOutOfMemory,
       "[device {}] {} of {} bytes failed ({}), {} bytes free", device, what, bytes,
       std::strerror(errno), host_free_bytes());
}

}  // namespace

size_t host_free_bytes() { return meminfo_bytes("MemAvailable"); }
size_t host_total_bytes() { return meminfo_bytes("MemTotal"); }

size_t page_size() {
  static const size_t size = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return size;
}

// Below this, the C allocator; from it on, whole pages from the kernel (which
// can be huge pages and go straight back to the system when freed).
constexpr size_t kMmapThreshold = 1u << 20;

void* host_allocate(size_t bytes, size_t alignment, std::string_view device) {
  if (bytes == 0) bytes = 1;
  TESSERA_CHECK(alignment <= page_size(), "alignment {} above the page size", alignment);
  if (bytes < kMmapThreshold) {
    const size_t rounded = (bytes + alignment - 1) / alignment * alignment;
    void* p = std::aligned_alloc(alignment, rounded);
    if (p == nullptr) out_of_memory(device, bytes, "allocation");
    return p;
  }
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) out_of_memory(device, bytes, "allocation");
  if (bytes >= kHugePageSize) madvise(p, bytes, MADV_HUGEPAGE);
  return p;
}

void host_release(void* ptr, size_t bytes) {
  if (ptr == nullptr) return;
  if (bytes < kMmapThreshold) {
    std::free(ptr);
  } else {
    munmap(ptr, bytes);
  }
}

void* HostRawMemory::allocate(size_t bytes) { return host_allocate(bytes, 64, device_); }
void HostRawMemory::release(void* ptr, size_t bytes) { host_release(ptr, bytes); }

HostVirtualMemory::HostVirtualMemory(std::string device, size_t granularity)
    : device_(std::move(device)), granularity_(granularity) {
  TESSERA_CHECK(granularity_ > 0 && granularity_ % page_size() == 0,
                "granularity {} is not a multiple of the page size", granularity_);
}

void* HostVirtualMemory::reserve(size_t bytes) {
  // No access and no swap reservation: address space only.
  void* p = mmap(nullptr, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) out_of_memory(device_, bytes, "address-space reservation");
  return p;
}

void HostVirtualMemory::commit(void* addr, size_t bytes) {
  TESSERA_CHECK(bytes % granularity_ == 0);
  if (mprotect(addr, bytes, PROT_READ | PROT_WRITE) != 0) out_of_memory(device_, bytes, "commit");
  if (granularity_ >= kHugePageSize) madvise(addr, bytes, MADV_HUGEPAGE);
}

void HostVirtualMemory::decommit(void* addr, size_t bytes) {
  madvise(addr, bytes, MADV_DONTNEED);  // give the pages back
  mprotect(addr, bytes, PROT_NONE);
}

void HostVirtualMemory::unreserve(void* addr, size_t bytes) { munmap(addr, bytes); }

}  // namespace tessera::host
