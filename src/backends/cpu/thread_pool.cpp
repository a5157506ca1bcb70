#include "cpu/thread_pool.h"

#include <algorithm>
#include <chrono>
#include <fstream>
#include <set>
#include <string>
#include <utility>

#include "tessera/core/error.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace tessera::cpu {
namespace {

using Clock = std::chrono::steady_clock;

// Spin about as long as the gap between two ops of a graph, yield the core
// for a while longer (a descheduled thread of ours may be waiting for it),
// then sleep.
constexpr auto kSpinFor = std::chrono::microseconds(50);
constexpr auto kYieldFor = std::chrono::microseconds(500);

void cpu_relax() {
#if defined(__x86_64__)
  _mm_pause();
#endif
}

// Waits until ready() holds; `word` changes whenever it may have become true,
// and is what a sleeper waits on. Its value is read before ready() is asked,
// so a change between the two wakes the sleeper at once.
template <class T, class Ready>
void wait_for(const std::atomic<T>& word, const Ready& ready) {
  const Clock::time_point start = Clock::now();
  for (int i = 0;; ++i) {
    const T seen = word.load(std::memory_order_acquire);
    if (ready()) return;
    if ((i & 63) != 63) {
      cpu_relax();
      continue;
    }
    const auto waited = Clock::now() - start;
    if (waited < kSpinFor) continue;
    if (waited < kSpinFor + kYieldFor) {
      std::this_thread::yield();
      continue;
    }
    word.wait(seen, std::memory_order_acquire);
  }
}

uint32_t generation_of(uint64_t state) { return static_cast<uint32_t>(state >> 32); }

// The slot field of a closed generation: above every slot count.
constexpr uint64_t kNoSlot = 0xffffffffu;

}  // namespace

ThreadPool::ThreadPool(int n_threads) { start(n_threads); }

ThreadPool::~ThreadPool() { stop(); }

void ThreadPool::resize(int n_threads) {
  if (n_threads < 1) {
    fail(ErrorCategory::kInvalidArgument, "[thread pool] found {} threads, expected >= 1",
         n_threads);
  }
  std::lock_guard lock(run_mutex_);
  stop();
  try {
    start(n_threads);
  } catch (...) {
    stop();  // a thread failed to start: carry on with the caller's thread alone
    n_threads_ = 1;
    throw;
  }
}

void ThreadPool::start(int n_threads) {
  if (n_threads < 1) {
    fail(ErrorCategory::kInvalidArgument, "[thread pool] found {} threads, expected >= 1",
         n_threads);
  }
  quit_ = false;
  workers_.reserve(static_cast<size_t>(n_threads - 1));
  for (int i = 1; i < n_threads; ++i) {
    workers_.push_back(std::make_unique<Worker>());
    Worker& w = *workers_.back();
    w.thread = std::thread([this, &w] { worker_loop(w); });
  }
  n_threads_ = n_threads;  // only once every worker runs
}

void ThreadPool::stop() {
  quit_.store(true, std::memory_order_release);
  for (auto& w : workers_) {
    w->wake.fetch_add(1, std::memory_order_release);
    w->wake.notify_one();
  }
  for (auto& w : workers_) w->thread.join();
  workers_.clear();
}

void ThreadPool::run(const Job& job, int n_slots) {
  std::lock_guard lock(run_mutex_);
  error_ = nullptr;
  if (n_slots <= 1 || workers_.empty()) {
    for (int s = 0; s < n_slots; ++s) {
      try {
        job(s, n_slots);
      } catch (...) {
        if (!error_) error_ = std::current_exception();
      }
    }
    if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
    return;
  }
  // Two generations per job. The first closes the last job: a worker still
  // holding a state of it (all its slots claimed) must not read this job's
  // slot count and claim a slot with it before the new state is stored; a
  // claim now fails its compare-exchange, and the closed generation offers
  // no slot. The second opens this job once its fields are written.
  const uint32_t closed = generation_of(state_.load(std::memory_order_relaxed)) + 1;
  // (n_slots_ is released and acquired so that a worker that sees the new
  // count also sees the closed state in its compare-exchange.)
  state_.store((uint64_t{closed} << 32) | kNoSlot, std::memory_order_relaxed);
  job_.store(&job, std::memory_order_relaxed);
  n_slots_.store(n_slots, std::memory_order_release);
  done_.store(0, std::memory_order_relaxed);
  const uint32_t gen = closed + 1;
  state_.store(uint64_t{gen} << 32, std::memory_order_release);
  // Wake the workers the slots need; spinning ones see the new generation anyway.
  const auto needed = std::min<size_t>(static_cast<size_t>(n_slots - 1), workers_.size());
  for (size_t i = 0; i < needed; ++i) {
    workers_[i]->wake.fetch_add(1, std::memory_order_release);
    workers_[i]->wake.notify_one();
  }
  take_slots(gen);
  // Every slot is claimed; wait for those still running on workers.
  wait_for(done_, [&] { return done_.load(std::memory_order_acquire) == n_slots; });
  job_.store(nullptr, std::memory_order_relaxed);
  if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
}

void ThreadPool::take_slots(uint32_t gen) {
  uint64_t s = state_.load(std::memory_order_acquire);
  while (generation_of(s) == gen) {
    const int n = n_slots_.load(std::memory_order_acquire);
    const auto slot = static_cast<uint32_t>(s & kNoSlot);
    if (slot >= static_cast<uint32_t>(n)) return;
    // Fails (and reloads s) if another thread claimed this slot or the job
    // ended and a new one began; n is then re-read with the new state.
    if (!state_.compare_exchange_weak(s, s + 1, std::memory_order_acq_rel,
                                      std::memory_order_acquire)) {
      continue;
    }
    run_slot(static_cast<int>(slot), n);
    if (done_.fetch_add(1, std::memory_order_acq_rel) + 1 == n) done_.notify_all();
    s = state_.load(std::memory_order_acquire);
  }
}

void ThreadPool::run_slot(int slot, int n_slots) {
  try {
    (*job_.load(std::memory_order_relaxed))(slot, n_slots);
  } catch (...) {
    std::lock_guard lock(error_mutex_);
    if (!error_) error_ = std::current_exception();
  }
}

void ThreadPool::worker_loop(Worker& self) {
  uint32_t seen = generation_of(state_.load(std::memory_order_acquire));
  while (true) {
    // A new job shows as a new generation (seen while spinning) or as a
    // bump of this worker's wake word (which a sleeper waits on).
    uint32_t gen = seen;
    wait_for(self.wake, [&] {
      if (quit_.load(std::memory_order_acquire)) return true;
      gen = generation_of(state_.load(std::memory_order_acquire));
      return gen != seen;
    });
    if (quit_.load(std::memory_order_acquire)) return;
    seen = gen;
    take_slots(gen);
  }
}

int physical_core_count() {
  // Count distinct (physical id, core id) pairs; fall back to logical CPUs.
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::set<std::pair<std::string, std::string>> cores;
  std::string line, physical = "0";
  while (std::getline(cpuinfo, line)) {
    const auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    const std::string value = colon + 2 <= line.size() ? line.substr(colon + 2) : "";
    if (line.starts_with("physical id")) physical = value;
    if (line.starts_with("core id")) cores.emplace(physical, value);
  }
  const int logical = static_cast<int>(std::thread::hardware_concurrency());
  if (!cores.empty()) return static_cast<int>(cores.size());
  return logical > 0 ? logical : 1;
}

}  // namespace tessera::cpu
