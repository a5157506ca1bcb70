#include "tessera/runtime/pool.h"

#include <algorithm>
#include <limits>

#include "tessera/core/error.h"

namespace tessera {

size_t pool_round(size_t bytes) {
  if (bytes == 0) return kPoolRounding;
  if (bytes > std::numeric_limits<size_t>::max() - (kPoolRounding - 1)) {
    fail(ErrorCategory::kOutOfMemory, "[pool] request of {} bytes is too large to round", bytes);
  }
  return (bytes + kPoolRounding - 1) / kPoolRounding * kPoolRounding;
}

// ---- BestFitPool -----------------------------------------------------------

BestFitPool::~BestFitPool() {
  for (const PoolBlock& b : owned_) memory_.release(b.ptr, b.size);
}

PoolBlock BestFitPool::alloc(size_t bytes) {
  const size_t size = pool_round(bytes);
  auto best = free_.end();
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    if (it->size < size) continue;
    if (best == free_.end() || it->size < best->size) best = it;
    if (it->size == size) break;  // exact fit: nothing beats it
  }
  if (best != free_.end()) {
    const PoolBlock b = *best;
    free_.erase(best);
    return b;
  }
  const PoolBlock b{memory_.allocate(size), size};
  owned_.push_back(b);
  reserved_ += size;
  return b;
}

void BestFitPool::free(PoolBlock block) {
  const bool ours = std::any_of(owned_.begin(), owned_.end(), [&](const PoolBlock& b) {
    return b.ptr == block.ptr && b.size == block.size;
  });
  TESSERA_CHECK(ours, "[pool {}] freed a block it did not hand out ({} bytes)",
                memory_.device_name(), block.size);
  const bool twice = std::any_of(free_.begin(), free_.end(),
                                 [&](const PoolBlock& b) { return b.ptr == block.ptr; });
  TESSERA_CHECK(!twice, "[pool {}] block freed twice", memory_.device_name());
  free_.push_back(block);
}

// ---- VirtualPool -----------------------------------------------------------

VirtualPool::VirtualPool(VirtualMemory& memory, size_t limit) : memory_(memory), limit_(limit) {
  const size_t g = memory_.granularity();
  TESSERA_CHECK(g > 0 && limit_ >= g, "[pool {}] limit {} below granularity {}",
                memory_.device_name(), limit_, g);
  limit_ = limit_ / g * g;
}

VirtualPool::~VirtualPool() {
  if (base_ == nullptr) return;
  if (committed_ > 0) memory_.decommit(base_, committed_);
  memory_.unreserve(base_, limit_);
}

PoolBlock VirtualPool::alloc(size_t bytes) {
  const size_t size = pool_round(bytes);
  if (size > limit_ - used_) {
    fail(ErrorCategory::kOutOfMemory,
         "[pool {}] found a request for {} bytes with {} of {} in use, expected at most the "
         "pool limit",
         memory_.device_name(), size, used_, limit_);
  }
  if (used_ + size > committed_) {
    const size_t g = memory_.granularity();
    const size_t grow = (used_ + size - committed_ + g - 1) / g * g;
    if (base_ == nullptr) base_ = static_cast<uint8_t*>(memory_.reserve(limit_));
    memory_.commit(base_ + committed_, grow);
    committed_ += grow;
  }
  const PoolBlock b{base_ + used_, size};
  used_ += size;
  return b;
}

void VirtualPool::free(PoolBlock block) {
  TESSERA_CHECK(block.size <= used_ && block.ptr == base_ + (used_ - block.size),
                "[pool {}] free out of LIFO order: block at offset {} of {} bytes, top at {}",
                memory_.device_name(),
                static_cast<const uint8_t*>(block.ptr) - base_, block.size, used_);
  used_ -= block.size;
}

}  // namespace tessera
