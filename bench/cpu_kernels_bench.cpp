// CPU MUL_MAT micro-benchmarks with roofline probes in the same run
// (kernels.md §2.7): memory read bandwidth and zmm FMA / vpdpbusd peaks on 1
// and 2 threads, then MUL_MAT on the CPU device (2 threads) at batch 1 (GEMV)
// and 512 (GEMM) for F16, Q8_0 and Q4_0 weights in the device's weights
// buffer (Q4_0 / Q8_0 repacked into panels), anonymous memory as models hold
// them. GEMV rotates through enough weight copies (>= 256 MiB) that every
// call streams from DRAM, not L3. A summary at the end gives GEMV as a
// fraction of the measured 2-thread read bandwidth and GEMM next to the
// 2-thread peaks, so ratios come from one run on a (shared, noisy) machine.
#include <benchmark/benchmark.h>
#include <fmt/format.h>

#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/host_memory.h"
#include "backends/cpu/isa.h"
#include "probes.h"
#include "tessera/graph.h"
#include "tessera/ops.h"

namespace tessera::bench {
namespace {

constexpr int kThreads = 2;  // TESSERA_BENCH_THREADS overrides
constexpr size_t kColdBytes = size_t{256} << 20;    // GEMV weight rotation: 8x this L3
constexpr size_t kProbeBytes = size_t{512} << 20;   // read-bandwidth buffer
constexpr int64_t kProbeRounds = int64_t{1} << 20;  // FMA / dpbusd rounds per call

// Anonymous memory, as host buffers hold it; first touched here.
struct HostBlock {
  explicit HostBlock(size_t n) : bytes(n), p(static_cast<uint8_t*>(cpu::host_allocate(n, 64, "bench"))) {
    std::memset(p, 0x5a, n);
  }
  ~HostBlock() { cpu::host_release(p, bytes); }
  size_t bytes;
  uint8_t* p;
};

void read_bandwidth(benchmark::State& st, const HostBlock* block) {
  const size_t slice = block->bytes / static_cast<size_t>(st.threads()) / 256 * 256;
  const uint8_t* p = block->p + slice * static_cast<size_t>(st.thread_index());
  for (auto _ : st) benchmark::DoNotOptimize(read_bytes_avx512(p, slice));
  st.counters["GB/s"] = benchmark::Counter(static_cast<double>(slice) / 1e9,
                                           benchmark::Counter::kIsIterationInvariantRate);
}

void fma_peak(benchmark::State& st) {
  for (auto _ : st) benchmark::DoNotOptimize(fma_chains_avx512(kProbeRounds));
  st.counters["GFLOP/s"] = benchmark::Counter(
      static_cast<double>(kProbeRounds) * kProbeChains * 16 * 2 / 1e9,
      benchmark::Counter::kIsIterationInvariantRate);
}

void dpbusd_peak(benchmark::State& st) {
  for (auto _ : st) benchmark::DoNotOptimize(dpbusd_chains_avx512(kProbeRounds));
  st.counters["GOP/s"] = benchmark::Counter(  // one MAC = 2 ops
      static_cast<double>(kProbeRounds) * kProbeChains * 64 * 2 / 1e9,
      benchmark::Counter::kIsIterationInvariantRate);
}

struct MatCase {
  DType type;
  int64_t k, m, n;  // w [k, m] (m rows of k), x [k, n]
};

// y = w x on the device, rotating through weight copies for GEMV.
void mul_mat(benchmark::State& st, cpu::CpuDevice* dev, MatCase c) {
  std::mt19937 rng(1234);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  Graph g;
  Tensor* x = g.new_tensor(DType::kF32, {c.k, c.n}, "x");
  const size_t w_bytes = *row_bytes(c.type, c.k) * static_cast<size_t>(c.m);
  const char* env_cold = std::getenv("TESSERA_BENCH_COLD_MB");  // 0: one copy, cache-warm
  const size_t cold = env_cold != nullptr ? std::strtoull(env_cold, nullptr, 10) << 20 : kColdBytes;
  const size_t copies = c.n == 1 ? std::max<size_t>(1, (cold + w_bytes - 1) / w_bytes) : 1;
  std::vector<Tensor*> ws, ys;
  BufferType& wt = dev->weights_buffer_type();
  size_t total = 0;
  for (size_t i = 0; i < copies; ++i) {
    ws.push_back(g.new_tensor(c.type, {c.k, c.m}, "w"));
    ys.push_back(ops::mul_mat(g, ws.back(), x));
    total += (wt.alloc_size(*ws.back()) + 63) / 64 * 64;
  }
  auto wbuf = wt.allocate(total);
  std::vector<float> row(static_cast<size_t>(c.k));
  std::vector<uint8_t> bytes(w_bytes);
  const size_t rb = *row_bytes(c.type, c.k);
  for (int64_t r = 0; r < c.m; ++r) {
    for (float& v : row) v = dist(rng);
    quantize_row(c.type, row.data(), bytes.data() + static_cast<size_t>(r) * rb, c.k);
  }
  size_t at = 0;
  for (Tensor* w : ws) {
    wbuf->place(*w, at);
    wbuf->set_tensor(*w, bytes.data());
    at += (wt.alloc_size(*w) + 63) / 64 * 64;
  }
  BufferType& host = dev->buffer_type();
  auto hbuf = host.allocate(x->n_bytes() + 64 + copies * ((ys[0]->n_bytes() + 63) / 64 * 64));
  hbuf->place(*x, 0);
  at = (x->n_bytes() + 63) / 64 * 64;
  for (Tensor* y : ys) {
    hbuf->place(*y, at);
    at += (y->n_bytes() + 63) / 64 * 64;
  }
  std::vector<float> xv(static_cast<size_t>(c.k * c.n));
  for (float& v : xv) v = dist(rng);
  hbuf->set_tensor(*x, xv.data());
  for (Tensor* y : ys) dev->compute(std::span<Tensor* const>(&y, 1));  // warm: touch everything

  size_t i = 0;
  for (auto _ : st) {
    dev->compute(std::span<Tensor* const>(&ys[i], 1));
    i = i + 1 == copies ? 0 : i + 1;
  }
  st.counters["GB/s"] = benchmark::Counter(static_cast<double>(w_bytes) / 1e9,
                                           benchmark::Counter::kIsIterationInvariantRate);
  st.counters["GFLOP/s"] = benchmark::Counter(2.0 * c.k * c.m * c.n / 1e9,
                                              benchmark::Counter::kIsIterationInvariantRate);
  st.SetLabel(fmt::format("{} copies, {}", copies, wt.name()));
}

// The console table, plus every counter kept by (name, threads) for the summary.
class Reporter : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    ConsoleReporter::ReportRuns(runs);
    for (const Run& r : runs) {
      if (r.error_occurred || r.run_type != Run::RT_Iteration) continue;
      for (const auto& [key, counter] : r.counters) {
        values_[r.run_name.function_name + "@" + std::to_string(r.threads)][key] = counter.value;
      }
    }
  }
  double get(const std::string& name, int threads, const std::string& counter) const {
    auto it = values_.find(name + "@" + std::to_string(threads));
    if (it == values_.end()) return 0.0;
    auto c = it->second.find(counter);
    return c == it->second.end() ? 0.0 : c->second;
  }

