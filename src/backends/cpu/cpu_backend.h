// The CPU backend: one device ("CPU0") that runs every op it supports on a
// persistent thread pool, over plain host buffers and its weights buffer
// (Q4_0 / Q8_0 / Q4_K / Q6_K / F16 repacked into panels, kernels/repack.h).
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "cpu/isa.h"
#include "cpu/kernels/kernels.h"
#include "cpu/kernels/repack.h"
#include "cpu/thread_pool.h"
#include "tessera/backends/profile.h"
#include "tessera/runtime/device.h"
#include "tessera/runtime/host_buffer.h"
#include "tessera/runtime/host_memory.h"
#include "tessera/runtime/pool.h"
#include "tessera/runtime/stream.h"

namespace tessera::cpu {

class CpuBackend;

class CpuDevice final : public Device {
 public:
  CpuDevice(CpuBackend& backend, int n_threads);

  std::string_view name() const override { return "CPU0"; }
  std::string_view description() const override { return description_; }
  DeviceType type() const override { return DeviceType::kCpu; }
  MemoryInfo memory() const override;
  DeviceCaps caps() const override;
  Backend& backend() const override;

  std::unique_ptr<Stream> make_stream() override;
  BufferType& buffer_type() override { return buffer_type_; }
  BufferType& weights_buffer_type() override { return weights_type_; }
  // Panels for the types the kernels repack (Q4_0, Q8_0, Q4_K, Q6_K, F16); plain host memory
  // for the rest, so that an accelerator reading host memory (BLAS) can take
  // their large-batch matmuls.
  BufferType& weights_buffer_type(const Tensor& weight) override {
    return repacks(weight) ? static_cast<BufferType&>(weights_type_) : buffer_type_;
  }

  bool supports_op(const Tensor& node) const override;
  bool supports_buffer_type(const BufferType& type) const override {
    return type.is_host() || dynamic_cast<const CpuWeightsBufferType*>(&type) != nullptr;
  }
  // The CPU is where host-resident ops already are: never worth "offloading".
  bool offload_op(const Tensor&) const override { return false; }
  std::unique_ptr<Event> make_event() override;

  int threads() const { return pool_.size(); }
  // Waits for a graph in progress; never changes the count under one.
  void set_threads(int n) {
    std::lock_guard lock(compute_mutex_);
    pool_.resize(n);
  }
  // Ops estimated below this many element operations per thread run on
  // fewer threads (one for the smallest): waking a worker costs more than
  // they do. 0 runs every op on every thread (tests of the thread splits).
  size_t min_work_per_thread() const { return min_work_per_thread_; }
  void set_min_work_per_thread(size_t work) { min_work_per_thread_ = work; }
  // The instruction-set tier its kernels use; set_isa throws Error(kUnsupported)
  // for a tier this CPU cannot run.
  Isa isa() const { return isa_; }
  void set_isa(Isa isa);
  const Kernels& kernels() const { return *kernels_; }

  // Runs nodes in order on the thread pool; per-op scratch from the pool.
  void compute(std::span<Tensor* const> nodes);
  // While set, compute adds every node's times to *sink (nullptr: stops);
  // waits for a graph in progress.
  void set_profile(OpProfile* sink) {
    std::lock_guard lock(compute_mutex_);
    profile_ = sink;
  }

 private:
  int threads_for(const Tensor& node) const;

  CpuBackend& backend_;
  std::string description_;
  Isa isa_;
  const Kernels* kernels_;  // the table of isa_
  host::HostBufferType buffer_type_;
  CpuWeightsBufferType weights_type_;
  ThreadPool pool_;
  OpProfile* profile_ = nullptr;      // set_profile
  std::vector<double> slot_seconds_;  // a profiled node's time in each slot
  host::HostVirtualMemory scratch_memory_;
  VirtualPool scratch_;
  std::mutex compute_mutex_;  // one graph at a time on the pool and scratch
  size_t min_work_per_thread_ = 32 * 1024;
};

class CpuBackend final : public Backend {
 public:
  // n_threads 0: one per physical core.
  explicit CpuBackend(int n_threads = 0);
  std::string_view name() const override { return "CPU"; }
  size_t device_count() const override { return 1; }
  void* proc_address(std::string_view name) override;
  CpuDevice& cpu_device() { return device_; }

 protected:
  Device& device_at(size_t) override { return device_; }

 private:
  CpuDevice device_;
};

// The CPU's own name, e.g. "AMD EPYC 9B45" (from /proc/cpuinfo).
std::string cpu_model_name();

// Extension functions reachable through proc_address.
using SetThreadsFn = void (*)(Device& device, int n_threads);
inline constexpr const char* kSetThreadsProc = "cpu_set_threads";
using GetThreadsFn = int (*)(Device& device);
inline constexpr const char* kGetThreadsProc = "cpu_get_threads";

}  // namespace tessera::cpu
