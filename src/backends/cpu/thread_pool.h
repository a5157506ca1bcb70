// A persistent pool of worker threads owned by the CPU device.
//
// run(job, n_slots) calls job(slot, n_slots) once for every slot, each slot
// taken by whichever thread claims it first: the caller, and the workers it
// wakes (only as many as there are slots beyond its own). A worker that
// wakes late, because the OS gave its core to another process, finds the
// slots taken and the caller never waits for it; the caller only waits for
// slots a worker has started. Jobs have no barriers: an op that needs one
// is run as two jobs (phases, ops/op.h).
//
// Waiting threads spin for a few tens of microseconds (the gap between two
// ops of a graph), then yield for a while, then sleep.
#pragma once

#include <atomic>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <type_traits>
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

  // Runs job(slot, n_slots) for every slot in [0, n_slots) (n_slots >= 1)
  // and returns when all are done; rethrows the first exception a slot
  // threw (the other slots still run). One job at a time: calls from
  // several threads are serialized.
  void run(const Job& job, int n_slots);

 private:
  struct alignas(64) Worker {
    std::atomic<uint32_t> wake{0};  // bumped when a job needs this worker
    std::thread thread;
  };

  void start(int n_threads);
  void stop();
  void worker_loop(Worker& self);
  // Claims and runs slots of generation `gen` until none are left.
  void take_slots(uint32_t gen);
  void run_slot(int slot, int n_slots);

  int n_threads_ = 1;
  std::vector<std::unique_ptr<Worker>> workers_;
  std::mutex run_mutex_;  // one job at a time

  // (generation << 32) | next unclaimed slot: a claim is one compare-exchange
  // that fails when the job it was meant for is over.
  alignas(64) std::atomic<uint64_t> state_{0};
  std::atomic<const Job*> job_{nullptr};
  std::atomic<int> n_slots_{0};
  alignas(64) std::atomic<int> done_{0};  // slots finished
  std::atomic<bool> quit_{false};

  std::mutex error_mutex_;
  std::exception_ptr error_;
};

// Physical cores of this machine (logical CPUs / threads per core), at least 1.
int physical_core_count();

}  // namespace tessera::cpu
