// A steady decode loop allocates nothing: every step of a shape seen before
// reuses its plan (graph, splits, memory), writes the inputs and replays it.
// Global operator new is counted while armed; the first allocation's call
// stack is printed, so a regression names the line that allocates.
#include <execinfo.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <new>

#include "backends/cpu/cpu_backend.h"
#include "tessera/backends/builtin.h"
#include "tessera/engine/engine.h"
#include "test_data.h"

// GCC pairs the replaced operator delete with std::allocator's inlined new
// and warns; both go through malloc/free here.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"

namespace {

std::atomic<bool> g_armed{false};
std::atomic<long> g_count{0};

void count_allocation() {
  if (!g_armed.load(std::memory_order_relaxed)) return;
  if (g_count.fetch_add(1) == 0) {
    g_armed = false;  // backtrace() may allocate
    void* frames[32];
    const int n = backtrace(frames, 32);
    static const char kHead[] = "first allocation in the decode loop:\n";
    (void)!write(2, kHead, sizeof kHead - 1);
    backtrace_symbols_fd(frames, n, 2);
    g_armed = true;
  }
}

}  // namespace

void* operator new(size_t size) {
  count_allocation();
  if (void* p = std::malloc(size == 0 ? 1 : size)) return p;
  throw std::bad_alloc();
}
void* operator new[](size_t size) { return operator new(size); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }
void operator delete[](void* p, size_t) noexcept { std::free(p); }

namespace tessera {
namespace {

std::string stories() { return testing::models_dir() + "/stories260K.gguf"; }

struct Armed {
  Armed() {
    g_count = 0;
    g_armed = true;
  }
  ~Armed() { g_armed = false; }
};

TEST(DecodeLoop, OneSequenceAllocatesNothingInTheSteadyState) {
  auto rt = make_runtime(false);
  auto& cpu = dynamic_cast<cpu::CpuDevice&>(rt->device("CPU0"));
  cpu.set_threads(2);
  cpu.set_min_work_per_thread(0);  // every op through the thread pool
  auto model = Model::load(*rt, stories());
  Session s(*model, {.n_ctx = 256});
  auto logits = s.decode(std::vector<int32_t>{1, 403, 407, 261, 378});
  int32_t t = 432;
  for (int i = 0; i < 3; ++i) logits = s.decode(std::span(&t, 1));  // first plan of this shape
  const uint64_t plans = s.context().plans_built();
  long count = 0;
  {
    Armed armed;
    for (int i = 0; i < 100; ++i) {
      logits = s.decode(std::span(&t, 1));
      t = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    }
    count = g_count;
  }
  EXPECT_EQ(count, 0) << "allocations in 100 decode steps";
  EXPECT_EQ(s.context().plans_built(), plans);
}

TEST(DecodeLoop, FourSequencesInOneBatchAllocateNothingInTheSteadyState) {
  auto rt = make_runtime(false);
  auto model = Model::load(*rt, stories());
  Context ctx(*model, {.n_ctx = 512});
  Batch batch;
  for (int s = 0; s < 4; ++s) batch.add(1, 0, {s}, true);
  ctx.decode(batch);
  int32_t pos = 1;
  auto step = [&] {
    batch.clear();
    for (int s = 0; s < 4; ++s) {
      const auto l = ctx.logits(static_cast<size_t>(s));
      const auto t = static_cast<int32_t>(std::max_element(l.begin(), l.end()) - l.begin());
      batch.add(t, pos, {s}, true);
    }
    pos += 1;
    ctx.decode(batch);
  };
  for (int i = 0; i < 3; ++i) step();
  const uint64_t plans = ctx.plans_built();
  long count = 0;
  {
    Armed armed;
    for (int i = 0; i < 50; ++i) step();  // 4 x 54 cells: one 256-row bucket
    count = g_count;
  }
  EXPECT_EQ(count, 0) << "allocations in 50 steps of 4 sequences";
  EXPECT_EQ(ctx.plans_built(), plans);
}

}  // namespace
}  // namespace tessera
