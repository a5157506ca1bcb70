// Decode attention at depth: FLASH_ATTN_EXT for one query token over the F16
// K/V caches of every layer of a model shape, laid out as the engine's cache
// ([n_embd_kv, rows], a head's keys every n_embd_kv * 2 bytes) and read
// through the same views, with a mask whose tail past the filled cells is
// -inf (the cache-length bucket). One iteration is one token: n_layer nodes,
// so the caches (n_layer * 2 * rows * n_embd_kv * 2 bytes) stream from
// memory as in generation; a one-layer case keeps its cache in L3.
//
//   attn_bench [--benchmark_filter=...]   TESSERA_BENCH_THREADS (default 2)
//
// prompt_attn: one layer's attention for a prompt batch at depth (the
// kernel's compute, cache in L2 / L3), in GFLOP/s of the visible keys.
//
// Shape: TinyLlama-1.1B (22 layers, 32 heads, 4 KV heads, head dim 64).
#include <benchmark/benchmark.h>
#include <fmt/format.h>

#include <cmath>
#include <cstdlib>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/isa.h"
#include "tessera/core/graph.h"
#include "tessera/core/half.h"
#include "tessera/core/ops.h"

namespace tessera::bench {
namespace {

constexpr int kThreads = 2;
constexpr int64_t kLayers = 22, kHeads = 32, kHeadsKv = 4, kHeadDim = 64, kBucket = 256;

// depth cells filled; the graph reads round_up(depth + 1, kBucket) of them.
void decode_attn(benchmark::State& st, cpu::CpuDevice* dev, int64_t depth, int64_t layers) {
  const int64_t filled = depth + 1;
  const int64_t n_kv = (filled + kBucket - 1) / kBucket * kBucket;
  const int64_t rows = n_kv + 1;  // plus the trash row, as the engine's cache
  const int64_t n_embd_kv = kHeadsKv * kHeadDim;
  std::mt19937 rng(1234);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  Graph g;
  Tensor* q = g.new_tensor(DType::kF32, {kHeadDim, kHeads, 1}, "q");
  Tensor* mask = g.new_tensor(DType::kF32, {n_kv, 1}, "mask");
  std::vector<Tensor*> caches, outs;
  const size_t head = static_cast<size_t>(kHeadDim) * 2;
  for (int64_t il = 0; il < 2 * layers; ++il) {
    caches.push_back(g.new_tensor(DType::kF16, {n_embd_kv, rows}, "cache"));
  }
  for (int64_t il = 0; il < layers; ++il) {
    Tensor* kc = caches[static_cast<size_t>(2 * il)];
    Tensor* vc = caches[static_cast<size_t>(2 * il + 1)];
    Tensor* keys = ops::view(g, kc, {kHeadDim, n_kv, kHeadsKv}, {kc->nb[1], head}, 0);
    Tensor* values = ops::view(g, vc, {kHeadDim, n_kv, kHeadsKv}, {vc->nb[1], head}, 0);
    outs.push_back(ops::flash_attn_ext(g, ops::permute(g, q, 0, 2, 1, 3), keys, values, mask,
                                       1.0f / std::sqrt(static_cast<float>(kHeadDim))));
  }
  size_t total = 64 + q->n_bytes() + mask->n_bytes();
  for (Tensor* t : caches) total += (t->n_bytes() + 63) / 64 * 64;
  for (Tensor* t : outs) total += (t->n_bytes() + 63) / 64 * 64;
  auto buf = dev->buffer_type().allocate(total);
  size_t at = 0;
  auto place = [&](Tensor* t) {
    buf->place(*t, at);
    at += (t->n_bytes() + 63) / 64 * 64;
  };
  place(q);
  place(mask);
  for (Tensor* t : caches) place(t);
  for (Tensor* t : outs) place(t);
  for (Tensor* t : outs) {
    for (int i = 0; i < 3; ++i) buf->place(*t->src[i], 0);  // views: at their source
  }
  std::vector<float> qv(static_cast<size_t>(kHeadDim * kHeads));
  for (float& x : qv) x = 2.0f * dist(rng);
  buf->set_tensor(*q, qv.data());
  std::vector<float> mv(static_cast<size_t>(n_kv), 0.0f);
  for (int64_t j = filled; j < n_kv; ++j) mv[static_cast<size_t>(j)] = -INFINITY;
  buf->set_tensor(*mask, mv.data());
  std::vector<uint16_t> cv(static_cast<size_t>(n_embd_kv * rows));
  for (Tensor* t : caches) {
    for (uint16_t& h : cv) h = fp32_to_fp16(dist(rng));
    buf->set_tensor(*t, cv.data());
  }
  dev->compute(outs);  // warm
  for (auto _ : st) dev->compute(outs);
  const double kv_bytes =
      2.0 * static_cast<double>(layers) * static_cast<double>(filled * n_embd_kv) * 2.0;
  st.counters["KV GB/s"] =
      benchmark::Counter(kv_bytes / 1e9, benchmark::Counter::kIsIterationInvariantRate);
  st.SetLabel(fmt::format("n_kv {}, {:.1f} MiB K+V read", n_kv, kv_bytes / (1 << 20)));
}

// Prompt attention at depth: one layer's FLASH_ATTN_EXT for n_q query tokens
// after `depth` cached ones (causal mask, tail past the filled cells -inf),
// as a prompt batch of pp<n_q> @ d<depth> runs it. The cache (about 2.6 MiB at
// depth 2048) stays in L2 / L3: this is the kernel's compute.
void prompt_attn(benchmark::State& st, cpu::CpuDevice* dev, int64_t depth, int64_t n_q) {
  const int64_t filled = depth + n_q;
  const int64_t n_kv = (filled + kBucket - 1) / kBucket * kBucket;
  const int64_t n_embd_kv = kHeadsKv * kHeadDim;
  std::mt19937 rng(1234);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  Graph g;
  Tensor* q = g.new_tensor(DType::kF32, {kHeadDim, kHeads, n_q}, "q");
  Tensor* mask = g.new_tensor(DType::kF32, {n_kv, n_q}, "mask");
  Tensor* kc = g.new_tensor(DType::kF16, {n_embd_kv, n_kv}, "k cache");
  Tensor* vc = g.new_tensor(DType::kF16, {n_embd_kv, n_kv}, "v cache");
  const size_t head = static_cast<size_t>(kHeadDim) * 2;
  Tensor* keys = ops::view(g, kc, {kHeadDim, n_kv, kHeadsKv}, {kc->nb[1], head}, 0);
  Tensor* values = ops::view(g, vc, {kHeadDim, n_kv, kHeadsKv}, {vc->nb[1], head}, 0);
  Tensor* out = ops::flash_attn_ext(g, ops::permute(g, q, 0, 2, 1, 3), keys, values, mask,
                                    1.0f / std::sqrt(static_cast<float>(kHeadDim)));
  size_t total = 64;
  for (Tensor* t : {q, mask, kc, vc, out}) total += (t->n_bytes() + 63) / 64 * 64;
  auto buf = dev->buffer_type().allocate(total);
  size_t at = 0;
  for (Tensor* t : {q, mask, kc, vc, out}) {
    buf->place(*t, at);
    at += (t->n_bytes() + 63) / 64 * 64;
  }
  for (int i = 0; i < 3; ++i) buf->place(*out->src[i], 0);
  std::vector<float> qv(static_cast<size_t>(kHeadDim * kHeads * n_q));
  for (float& x : qv) x = 2.0f * dist(rng);
  buf->set_tensor(*q, qv.data());
  std::vector<float> mv(static_cast<size_t>(n_kv * n_q), 0.0f);
  for (int64_t i = 0; i < n_q; ++i) {
    for (int64_t j = depth + i + 1; j < n_kv; ++j)
      mv[static_cast<size_t>(i * n_kv + j)] = -INFINITY;
  }
  buf->set_tensor(*mask, mv.data());
  std::vector<uint16_t> cv(static_cast<size_t>(n_embd_kv * n_kv));
  for (Tensor* t : {kc, vc}) {
    for (uint16_t& h : cv) h = fp32_to_fp16(dist(rng));
    buf->set_tensor(*t, cv.data());
  }
  std::vector<Tensor*> outs{out};
  dev->compute(outs);  // warm
  for (auto _ : st) dev->compute(outs);
  // Multiply-adds of the visible keys: (d + dv) per head, key and query.
  const double keys_seen = static_cast<double>(n_q) * static_cast<double>(depth) +
                           static_cast<double>(n_q) * static_cast<double>(n_q + 1) / 2.0;
  const double flops = 2.0 * keys_seen * static_cast<double>(kHeads) * 2.0 * kHeadDim;
  st.counters["GFLOP/s"] =
      benchmark::Counter(flops / 1e9, benchmark::Counter::kIsIterationInvariantRate);
  st.SetLabel(fmt::format("n_kv {}", n_kv));
}

}  // namespace
}  // namespace tessera::bench