 private:
  std::map<std::string, std::map<std::string, double>> values_;
};

std::string mat_name(const MatCase& c) {
  return fmt::format("mul_mat/{}/{}x{}/batch:{}", dtype_name(c.type), c.m, c.k, c.n);
}

}  // namespace
}  // namespace tessera::bench

int main(int argc, char** argv) {
  using namespace tessera;
  using namespace tessera::bench;
  benchmark::Initialize(&argc, argv);
  const std::vector<cpu::Isa> tiers = cpu::supported_isas();
  const bool avx512 = tiers.back() == cpu::Isa::kAvx512;

  const char* env_threads = std::getenv("TESSERA_BENCH_THREADS");
  cpu::CpuBackend backend(env_threads != nullptr ? std::atoi(env_threads) : kThreads);
  cpu::CpuDevice& dev = backend.cpu_device();
  std::unique_ptr<HostBlock> probe;
  if (avx512) {
    probe = std::make_unique<HostBlock>(kProbeBytes);
    benchmark::RegisterBenchmark("probe/read_bw", read_bandwidth, probe.get())
        ->Threads(1)->Threads(2)->UseRealTime()->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark("probe/fma_zmm", fma_peak)->Threads(1)->Threads(2)->UseRealTime();
    benchmark::RegisterBenchmark("probe/dpbusd_zmm", dpbusd_peak)
        ->Threads(1)->Threads(2)->UseRealTime();
  }
  std::vector<MatCase> cases;
  for (int64_t n : {1, 512}) {
    for (DType type : {DType::kF16, DType::kQ8_0, DType::kQ4_0}) {
      for (auto [m, k] : {std::pair<int64_t, int64_t>{4096, 4096}, {5632, 2048}}) {
        cases.push_back({type, k, m, n});
        benchmark::RegisterBenchmark(mat_name(cases.back()).c_str(), mul_mat, &dev, cases.back())
            ->UseRealTime()->Unit(benchmark::kMillisecond);
      }
    }
  }

  Reporter reporter;
  fmt::print("tier {}, {} threads, {}\n", cpu::isa_name(dev.isa()), dev.threads(),
             dev.description());
  benchmark::RunSpecifiedBenchmarks(&reporter);
  benchmark::Shutdown();

  // Ratios from this run only.
  const double bw = reporter.get("probe/read_bw", 2, "GB/s");
  const double fma = reporter.get("probe/fma_zmm", 2, "GFLOP/s");
  const double vnni = reporter.get("probe/dpbusd_zmm", 2, "GOP/s");
  fmt::print("\nSummary (one run; shared machine, numbers drift between runs)\n");
  fmt::print("  read bandwidth  1 thread {:7.1f} GB/s   2 threads {:7.1f} GB/s\n",
             reporter.get("probe/read_bw", 1, "GB/s"), bw);
  fmt::print("  zmm FMA peak    1 thread {:7.1f} GFLOP/s 2 threads {:7.1f} GFLOP/s\n",
             reporter.get("probe/fma_zmm", 1, "GFLOP/s"), fma);
  fmt::print("  vpdpbusd peak   1 thread {:7.1f} GOP/s   2 threads {:7.1f} GOP/s\n",
             reporter.get("probe/dpbusd_zmm", 1, "GOP/s"), vnni);
  fmt::print("  {:<34} {:>9} {:>9} {:>10}\n", "case", "GB/s", "GFLOP/s", "of probe");
  for (const MatCase& c : cases) {
    const std::string name = mat_name(c);
    const double gbs = reporter.get(name, 1, "GB/s"), gfs = reporter.get(name, 1, "GFLOP/s");
    const double peak = c.n == 1 ? bw : c.type == DType::kF16 ? fma : vnni;
    fmt::print("  {:<34} {:9.2f} {:9.1f} {:9.1f}% {}\n", name, gbs, gfs,
               peak > 0 ? 100.0 * (c.n == 1 ? gbs : gfs) / peak : 0.0,
               c.n == 1 ? "of read BW" : c.type == DType::kF16 ? "of FMA peak" : "of dpbusd peak");
  }
  return 0;
}
