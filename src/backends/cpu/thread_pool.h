// A persistent pool of worker threads owned by the CPU device. run(fn) calls
// fn(ith, nth) once on each of nth threads (the caller is thread 0) and returns
// when all are done. Workers spin briefly for the next job, then sleep.
#pragma once

#include <atomic>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace tessera::cpu {

class ThreadPool {
 public:
  using Job = std::function<void(int ith, int nth)>;

  explicit ThreadPool(int n_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }
  // Restarts the workers with a new count (>= 1). Not while a job runs.
  void resize(int n_threads);

  // Runs `job` on every thread; rethrows the first exception a thread threw.
  // One job at a time: calls from several threads are serialized.
  void run(const Job& job);

 private:
  void start(int n_threads);
  void stop();
  void worker_loop(int ith, uint64_t seen);
  void run_guarded(int ith);

  int n_threads_ = 1;
  std::vector<std::thread> workers_;
  std::mutex run_mutex_;  // one job at a time

  const Job* job_ = nullptr;
  std::atomic<uint64_t> generation_{0};  // bumped per job; workers wait on it
  std::atomic<int> pending_{0};          // workers still running the job
  std::atomic<bool> quit_{false};

  std::mutex error_mutex_;
  std::exception_ptr error_;
};

// Physical cores of this machine (logical CPUs / threads per core), at least 1.
int physical_core_count();

}  // namespace tessera::cpu

namespace tessera::cpu {

// All nth threads of one job wait here until every one has arrived.
class Barrier {
 public:
  explicit Barrier(int n_threads) : n_threads_(n_threads) {}
  void arrive_and_wait();

 private:
  int n_threads_;
  std::atomic<int> arrived_{0};
  std::atomic<uint64_t> phase_{0};
};

}  // namespace tessera::cpu