int main(int argc, char** argv) {
  using namespace tessera;
  benchmark::Initialize(&argc, argv);
  const char* env_threads = std::getenv("TESSERA_BENCH_THREADS");
  cpu::CpuBackend backend(env_threads != nullptr ? std::atoi(env_threads) : bench::kThreads);
  cpu::CpuDevice& dev = backend.cpu_device();
  // A model's layers (caches from DRAM), and one layer (its cache in L3:
  // the kernel's compute alone).
  for (auto [depth, layers] : {std::pair<int64_t, int64_t>{0, bench::kLayers},
                               {512, bench::kLayers},
                               {2048, bench::kLayers},
                               {4096, bench::kLayers},
                               {2048, 1}}) {
    const std::string name = fmt::format("decode_attn/depth:{}/layers:{}", depth, layers);
    benchmark::RegisterBenchmark(name.c_str(), bench::decode_attn, &dev, depth, layers)
        ->UseRealTime()
        ->Unit(benchmark::kMicrosecond);
  }
  for (auto [depth, n_q] : {std::pair<int64_t, int64_t>{0, 512}, {2048, 512}}) {
    const std::string name = fmt::format("prompt_attn/depth:{}/tokens:{}", depth, n_q);
    benchmark::RegisterBenchmark(name.c_str(), bench::prompt_attn, &dev, depth, n_q)
        ->UseRealTime()
        ->Unit(benchmark::kMillisecond);
  }
  fmt::print("tier {}, {} threads\n", cpu::isa_name(dev.isa()), dev.threads());
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
