// CPU MUL_MAT micro-benchmarks with roofline probes in the same run
// (docs/cpu-kernels.md, "Ceilings and probes"): memory read bandwidth, FMA peak and the int8 dot
// peak of the tier's own instructions (backends/cpu/ceilings.h) on 1 and 2 threads, then MUL_MAT on
// the CPU device (2 threads) at batch 1 (GEMV; and one token's MUL_MAT_ID at gpt-oss-20b's and
// Qwen3-30B-A3B's expert shapes) and 512 (GEMM) for F16, Q8_0, Q4_0, IQ4_NL, MXFP4, Q2_K,
// Q3_K, Q4_K, Q5_K, Q6_K and IQ4_XS weights in the device's weights buffer (repacked into panels),
// anonymous memory as models hold them. GEMV rotates through enough weight copies (>= 256 MiB) that
// every call streams from DRAM, not L3. A summary at the end gives GEMV as a fraction of the
// measured 2-thread read bandwidth and GEMM next to the 2-thread peaks, so ratios come from one run
// on a (shared, noisy) machine.
#include <benchmark/benchmark.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "backends/cpu/ceilings.h"
#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/isa.h"
#include "tessera/core/graph.h"
#include "tessera/core/ops.h"
#include "tessera/runtime/host_memory.h"

namespace tessera::bench {
namespace {

constexpr int kThreads = 2;                         // TESSERA_BENCH_THREADS overrides
constexpr size_t kColdBytes = size_t{256} << 20;    // GEMV weight rotation: 8x this L3

// The device tier's ceilings, measured once per iteration (a probe is ~0.2 s).
void ceilings(benchmark::State& st, cpu::Isa isa, int threads) {
  Ceilings c;
  for (auto _ : st) c = cpu::measure_ceilings(isa, threads);
  st.counters["GB/s"] = c.read_gbs;
  st.counters["GFLOP/s"] = c.fma_gflops;
  st.counters["GOP/s"] = c.int8_gops;
  st.SetLabel(c.int8_how);
}

struct MatCase {
  DType type;
  int64_t k, m, n;  // w [k, m] (m rows of k), x [k, n]
  // MUL_MAT_ID: w [k, m, experts], one token choosing `used` of them; 0: MUL_MAT.
  int64_t experts = 0, used = 0;
};

size_t cold_bytes() {
  const char* env_cold = std::getenv("TESSERA_BENCH_COLD_MB");  // 0: one copy, cache-warm
  return env_cold != nullptr ? std::strtoull(env_cold, nullptr, 10) << 20 : kColdBytes;
}

// m rows of k values uniform in [-1, 1), quantized to `type`.
std::vector<uint8_t> random_rows(DType type, int64_t k, int64_t m, std::mt19937& rng) {
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  const size_t rb = *row_bytes(type, k);
  std::vector<float> row(static_cast<size_t>(k));
  std::vector<uint8_t> bytes(rb * static_cast<size_t>(m));
  for (int64_t r = 0; r < m; ++r) {
    for (float& v : row) v = dist(rng);
    quantize_row(type, row.data(), bytes.data() + static_cast<size_t>(r) * rb, k);
  }
  return bytes;
}

// y = w x on the device, rotating through weight copies for GEMV.
void mul_mat(benchmark::State& st, cpu::CpuDevice* dev, MatCase c) {
  std::mt19937 rng(1234);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  Graph g;
  Tensor* x = g.new_tensor(DType::kF32, {c.k, c.n}, "x");
  const size_t w_bytes = *row_bytes(c.type, c.k) * static_cast<size_t>(c.m);
  const size_t cold = cold_bytes();
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
  const std::vector<uint8_t> bytes = random_rows(c.type, c.k, c.m, rng);
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

// One token's MUL_MAT_ID (decode of a mixture of experts): each call reads
// `used` experts no call before it read lately, rotating through the
// experts of enough copies (>= 256 MiB) that every call streams from DRAM.
void mul_mat_id(benchmark::State& st, cpu::CpuDevice* dev, MatCase c) {
  std::mt19937 rng(1234);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  Graph g;
  const size_t rb = *row_bytes(c.type, c.k);
  const size_t expert_bytes = rb * static_cast<size_t>(c.m);
  const size_t copies = std::max<size_t>(
      1, (cold_bytes() + expert_bytes * c.experts - 1) / (expert_bytes * c.experts));
  Tensor* x = g.new_tensor(DType::kF32, {c.k, 1, 1}, "x");
  Tensor* ids = g.new_tensor(DType::kI32, {c.used, 1}, "ids");
  std::vector<Tensor*> ws, ys;
  BufferType& wt = dev->weights_buffer_type();
  size_t total = 0;
  for (size_t i = 0; i < copies; ++i) {
    ws.push_back(g.new_tensor(c.type, {c.k, c.m, c.experts}, "w"));
    ys.push_back(ops::mul_mat_id(g, ws.back(), x, ids));
    total += (wt.alloc_size(*ws.back()) + 63) / 64 * 64;
  }
  auto wbuf = wt.allocate(total);
  const std::vector<uint8_t> bytes = random_rows(c.type, c.k, c.m, rng);  // every expert's
  size_t at = 0;
  for (Tensor* w : ws) {
    wbuf->place(*w, at);
    for (int64_t e = 0; e < c.experts; ++e) {
      wbuf->set_tensor(*w, bytes.data(), static_cast<size_t>(e) * expert_bytes, expert_bytes);
    }
    at += (wt.alloc_size(*w) + 63) / 64 * 64;
  }
  BufferType& host = dev->buffer_type();
  const size_t y_bytes = (ys[0]->n_bytes() + 63) / 64 * 64;
  auto hbuf = host.allocate(x->n_bytes() + 128 + ids->n_bytes() + copies * y_bytes);
  hbuf->place(*x, 0);
  at = (x->n_bytes() + 63) / 64 * 64;
  hbuf->place(*ids, at);
  at += (ids->n_bytes() + 63) / 64 * 64;
  for (Tensor* y : ys) {
    hbuf->place(*y, at);
    at += y_bytes;
  }
  std::vector<float> xv(static_cast<size_t>(c.k));
  for (float& v : xv) v = dist(rng);
  hbuf->set_tensor(*x, xv.data());
  const int64_t groups = c.experts / c.used;
  std::vector<int32_t> idv(static_cast<size_t>(c.used));
  auto choose = [&](size_t call) {  // the experts of call `call`: a group of `used`
    const int64_t group = static_cast<int64_t>(call / copies) % groups;
    for (int64_t s = 0; s < c.used; ++s) idv[static_cast<size_t>(s)] = static_cast<int32_t>(group * c.used + s);
    hbuf->set_tensor(*ids, idv.data());
    return ys[call % copies];
  };
  for (size_t i = 0; i < copies * static_cast<size_t>(groups); ++i) {  // warm: touch everything
    Tensor* y = choose(i);
    dev->compute(std::span<Tensor* const>(&y, 1));
  }
  size_t i = 0;
  for (auto _ : st) {
    Tensor* y = choose(i++);
    dev->compute(std::span<Tensor* const>(&y, 1));
  }
  const double read = static_cast<double>(expert_bytes) * static_cast<double>(c.used);
  st.counters["GB/s"] = benchmark::Counter(read / 1e9, benchmark::Counter::kIsIterationInvariantRate);
  st.counters["GFLOP/s"] = benchmark::Counter(2.0 * c.k * c.m * c.used / 1e9,
                                              benchmark::Counter::kIsIterationInvariantRate);
  st.SetLabel(fmt::format("{} copies, {}", copies, wt.name()));
}

// The console table, plus every counter of every repetition kept by
// (name, threads) for the summary, which uses medians.
class Reporter : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    ConsoleReporter::ReportRuns(runs);
    for (const Run& r : runs) {
      if (r.error_occurred || r.run_type != Run::RT_Iteration) continue;
      for (const auto& [key, counter] : r.counters) {
        values_[key_of(r.run_name.function_name, static_cast<int>(r.threads))][key].push_back(
            counter.value);
      }
    }
  }
  double median(const std::string& name, int threads, const std::string& counter) const {
    auto it = values_.find(key_of(name, threads));
    if (it == values_.end()) return 0.0;
    auto c = it->second.find(counter);
    if (c == it->second.end() || c->second.empty()) return 0.0;
    std::vector<double> v = c->second;
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  }

