#include "cpu/cpu_backend.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <unordered_set>
#include <fstream>

#include "cpu/ceilings.h"
#include "cpu/ops/op.h"
#include "tessera/core/error.h"

namespace tessera::cpu {
namespace {

// A CPU stream runs work as it is queued: everything is done on return.
class CpuEvent final : public Event {
 public:
  explicit CpuEvent(Device& device) : device_(device) {}
  Device& device() const override { return device_; }
  void synchronize() override {}

 private:
  Device& device_;
};

class CpuStream final : public Stream {
 public:
  explicit CpuStream(CpuDevice& device) : device_(device) {}
  Device& device() const override { return device_; }
  void synchronize() override {}
  void compute(std::span<Tensor* const> nodes) override { device_.compute(nodes); }
  void record(Event&) override {}
  // CPU work runs as it is queued, so waiting means the host waits now.
  void wait(Event& event) override { event.synchronize(); }

 private:
  CpuDevice& device_;
};

// Scratch address space: what the machine has free at start, reserved
// once; only what ops use is ever committed.
size_t scratch_limit() {
  const size_t free = host::host_free_bytes();
  return free > host::kHugePageSize ? free / host::kHugePageSize * host::kHugePageSize
                                    : host::kHugePageSize;
}

}  // namespace

std::string cpu_model_name() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.starts_with("model name")) {
      const auto colon = line.find(':');
      if (colon != std::string::npos && colon + 2 <= line.size()) return line.substr(colon + 2);
    }
  }
  return "unknown CPU";
}

CpuDevice::CpuDevice(CpuBackend& backend, int n_threads)
    : backend_(backend),
      description_(cpu_model_name()),
      isa_(default_isa()),
      kernels_(&kernels_for(isa_)),
      buffer_type_(*this, "CPU"),
      weights_type_(*this, "CPU_Repack"),
      pool_(n_threads > 0 ? n_threads : physical_core_count()),
      scratch_memory_("CPU0", host::page_size()),
      scratch_(scratch_memory_, scratch_limit()) {}

void CpuDevice::set_isa(Isa isa) {
  for (Isa t : supported_isas()) {
    if (t == isa) {
      std::lock_guard lock(compute_mutex_);
      isa_ = isa;
      kernels_ = &kernels_for(isa);
      return;
    }
  }
  fail(ErrorCategory::kUnsupported, "[CPU0] this CPU cannot run the {} tier", isa_name(isa));
}

MemoryInfo CpuDevice::memory() const {
  return {host::host_free_bytes(), host::host_total_bytes()};
}

DeviceCaps CpuDevice::caps() const {
  return {.async = false, .host_buffer = false, .buffer_from_host_ptr = false, .events = true};
}

Backend& CpuDevice::backend() const {
  return backend_;
}

std::unique_ptr<Stream> CpuDevice::make_stream() {
  return std::make_unique<CpuStream>(*this);
}

std::unique_ptr<Event> CpuDevice::make_event() {
  return std::make_unique<CpuEvent>(*this);
}

bool CpuDevice::supports_op(const Tensor& node) const {
  // Panels are read only by MUL_MAT and MUL_MAT_ID (weights) and GET_ROWS (read_row_f32), on
  // the repacked tensor itself: a view's data pointer lands inside panels.
  if (!is_view_op(node.op)) {
    for (int i = 0; i < kMaxSources; ++i) {
      const Tensor* s = node.src[static_cast<size_t>(i)];
      if (s == nullptr) continue;
      if (is_view_of_repacked(*s)) return false;
      const bool reads_panels = node.op == Op::kMulMat || node.op == Op::kMulMatId || node.op == Op::kGetRows;
      if (is_repacked(*s) && !(i == 0 && reads_panels)) {
        return false;
      }
    }
  }
  return cpu_supports(node);
}

