// Memory pools for per-op scratch memory, written once over a small raw
// memory interface that each device implements (CPU: reserved address space;
// CUDA: the driver's virtual memory API).
//
// Requests are rounded up to 128 bytes; a zero request becomes 128. alloc
// returns the block and its real size, which free must be given back.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace tessera {

inline constexpr size_t kPoolRounding = 128;
size_t pool_round(size_t bytes);  // the normalization above

// Plain allocations of device memory.
class RawMemory {
 public:
  virtual ~RawMemory() = default;
  virtual std::string_view device_name() const = 0;
  // Throws Error(kOutOfMemory) naming the device, bytes asked and bytes free.
  virtual void* allocate(size_t bytes) = 0;
  virtual void release(void* ptr, size_t bytes) = 0;
};

// Address space reserved once and backed by physical memory chunk by chunk.
class VirtualMemory {
 public:
  virtual ~VirtualMemory() = default;
  virtual std::string_view device_name() const = 0;
  virtual size_t granularity() const = 0;  // commit sizes are multiples of this
  // Reserves `bytes` of address space with no memory behind it.
  virtual void* reserve(size_t bytes) = 0;
  // Backs [addr, addr + bytes) with memory; bytes a multiple of granularity().
  // Throws Error(kOutOfMemory) when the device has no more.
  virtual void commit(void* addr, size_t bytes) = 0;
  virtual void decommit(void* addr, size_t bytes) = 0;
  virtual void unreserve(void* addr, size_t bytes) = 0;
};

struct PoolBlock {
  void* ptr = nullptr;
  size_t size = 0;  // what free() needs back
};

class Pool {
 public:
  virtual ~Pool() = default;
  virtual PoolBlock alloc(size_t bytes) = 0;
  virtual void free(PoolBlock block) = 0;
  virtual size_t reserved_bytes() const = 0;  // memory taken from the device
};

// Keeps freed blocks and hands out the smallest one that fits; asks the device
// for exactly the rounded size when none does. Memory goes back to the device
// only when the pool dies.
class BestFitPool final : public Pool {
 public:
  explicit BestFitPool(RawMemory& memory) : memory_(memory) {}
  ~BestFitPool() override;
  BestFitPool(const BestFitPool&) = delete;
  BestFitPool& operator=(const BestFitPool&) = delete;

  PoolBlock alloc(size_t bytes) override;
  void free(PoolBlock block) override;
  size_t reserved_bytes() const override { return reserved_; }
  size_t cached_blocks() const { return free_.size(); }

 private:
  RawMemory& memory_;
  std::vector<PoolBlock> free_;
  std::vector<PoolBlock> owned_;
  size_t reserved_ = 0;
};

// A stack over one reserved range: allocations bump the top, frees must come
// in reverse order (LIFO), and chunks rounded to the granularity are
// committed at the end as it grows. Exceeding `limit` is an Error.
class VirtualPool final : public Pool {
 public:
  VirtualPool(VirtualMemory& memory, size_t limit);
  ~VirtualPool() override;
  VirtualPool(const VirtualPool&) = delete;
  VirtualPool& operator=(const VirtualPool&) = delete;

  PoolBlock alloc(size_t bytes) override;
  void free(PoolBlock block) override;
  size_t reserved_bytes() const override { return committed_; }
  size_t used_bytes() const { return used_; }
  size_t limit() const { return limit_; }

 private:
  VirtualMemory& memory_;
  size_t limit_;
  uint8_t* base_ = nullptr;
  size_t committed_ = 0;
  size_t used_ = 0;
};

}  // namespace tessera
