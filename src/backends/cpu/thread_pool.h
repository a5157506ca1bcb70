// A persistent pool of worker threads owned by the CPU device. run(fn) calls
// fn(ith, nth) once on each of nth threads (the caller is thread 0) and returns
// when all are done. Workers spin briefly for the next job, then sleep.
#pragma once

#include <atomic>
#include <cstdint>
#include <exception>
#include <type_traits>
#include <mutex>
#include <thread>
#include <vector>

namespace tessera::cpu {

// A callable's address and a trampoline: what run() needs of a job, without
// std::function's heap allocation for lambdas that capture a few references
// (run() is called once per op, so once per op per token). The callable must
// outlive the call.
class JobRef {
 public:
  template <class F>
    requires(!std::is_same_v<std::remove_cvref_t<F>, JobRef>)
  JobRef(const F& f)  // NOLINT(google-explicit-constructor): a view, like std::function_ref
      : obj_(&f), call_([](const void* o, int ith, int nth) { (*static_cast<const F*>(o))(ith, nth); }) {}
  void operator()(int ith, int nth) const { call_(obj_, ith, nth); }

 private:
  const void* obj_;
  void (*call_)(const void*, int, int);
};

class ThreadPool {
 public:
  using Job = JobRef;

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