// Element operations `node` costs, roughly: multiply-adds for matmul and
// attention, elements touched for the rest.
static size_t estimated_work(const Tensor& node) {
  const auto n = [](const Tensor* t) { return t ? static_cast<size_t>(t->n_elements()) : 0; };
  switch (node.op) {
    case Op::kMulMat:
    case Op::kMulMatId:  // (the picked experts' rows only)
      return static_cast<size_t>(node.src[0]->ne[0]) * n(&node);
    case Op::kFlashAttnExt:  // q·k and p·v per query row and key
      return 2 * static_cast<size_t>(node.src[0]->ne[0]) * static_cast<size_t>(node.src[1]->ne[1]) *
             static_cast<size_t>(node.src[0]->ne[1] * node.src[0]->ne[2] * node.src[0]->ne[3]);
    case Op::kSetRows:  // the values' rows, not the whole destination (a cache)
      return 2 * n(node.src[0]) + n(node.src[1]);
    default:
      return n(&node) + n(node.src[0]) + n(node.src[1]);
  }
}

int CpuDevice::threads_for(const Tensor& node) const {
  const int all = pool_.size();
  if (min_work_per_thread_ == 0 || all == 1) return all;
  const size_t useful = estimated_work(node) / min_work_per_thread_;
  return static_cast<int>(std::clamp<size_t>(useful, 1, static_cast<size_t>(all)));
}

// Whether t's bytes overlap [p, p + n).
static bool overlaps(const Tensor& t, const void* p, size_t n) {
  const auto* a = static_cast<const uint8_t*>(t.data);
  const auto* b = static_cast<const uint8_t*>(p);
  return a != nullptr && a < b + n && b < a + t.n_bytes();
}

using Clock = std::chrono::steady_clock;

static double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// A profiled node's row: its op, with the weight type for matmuls, and the
// weight bytes it read (MUL_MAT_ID: each expert its ids picked, once).
static OpProfileRow& profile_row(OpProfile& profile, const Tensor& node) {
  std::string name(op_name(node.op));
  const bool matmul = node.op == Op::kMulMat || node.op == Op::kMulMatId;
  if (matmul) (name += ' ') += dtype_name(node.src[0]->type);
  OpProfileRow& row = profile.ops[name];
  if (node.op == Op::kMulMat) {
    row.weight_bytes += static_cast<double>(node.src[0]->n_bytes());
  } else if (node.op == Op::kMulMatId) {
    const Tensor& ids = *node.src[2];
    std::unordered_set<int32_t> picked;
    for (int64_t t = 0; t < ids.ne[1]; ++t) {
      for (int64_t s = 0; s < ids.ne[0]; ++s) {
        int32_t e;
        std::memcpy(&e, static_cast<const uint8_t*>(ids.data) + t * ids.nb[1] + s * ids.nb[0],
                    sizeof e);
        picked.insert(e);
      }
    }
    row.weight_bytes += static_cast<double>(picked.size() * node.src[0]->nb[2]);
  }
  return row;
}

