#include "backends/cpu/thread_pool.h"

#include <fstream>
#include <set>
#include <string>
#include <utility>

#include "tessera/error.h"

#if defined(__x86_64__)
#include <immintrin.h>
#define TESSERA_PAUSE() _mm_pause()
#else
#define TESSERA_PAUSE() ((void)0)
#endif

namespace tessera::cpu {
namespace {
// About 50-100 us of spinning before a worker sleeps: long enough to catch
// the next op of a graph, short enough not to burn a core between tokens.
constexpr int kSpinIterations = 20000;
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
  // Workers start from the generation seen here, so a job (or stop) posted
  // before a worker first runs is not missed.
  const uint64_t start_generation = generation_.load(std::memory_order_acquire);
  for (int i = 1; i < n_threads; ++i) {
    workers_.emplace_back([this, i, start_generation] { worker_loop(i, start_generation); });
  }
  n_threads_ = n_threads;  // only once every worker runs
}

void ThreadPool::stop() {
  quit_ = true;
  generation_.fetch_add(1);
  generation_.notify_all();
  for (std::thread& t : workers_) t.join();
  workers_.clear();
}

void ThreadPool::run(const Job& job) {
  std::lock_guard lock(run_mutex_);
  error_ = nullptr;
  if (n_threads_ == 1) {
    job(0, 1);
    return;
  }
  job_ = &job;
  pending_.store(n_threads_ - 1, std::memory_order_relaxed);
  generation_.fetch_add(1, std::memory_order_release);
  generation_.notify_all();
  run_guarded(0);
  // Wait for the workers: spin, then sleep on pending_.
  for (int spin = 0; pending_.load(std::memory_order_acquire) != 0; ++spin) {
    if (spin < kSpinIterations) {
      TESSERA_PAUSE();
    } else {
      const int left = pending_.load(std::memory_order_acquire);
      if (left != 0) pending_.wait(left, std::memory_order_acquire);
    }
  }
  job_ = nullptr;
  if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
}

void ThreadPool::run_guarded(int ith) {
  try {
    (*job_)(ith, n_threads_);
  } catch (...) {
    std::lock_guard lock(error_mutex_);
    if (!error_) error_ = std::current_exception();
  }
}

void ThreadPool::worker_loop(int ith, uint64_t seen) {
  while (true) {
    uint64_t now = seen;
    for (int spin = 0; (now = generation_.load(std::memory_order_acquire)) == seen; ++spin) {
      if (spin < kSpinIterations) {
        TESSERA_PAUSE();
      } else {
        generation_.wait(seen, std::memory_order_acquire);
      }
    }
    seen = now;
    if (quit_.load(std::memory_order_acquire)) return;
    run_guarded(ith);
    if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) pending_.notify_one();
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

namespace tessera::cpu {

void Barrier::arrive_and_wait() {
  if (n_threads_ == 1) return;
  const uint64_t phase = phase_.load(std::memory_order_acquire);
  if (arrived_.fetch_add(1, std::memory_order_acq_rel) == n_threads_ - 1) {
    arrived_.store(0, std::memory_order_relaxed);
    phase_.fetch_add(1, std::memory_order_release);
    phase_.notify_all();
    return;
  }
  for (int spin = 0; phase_.load(std::memory_order_acquire) == phase; ++spin) {
    if (spin < kSpinIterations) {
      TESSERA_PAUSE();
    } else {
      phase_.wait(phase, std::memory_order_acquire);
    }
  }
}

}  // namespace tessera::cpu
