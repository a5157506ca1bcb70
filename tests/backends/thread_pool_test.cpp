// The CPU thread pool: every slot of a job runs exactly once whatever the
// thread and slot counts, on any thread; a throwing slot is rethrown once
// the others are done and leaves the pool usable; nothing waits forever.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <set>
#include <stdexcept>
#include <thread>
#include <vector>

#include "backends/cpu/thread_pool.h"

namespace tessera::cpu {
namespace {

TEST(ThreadPool, EverySlotRunsExactlyOnce) {
  for (int threads : {1, 2, 4}) {
    ThreadPool pool(threads);
    for (int slots : {1, 2, 3, 7, 64}) {
      std::vector<std::atomic<int>> hits(static_cast<size_t>(slots));
      for (int rep = 0; rep < 200; ++rep) {
        pool.run([&](int slot, int n) {
          ASSERT_EQ(n, slots);
          hits[static_cast<size_t>(slot)].fetch_add(1);
        }, slots);
      }
      for (int s = 0; s < slots; ++s) {
        EXPECT_EQ(hits[static_cast<size_t>(s)].load(), 200)
            << threads << " threads, " << slots << " slots, slot " << s;
      }
    }
  }
}

// Jobs of changing slot counts back to back: a worker still finishing one
// job must never take a slot of the next with the last job's state (once
// that ran a slot twice and left the caller waiting forever).
TEST(ThreadPool, JobsOfChangingSizesBackToBackRunEachSlotOnce) {
  ThreadPool pool(3);
  constexpr int kSizes[] = {6, 4, 2, 7, 3, 5};
  for (int rep = 0; rep < 20000; ++rep) {
    const int slots = kSizes[rep % 6];
    std::atomic<uint32_t> seen{0};
    std::atomic<int> twice{0};
    pool.run([&](int slot, int n) {
      ASSERT_EQ(n, slots);
      if (seen.fetch_or(1u << slot) & (1u << slot)) twice.fetch_add(1);
    }, slots);
    ASSERT_EQ(seen.load(), (1u << slots) - 1) << "rep " << rep << ", " << slots << " slots";
    ASSERT_EQ(twice.load(), 0) << "rep " << rep << ", " << slots << " slots";
  }
}

TEST(ThreadPool, SlotsSpreadOverThreadsAndTheCallerTakesWhatIsLeft) {
  ThreadPool pool(2);
  // Slot work long enough that a woken worker gets some of it.
  std::set<std::thread::id> ids;
  std::mutex m;
  for (int rep = 0; rep < 20 && ids.size() < 2; ++rep) {
    pool.run([&](int, int) {
      std::this_thread::sleep_for(std::chrono::microseconds(200));
      std::lock_guard lock(m);
      ids.insert(std::this_thread::get_id());
    }, 8);
  }
  EXPECT_EQ(ids.size(), 2u);
  EXPECT_TRUE(ids.contains(std::this_thread::get_id()));  // the caller works too
}

TEST(ThreadPool, ThrowingSlotIsRethrownAfterTheOthersAndThePoolGoesOn) {
  ThreadPool pool(3);
  for (int rep = 0; rep < 50; ++rep) {
    std::atomic<int> ran{0};
    try {
      pool.run([&](int slot, int) {
        ran.fetch_add(1);
        if (slot == 2) throw std::runtime_error("slot 2 failed");
      }, 6);
      ADD_FAILURE() << "no exception";
    } catch (const std::runtime_error& e) {
      EXPECT_STREQ(e.what(), "slot 2 failed");
    }
    EXPECT_EQ(ran.load(), 6);  // the other slots ran: no one was left waiting
    std::atomic<int> after{0};
    pool.run([&](int, int) { after.fetch_add(1); }, 4);
    EXPECT_EQ(after.load(), 4);
  }
}

TEST(ThreadPool, ResizesBetweenJobsAndRefusesZero) {
  ThreadPool pool(2);
  for (int n : {1, 4, 2}) {
    pool.resize(n);
    EXPECT_EQ(pool.size(), n);
    std::atomic<int> hits{0};
    pool.run([&](int, int) { hits.fetch_add(1); }, 5);
    EXPECT_EQ(hits.load(), 5);
  }
  EXPECT_ANY_THROW(pool.resize(0));
}

TEST(ThreadPool, WorkersAsleepAfterAPauseStillWake) {
  ThreadPool pool(2);
  for (int rep = 0; rep < 3; ++rep) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));  // past spin and yield
    std::atomic<int> hits{0};
    pool.run([&](int, int) { hits.fetch_add(1); }, 2);
    EXPECT_EQ(hits.load(), 2);
  }
}

}  // namespace
}  // namespace tessera::cpu