void CpuDevice::compute(std::span<Tensor* const> nodes) {
  std::lock_guard lock(compute_mutex_);
  const Clock::time_point graph_start = profile_ != nullptr ? Clock::now() : Clock::time_point{};
  // The last converted input (ops/op.h, ConvertedInput) and the work block
  // holding it, kept for a later node that converts the same input the same
  // way; dropped when another conversion comes or a node writes over that
  // input's bytes. Other nodes' blocks sit above it and are freed first.
  ConvertedInput kept_input;
  PoolBlock kept;
  const auto drop_kept = [&] {
    if (kept.size > 0) scratch_.free(kept);
    kept = {};
    kept_input = {};
  };
  try {
    for (Tensor* node : nodes) {
      if (node->op == Op::kNone || is_view_op(node->op)) continue;
      const OpImpl* impl = find_op(node->op);
      if (impl == nullptr || !impl->supports(*node)) {
        fail(ErrorCategory::kUnsupported, "[CPU0] cannot compute {} on {}", op_name(node->op),
             node->describe());
      }
      const int nth = threads_for(*node);
      const size_t work = impl->work_size ? impl->work_size(*node, nth) : 0;
      const int phases = impl->phases ? impl->phases(*node, nth, kernels_) : 1;
      const ConvertedInput converts =
          impl->converted_input ? impl->converted_input(*node, nth, kernels_) : ConvertedInput{};
      const bool reuse = converts.input != nullptr && converts.input == kept_input.input &&
                         converts.format == kept_input.format &&
                         converts.copies == kept_input.copies && kept.size >= work;
      // The scratch pool frees in LIFO order: a kept block this node will not
      // use goes before the node's own block is taken above it.
      if (converts.input != nullptr && !reuse) drop_kept();
      PoolBlock block;
      if (reuse) {
        block = kept;
      } else if (work > 0) {
        block = scratch_.alloc(work);
      }
      std::atomic<int64_t> counter{0};
      const Clock::time_point node_start = profile_ != nullptr ? Clock::now() : Clock::time_point{};
      if (profile_ != nullptr) slot_seconds_.assign(static_cast<size_t>(nth), 0.0);
      try {
        for (int phase = reuse && phases > 1 ? 1 : 0; phase < phases; ++phase) {
          counter.store(0, std::memory_order_relaxed);
          const auto job = [&](int ith, int n) {
            impl->compute(*node, OpContext{ith, n, phase, static_cast<uint8_t*>(block.ptr), work,
                                           kernels_, &counter, reuse});
          };
          // One slot per thread the op is worth; a single slot runs on the
          // caller without waking the workers.
          if (profile_ == nullptr) {
            pool_.run(job, nth);
          } else {
            pool_.run(
                [&](int ith, int n) {
                  const Clock::time_point t0 = Clock::now();
                  job(ith, n);
                  slot_seconds_[static_cast<size_t>(ith)] += seconds_since(t0);
                },
                nth);
          }
        }
      } catch (...) {
        if (!reuse && work > 0) scratch_.free(block);
        throw;
      }
      if (converts.input != nullptr && work > 0) {
        if (!reuse) {
          kept = block;
          kept_input = converts;
        }
      } else if (work > 0) {
        scratch_.free(block);
      }
      if (kept_input.input != nullptr &&
          overlaps(*node, kept_input.input->data, kept_input.input->n_bytes())) {
        drop_kept();
      }
      if (profile_ != nullptr) {
        OpProfileRow& row = profile_row(*profile_, *node);
        row.calls += 1;
        row.seconds += seconds_since(node_start);
        double sum = 0;
        for (double s : slot_seconds_) sum += s;
        row.busy_max_seconds += *std::max_element(slot_seconds_.begin(), slot_seconds_.end());
        row.busy_mean_seconds += sum / static_cast<double>(slot_seconds_.size());
      }
    }
  } catch (...) {
    drop_kept();
    throw;
  }
  drop_kept();
  if (profile_ != nullptr) {
    profile_->graphs += 1;
    profile_->compute_seconds += seconds_since(graph_start);
  }
}

CpuBackend::CpuBackend(int n_threads) : device_(*this, n_threads) {}

void* CpuBackend::proc_address(std::string_view name) {
  if (name == kGetThreadsProc) {
    static constexpr GetThreadsFn fn = [](Device& d) {
      return dynamic_cast<CpuDevice&>(d).threads();
    };
    return reinterpret_cast<void*>(fn);
  }
  if (name == kMeasureCeilingsProc) {
    static constexpr MeasureCeilingsFn fn = [](Device& d, int threads) {
      auto& cpu = dynamic_cast<CpuDevice&>(d);
      return measure_ceilings(cpu.isa(), threads > 0 ? threads : cpu.threads());
    };
    return reinterpret_cast<void*>(fn);
  }
  if (name == kOpProfileProc) {
    static constexpr SetOpProfileFn fn = [](Device& d, OpProfile* sink) {
      dynamic_cast<CpuDevice&>(d).set_profile(sink);
    };
    return reinterpret_cast<void*>(fn);
  }
  if (name == kSetThreadsProc) {
    static constexpr SetThreadsFn fn = [](Device& d, int n) {
      dynamic_cast<CpuDevice&>(d).set_threads(n);
    };
    return reinterpret_cast<void*>(fn);
  }
  return nullptr;
}

}  // namespace tessera::cpu
