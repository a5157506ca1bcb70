// Each probe runs on `threads` std::threads released at once; its figure is
// the work of all of them over the wall time from release to the last one
// done, best of three (a shared machine only ever slows a probe down).
#include "cpu/ceilings.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "cpu/kernels/probes.h"
#include "tessera/runtime/host_memory.h"

namespace tessera::cpu {
namespace {

using Clock = std::chrono::steady_clock;

constexpr size_t kReadBytes = size_t{256} << 20;  // far past any L3
constexpr int64_t kRounds = int64_t{1} << 21;     // ~5-10 ms of FMA / dot chains
constexpr int kTries = 3;

// Seconds for fn(ith) on every thread, best of kTries.
template <class Fn>
double best_seconds(int threads, const Fn& fn) {
  double best = 1e30;
  for (int t = 0; t < kTries; ++t) {
    std::atomic<bool> go{false};
    std::atomic<int> ready{0};
    std::vector<Clock::time_point> done(static_cast<size_t>(threads));
    auto body = [&](int ith) {
      ready.fetch_add(1);
      while (!go.load(std::memory_order_acquire)) {
      }
      fn(ith);
      done[static_cast<size_t>(ith)] = Clock::now();
    };
    std::vector<std::thread> workers;
    for (int i = 1; i < threads; ++i) workers.emplace_back(body, i);
    while (ready.load() != threads - 1) std::this_thread::yield();
    ready.fetch_add(1);
    const Clock::time_point start = Clock::now();
    go.store(true, std::memory_order_release);
    body(0);
    for (std::thread& w : workers) w.join();
    const Clock::time_point end = *std::max_element(done.begin(), done.end());
    best = std::min(best, std::chrono::duration<double>(end - start).count());
  }
  return best;
}

uint64_t read_bytes_ref(const uint8_t* p, size_t bytes) {
  uint64_t acc = 0;
  for (size_t i = 0; i < bytes; i += 8) {
    uint64_t v;
    std::memcpy(&v, p + i, 8);
    acc ^= v;
  }
  return acc;
}

// Tiers that run the avx512 kernels (and so its probes).
bool zmm_tier(Isa isa) {
  return isa == Isa::kAvx512 || isa == Isa::kAmx;
}

double read_gbs_with(Isa isa, int threads) {
  auto* p = static_cast<uint8_t*>(host::host_allocate(kReadBytes, 64, "ceiling probe"));
  std::memset(p, 0x5a, kReadBytes);  // touched: no page faults in the timing
  const size_t slice = kReadBytes / static_cast<size_t>(threads) / 256 * 256;
  std::atomic<uint64_t> sink{0};
  const double s = best_seconds(threads, [&](int ith) {
    const uint8_t* q = p + slice * static_cast<size_t>(ith);
    const uint64_t v = zmm_tier(isa)       ? probes::avx512::read_bytes(q, slice)
                       : isa == Isa::kAvx2 ? probes::avx2::read_bytes(q, slice)
                                           : read_bytes_ref(q, slice);
    sink.fetch_xor(v, std::memory_order_relaxed);
  });
  host::host_release(p, kReadBytes);
  return double(slice) * threads / s / 1e9;
}

// The machine's read bandwidth: the better of the tier's own loads and, on
// the zmm tiers, ymm loads too. On a Sapphire Rapids guest the zmm loop read ~30
// GB/s on 2 threads and the ymm loop ~37: a ceiling from the zmm loop alone
// let avx512 rows claim ~100% of a bandwidth the machine exceeds.
double read_gbs(Isa isa, int threads) {
  const double own = read_gbs_with(isa, threads);
  return zmm_tier(isa) ? std::max(own, read_gbs_with(Isa::kAvx2, threads)) : own;
}

// Operations per second of `probe` (ops_per_round per round per thread).
template <class Probe>
double peak(int threads, double ops_per_round, const Probe& probe) {
  std::atomic<int64_t> sink{0};
  const double s = best_seconds(threads, [&](int) {
    sink.fetch_add(static_cast<int64_t>(probe(kRounds)), std::memory_order_relaxed);
  });
  return ops_per_round * double(kRounds) * threads / s / 1e9;
}

}  // namespace

Ceilings measure_ceilings(Isa isa, int threads) {
  threads = std::max(threads, 1);
  Ceilings c;
  c.tier = std::string(isa_name(isa));
  c.threads = threads;
  c.read_gbs = read_gbs(isa, threads);
  constexpr double kC = probes::kChains;
  if (isa == Isa::kAvx2) {
    c.fma_gflops = peak(threads, kC * 8 * 2, probes::avx2::fma);
    c.int8_gops = peak(threads, kC * 32 * 2, probes::avx2::maddubs);
    c.int8_how = "vpmaddubsw + vpmaddwd, ymm";
  } else if (zmm_tier(isa)) {
    c.fma_gflops = peak(threads, kC * 16 * 2, probes::avx512::fma);
    if (isa == Isa::kAmx) {  // the instruction its Q4_0 / Q8_0 GEMMs run on
      c.int8_gops = peak(threads, 16 * 16 * 64 * 2.0, probes::amx::tdpbssd);
      c.int8_how = "tdpbssd, AMX-INT8 tiles";
    } else {
      c.int8_gops = peak(threads, kC * 64 * 2, probes::avx512::dpbusd);
      c.int8_how = "vpdpbusd, zmm (AVX-512 VNNI)";
    }
    c.bf16_gflops = peak(threads, kC * 32 * 2, probes::avx512::dpbf16);
  } else {
    c.int8_how = "none: the scalar reference tier";
  }
  if (isa != Isa::kRef && has_avx_vnni()) {
    c.avx_vnni_gops = peak(threads, kC * 32 * 2, probes::avx2::avx_vnni);
  }
  return c;
}

}  // namespace tessera::cpu
