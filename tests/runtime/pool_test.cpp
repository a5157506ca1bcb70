// The two scratch pools over counting fakes (to see every byte come back) and
// over the CPU's real reserved address space.
#include "tessera/runtime/pool.h"

#include <gtest/gtest.h>

#include <cstring>
#include <map>

#include "tessera/core/error.h"
#include "tessera/runtime/host_memory.h"

namespace tessera {
namespace {

// Raw memory that counts what is outstanding.
class CountingMemory final : public RawMemory {
 public:
  std::string_view device_name() const override { return "FAKE0"; }
  void* allocate(size_t bytes) override {
    allocations += 1;
    void* p = ::operator new(bytes);
    live[p] = bytes;
    return p;
  }
  void release(void* ptr, size_t bytes) override {
    EXPECT_EQ(live.at(ptr), bytes);
    live.erase(ptr);
    ::operator delete(ptr);
  }
  int allocations = 0;
  std::map<void*, size_t> live;
};

TEST(PoolTest, RoundsTo128AndZeroBecomes128) {
  EXPECT_EQ(pool_round(0), 128u);
  EXPECT_EQ(pool_round(1), 128u);
  EXPECT_EQ(pool_round(128), 128u);
  EXPECT_EQ(pool_round(129), 256u);
  EXPECT_THROW(pool_round(SIZE_MAX - 3), Error);
}

TEST(BestFitPoolTest, ReusesFreedBlocksBestFitFirst) {
  CountingMemory mem;
  {
    BestFitPool pool(mem);
    PoolBlock a = pool.alloc(1000);  // 1024
    PoolBlock b = pool.alloc(300);   // 384
    EXPECT_EQ(a.size, 1024u);
    EXPECT_EQ(b.size, 384u);
    pool.free(a);
    pool.free(b);
    // 200 fits both cached blocks; the smaller (384) is the best fit.
    PoolBlock c = pool.alloc(200);
    EXPECT_EQ(c.ptr, b.ptr);
    EXPECT_EQ(c.size, 384u);
    PoolBlock d = pool.alloc(1024);  // exact fit for a
    EXPECT_EQ(d.ptr, a.ptr);
    EXPECT_EQ(mem.allocations, 2);
    PoolBlock e = pool.alloc(2000);  // nothing cached fits: a new block of exactly 2048
    EXPECT_EQ(e.size, 2048u);
    EXPECT_EQ(mem.allocations, 3);
    EXPECT_EQ(pool.reserved_bytes(), 1024u + 384u + 2048u);
    pool.free(c);
    pool.free(d);
    pool.free(e);
    EXPECT_EQ(pool.cached_blocks(), 3u);
  }
  EXPECT_TRUE(mem.live.empty()) << "pool leaked blocks";
}

TEST(BestFitPoolTest, FreeingForeignOrTwiceIsCaught) {
  CountingMemory mem;
  BestFitPool pool(mem);
  PoolBlock a = pool.alloc(10);
  int local = 0;
  EXPECT_THROW(pool.free(PoolBlock{&local, 128}), Error);
  pool.free(a);
  EXPECT_THROW(pool.free(a), Error);
}

// Address space that counts commits, over real reserved pages.
class CountingVirtual final : public VirtualMemory {
 public:
  explicit CountingVirtual(size_t g) : host_("FAKE0", g) {}
  std::string_view device_name() const override { return "FAKE0"; }
  size_t granularity() const override { return host_.granularity(); }
  void* reserve(size_t bytes) override {
    reserves += 1;
    return host_.reserve(bytes);
  }
  void commit(void* addr, size_t bytes) override {
    commits += 1;
    committed += bytes;
    host_.commit(addr, bytes);
  }
  void decommit(void* addr, size_t bytes) override {
    committed -= bytes;
    host_.decommit(addr, bytes);
  }
  void unreserve(void* addr, size_t bytes) override {
    unreserved = true;
    host_.unreserve(addr, bytes);
  }
  host::HostVirtualMemory host_;
  int reserves = 0, commits = 0;
  size_t committed = 0;
  bool unreserved = false;
};

TEST(VirtualPoolTest, GrowsByGranularityChunksAtTheEnd) {
  const size_t g = host::page_size();
  CountingVirtual vm(g);
  {
    VirtualPool pool(vm, 64 * g);
    std::vector<PoolBlock> blocks;
    // Many small blocks: one reservation, commits only when the top passes a chunk.
    for (int i = 0; i < 100; ++i) blocks.push_back(pool.alloc(g / 3));
    EXPECT_EQ(vm.reserves, 1);
    const size_t used = 100 * pool_round(g / 3);
    EXPECT_EQ(pool.used_bytes(), used);
    EXPECT_EQ(vm.committed, (used + g - 1) / g * g);
    EXPECT_GT(vm.commits, 1);
    // Contiguous stack: each block starts where the last ended, and is writable.
    for (size_t i = 1; i < blocks.size(); ++i) {
      EXPECT_EQ(static_cast<uint8_t*>(blocks[i].ptr),
                static_cast<uint8_t*>(blocks[i - 1].ptr) + blocks[i - 1].size);
      std::memset(blocks[i].ptr, 0xab, blocks[i].size);
    }
    // A block larger than one chunk grows by a rounded multiple.
    PoolBlock big = pool.alloc(5 * g + 1);
    std::memset(big.ptr, 1, big.size);
    pool.free(big);
    for (auto it = blocks.rbegin(); it != blocks.rend(); ++it) pool.free(*it);
    EXPECT_EQ(pool.used_bytes(), 0u);
    // Memory already committed is reused, not committed again.
    const int commits = vm.commits;
    PoolBlock again = pool.alloc(g);
    EXPECT_EQ(vm.commits, commits);
    pool.free(again);
  }
  EXPECT_EQ(vm.committed, 0u) << "pool did not decommit";
  EXPECT_TRUE(vm.unreserved) << "pool did not release its range";
}

TEST(VirtualPoolTest, OutOfOrderFreeIsCaught) {
  CountingVirtual vm(host::page_size());
  VirtualPool pool(vm, 16 * host::page_size());
  PoolBlock a = pool.alloc(100);
  PoolBlock b = pool.alloc(100);
  EXPECT_THROW(pool.free(a), Error);  // b is on top
  pool.free(b);
  pool.free(a);
}

TEST(VirtualPoolTest, LimitIsAnErrorNamingTheDevice) {
  const size_t g = host::page_size();
  CountingVirtual vm(g);
  VirtualPool pool(vm, 4 * g);
  PoolBlock a = pool.alloc(3 * g);
  try {
    pool.alloc(2 * g);
    FAIL() << "allocation past the limit succeeded";
  } catch (const Error& e) {
    EXPECT_EQ(e.category(), ErrorCategory::kOutOfMemory);
    EXPECT_NE(std::string(e.what()).find("FAKE0"), std::string::npos) << e.what();
  }
  pool.free(a);  // the pool still works after the refusal
  PoolBlock b = pool.alloc(4 * g);
  pool.free(b);
}

TEST(VirtualPoolTest, HugePageGranularity) {
  CountingVirtual vm(host::kHugePageSize);
  VirtualPool pool(vm, 4 * host::kHugePageSize);
  PoolBlock a = pool.alloc(1000);
  EXPECT_EQ(vm.committed, host::kHugePageSize);
  std::memset(a.ptr, 7, a.size);
  pool.free(a);
}

}  // namespace
}  // namespace tessera