 private:
  static std::string key_of(const std::string& name, int threads) {
    return name + "@" + std::to_string(threads);
  }
  std::map<std::string, std::map<std::string, std::vector<double>>> values_;
};

std::string mat_name(const MatCase& c) {
  if (c.experts > 0) {
    return fmt::format("mul_mat_id/{}/{}x{}/experts:{}/used:{}/batch:1", dtype_name(c.type), c.m,
                       c.k, c.experts, c.used);
  }
  return fmt::format("mul_mat/{}/{}x{}/batch:{}", dtype_name(c.type), c.m, c.k, c.n);
}

}  // namespace
}  // namespace tessera::bench

int main(int argc, char** argv) {
  using namespace tessera;
  using namespace tessera::bench;
  benchmark::Initialize(&argc, argv);
  const std::vector<cpu::Isa> tiers = cpu::supported_isas();

  const char* env_threads = std::getenv("TESSERA_BENCH_THREADS");
  cpu::CpuBackend backend(env_threads != nullptr ? std::atoi(env_threads) : kThreads);
  cpu::CpuDevice& dev = backend.cpu_device();
  const int nth = dev.threads();
  // The ceiling a case is held to: read bandwidth (GEMV), FMA (F16 GEMM) or
  // the tier's int8 dot (quantized GEMM), at the device's thread count.
  struct Roof {
    const char* name;
    const char* counter;
  };
  auto roof_of = [](const MatCase& c) {
    return c.n == 1                ? Roof{"probe/read_bw", "GB/s"}
           : c.type == DType::kF16 ? Roof{"probe/fma", "GFLOP/s"}
                                   : Roof{"probe/int8", "GOP/s"};
  };
  auto register_probe = [&](const std::string& name, int threads) {
    const std::string full = fmt::format("{}/probe_threads:{}", name, threads);
    benchmark::RegisterBenchmark(full.c_str(), ceilings, dev.isa(), threads)
        ->Iterations(1)
        ->UseRealTime()
        ->Unit(benchmark::kMillisecond);
  };
  register_probe("probe/start", 1);
  register_probe("probe/start", 2);
  // Each case sits between two runs of its roof probe; its ratio uses their mean.
  std::vector<MatCase> cases;
  // TESSERA_BENCH_BATCH: the GEMM cases' columns (default 512).
  const char* env_batch = std::getenv("TESSERA_BENCH_BATCH");
  const int64_t gemm_n = env_batch != nullptr ? std::max<int64_t>(2, std::atoll(env_batch)) : 512;
  // TESSERA_BENCH_TYPES: the weight types to run, e.g. "q4_k,q6_k" (default: all).
  const char* env_types = std::getenv("TESSERA_BENCH_TYPES");
  auto wanted = [env_types](DType type) {
    if (env_types == nullptr) return true;
    std::string list = ",", key = ",";
    list += env_types;
    list += ',';
    key += dtype_name(type);
    key += ',';
    return list.find(key) != std::string::npos;
  };
  for (int64_t n : {int64_t{1}, gemm_n}) {
    for (DType type : {DType::kF16, DType::kQ8_0, DType::kQ4_0, DType::kIQ4_NL, DType::kMXFP4, DType::kQ2_K,
                       DType::kQ3_K, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K, DType::kIQ4_XS}) {
      if (!wanted(type)) continue;
      // GEMV also at TinyLlama's other decode shapes (down, q / o, k / v): the smaller a
      // matrix, the more of its time goes to starting streams and ending runs.
      using Shape = std::pair<int64_t, int64_t>;
      std::vector<Shape> shapes = {{4096, 4096}, {5632, 2048}};
      if (n == 1) shapes.insert(shapes.end(), {Shape{2048, 5632}, {2048, 2048}, {256, 2048}});
      for (auto [m, k] : shapes) cases.push_back({type, k, m, n});
      // One token's expert matmuls: gpt-oss-20b's (32 experts of 2880 x 2880, 4 used) and
      // Qwen3-30B-A3B's gate / up and down (128 experts of 768 x 2048 and 2048 x 768, 8 used).
      if (n == 1) {
        if (2880 % dtype_info(type).block_size == 0) cases.push_back({type, 2880, 2880, 1, 32, 4});
        cases.push_back({type, 2048, 768, 1, 128, 8});
        cases.push_back({type, 768, 2048, 1, 128, 8});
      }
    }
  }
  for (const MatCase& c : cases) {
    const std::string name = mat_name(c);
    register_probe(fmt::format("{}/before:{}", roof_of(c).name, name), nth);
    benchmark::RegisterBenchmark(name.c_str(), c.experts > 0 ? mul_mat_id : mul_mat, &dev, c)
        ->UseRealTime()
        ->Unit(benchmark::kMillisecond);
    register_probe(fmt::format("{}/after:{}", roof_of(c).name, name), nth);
  }

  Reporter reporter;
  fmt::print("tier {}, {} threads, {}\n", cpu::isa_name(dev.isa()), nth, dev.description());
  benchmark::RunSpecifiedBenchmarks(&reporter);
  benchmark::Shutdown();

  // Ratios from this run only, each against probes taken just before and after.
  fmt::print(
      "\nSummary (medians over repetitions; shared machine, so only same-run ratios mean much)\n");
  fmt::print("  probes at start      1 thread      2 threads\n");
  for (const char* counter : {"GB/s", "GFLOP/s", "GOP/s"}) {
    fmt::print("  {:<18} {:9.1f} {:>3} {:9.1f} {}\n", counter,
               reporter.median("probe/start/probe_threads:1", 1, counter), "",
               reporter.median("probe/start/probe_threads:2", 1, counter), counter);
  }
  fmt::print("  {:<34} {:>8} {:>9} {:>12} {:>8}\n", "case (" + std::to_string(nth) + " threads)",
             "GB/s", "GFLOP/s", "roof", "ratio");
  for (const MatCase& c : cases) {
    const std::string name = mat_name(c);
    const double gbs = reporter.median(name, 1, "GB/s"), gfs = reporter.median(name, 1, "GFLOP/s");
    const Roof roof = roof_of(c);
    const double r =
        0.5 * (reporter.median(fmt::format("{}/before:{}/probe_threads:{}", roof.name, name, nth), 1,
                               roof.counter) +
               reporter.median(fmt::format("{}/after:{}/probe_threads:{}", roof.name, name, nth), 1,
                               roof.counter));
    const double v = c.n == 1 ? gbs : gfs;
    fmt::print("  {:<34} {:8.2f} {:9.1f} {:7.1f} {:<7} {:7.2f}\n", name, gbs, gfs, r, roof.counter,
               r > 0 ? v / r : 0.0);
  }
  return 0;
}
