// `tessera bench`: llama-bench's method and output. For each thread count,
// depth and test: one warm-up run, then r timed repetitions on an emptied
// cache; a prompt test (pp) decodes p tokens as one batch, a generation test
// (tg) n tokens one at a time, both after d tokens already in the cache
// (filled untimed). Tokens are random ids. Rows give mean ± sample standard
// deviation of tokens/s over the repetitions.
//
// Each row also gives its fraction of a ceiling measured in the same run,
// before and after the test (their mean): for tg the memory read bandwidth
// (weight and cache bytes read per token), for pp the arithmetic peak of
// the instructions the weights' type runs on (the tier's int8 dot for
// quantized weights, FMA for float ones).
//
// --profile adds, after the table, where each test's time went: per op class
// (matmuls by weight type) its calls, time, threads' busy share and weight
// bytes per step, then what lies between the ops and between the graphs
// (host work: batch setup, graph reuse or build, logits), beside the read
// probe of the same run.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <map>
#include <optional>
#include <random>

#include <unistd.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "common.h"
#include "tessera/backends/ceilings.h"
#include "tessera/backends/profile.h"
#include "tessera/core/error.h"
#include "tessera/engine/engine.h"
#include "tessera/models/quantize.h"

namespace tessera::cli {
namespace {

struct BenchFlags {
  ModelFlags model;
  std::vector<int> n_prompt{512};
  std::vector<int> n_gen{128};
  std::vector<int> n_depth{0};
  std::vector<int> parallel{1};  // sequences decoding together in the tg tests
  std::vector<int> threads;  // empty: the CPU backend's default
  int reps = 5;
  int64_t n_batch = 512;
  std::string output = "md";
  CacheTypeFlags cache_types;
  bool ceilings = true;
  bool profile = false;
};

struct Test {
  int n_prompt, n_gen, n_depth, threads;
  int n_seq = 1;           // tg: sequences generating together, one token each per pass
  std::vector<double> ns;  // per repetition

  std::string name() const {
    std::string s = n_prompt > 0 ? fmt::format("pp{}", n_prompt) : fmt::format("tg{}", n_gen);
    if (n_seq > 1) s += fmt::format(" x{}", n_seq);
    if (n_depth > 0) s += fmt::format(" @ d{}", n_depth);
    return s;
  }
  // Tokens a repetition makes (all sequences'): t/s is their total rate.
  double tokens() const { return n_prompt > 0 ? n_prompt : double(n_gen) * n_seq; }
  double avg_ts() const {
    double sum = 0;
    for (double x : ns) sum += tokens() * 1e9 / x;
    return sum / double(ns.size());
  }
  double stddev_ts() const {
    if (ns.size() < 2) return 0;
    const double mean = avg_ts();
    double sq = 0;
    for (double x : ns) sq += (tokens() * 1e9 / x - mean) * (tokens() * 1e9 / x - mean);
    return std::sqrt(sq / double(ns.size() - 1));
  }
};

// "llama 1.1B Q4_K_M": architecture, parameters, the file's mix (or the type
// holding most bytes).
struct ModelInfo {
  std::string type;
  uint64_t bytes = 0;
  uint64_t params = 0;
  // Per token: bytes of weights a matmul reads (every 2-D weight but the
  // embedding table, which is only gathered, unless the head reuses it; of a
  // mixture's expert tensors the n_expert_used / n_expert a token picks),
  // their multiply-adds, and whether the largest share is quantized.
  uint64_t active_params = 0;  // a mixture of experts: the parameters a token uses
  uint64_t matmul_bytes = 0;
  uint64_t matmul_macs = 0;
  uint64_t head_macs = 0;  // of those, the output head's: a prompt needs its last row only
  bool quantized = false;
};

ModelInfo describe(const Model& model) {
  ModelInfo info;
  std::map<std::string, uint64_t> by_type;
  const bool tied = model.file().find_tensor("output.weight") == nullptr;
  std::map<DType, uint64_t> matmul_by_type;
  const Hparams& hp = model.hparams();
  for (const gguf::TensorInfo& t : model.file().tensors()) {
    info.bytes += t.nbytes;
    info.params += static_cast<uint64_t>(t.n_elements());
    by_type[std::string(dtype_name(t.type))] += t.nbytes;
    // An expert tensor [.., .., n_expert]: a token reads n_used of its matrices.
    const bool experts = hp.n_expert > 0 && t.n_dims == 3 && t.name.find("_exps.") != std::string::npos;
    const auto share = [&](uint64_t v) { return experts ? v / uint64_t(hp.n_expert) * uint64_t(hp.n_expert_used) : v; };
    info.active_params += share(static_cast<uint64_t>(t.n_elements()));
    const bool head = t.name == "output.weight" || (tied && t.name == "token_embd.weight");
    if (t.n_dims >= 2 && (t.name != "token_embd.weight" || tied)) {
      info.matmul_bytes += share(t.nbytes);
      info.matmul_macs += share(static_cast<uint64_t>(t.n_elements()));
      if (head) info.head_macs += static_cast<uint64_t>(t.n_elements());
      matmul_by_type[t.type] += t.nbytes;
    }
  }
  if (!matmul_by_type.empty()) {
    const auto most = std::max_element(matmul_by_type.begin(), matmul_by_type.end(),
                                       [](auto& a, auto& b) { return a.second < b.second; });
    info.quantized = dtype_info(most->first).quantized;
  }
  std::string main_type;
  uint64_t most = 0;
  for (const auto& [name, bytes] : by_type) {
    if (bytes > most) {
      most = bytes;
      main_type = name;
    }
  }
  for (char& c : main_type) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  // A mix (Q4_K_M puts Q6_K on some tensors, Q4_K on most) is named by the
  // file's general.file_type, as llama-bench names it; the type holding most
  // bytes names a file without one, or with a number no mix has.
  if (const gguf::Value* ft = model.file().find("general.file_type"); ft && ft->is_integer()) {
    try {
      if (const auto mix = quantize_mix_from_name(std::to_string(ft->u64()))) main_type = mix->name;
    } catch (const Error&) {  // a negative number: no mix
    }
  }
  const auto size_of = [](double p) {
    return p >= 1e9 ? fmt::format("{:.1f}B", p / 1e9)
           : p >= 1e7 ? fmt::format("{:.0f}M", p / 1e6)
                      : fmt::format("{:.1f}M", p / 1e6);
  };
  // A mixture of experts as llama-bench names one: total.Aactive ("30B.A3B").
  std::string size = size_of(double(info.params));
  if (hp.n_expert > 0) size += ".A" + size_of(double(info.active_params));
  info.type = fmt::format("{} {} {}", model.hparams().architecture, size, main_type);
  return info;
}

std::string bytes_text(uint64_t b) {
  return b >= (uint64_t{1} << 30) ? fmt::format("{:.2f} GiB", double(b) / double(1u << 30))
                                  : fmt::format("{:.2f} MiB", double(b) / double(1u << 20));
}

std::string params_text(uint64_t p) {
  return p >= 1000000000 ? fmt::format("{:.2f} B", double(p) / 1e9)
                         : fmt::format("{:.2f} M", double(p) / 1e6);
}

// The test's rate as a fraction of its ceiling: the figure it reaches
// (GB/s or GOP/s) and the ceiling's, with the ceiling's name.
struct Roof {
  double reached = 0, ceiling = 0;
  std::string what;  // "read GB/s", "int8 GOP/s", "FMA GFLOP/s"
  double fraction() const { return ceiling > 0 ? reached / ceiling : 0.0; }
};

Roof roof_of(const Test& t, const Model& model, const ModelInfo& info, const Ceilings& c,
             DType type_k, DType type_v) {
  const Hparams& hp = model.hparams();
  const double ts = t.avg_ts();
  // Cache rows each new token attends to, on average over the test.
  const double ctx = t.n_depth + (t.n_prompt > 0 ? t.n_prompt : t.n_gen) / 2.0;
  Roof r;
  if (t.n_prompt == 0) {
    const double cache_row = double(*row_bytes(type_k, hp.n_embd_kv()) +
                                    *row_bytes(type_v, hp.n_embd_kv()));
    const double bytes = double(info.matmul_bytes) + double(hp.n_layer) * ctx * cache_row;
    r = {bytes * ts / 1e9, c.read_gbs, "read GB/s"};
  } else {
    // q.k and p.v over the causal context: 2 x n_head x head_dim MACs per cache row.
    const double attn = double(hp.n_layer) * 2.0 * double(hp.n_head * hp.head_dim) * ctx;
    // The head runs for the prompt's last token only.
    const double head = double(info.head_macs) / t.n_prompt;
    const double ops = 2.0 * (double(info.matmul_macs - info.head_macs) + head + attn);
    r = info.quantized ? Roof{ops * ts / 1e9, c.int8_gops, "int8 GOP/s"}
                       : Roof{ops * ts / 1e9, c.fma_gflops, "FMA GFLOP/s"};
  }
  return r;
}

// The ceilings of the device the model's layers run on: the GPU's when it
// holds every layer and the output layer, else the CPU's at `threads`.
// None when that backend cannot measure them, or when the model is split
// (no single ceiling bounds it).
std::optional<Ceilings> ceilings(Runtime& runtime, const Model& model, int threads) {
  Device* gpu = nullptr;
  for (Device* d : model.devices()) {
    if (d->type() == DeviceType::kGpu) gpu = d;
  }
  if (gpu != nullptr) {
    const bool whole = &model.output_device() == gpu &&
                       std::all_of(model.layers().begin(), model.layers().end(),
                                   [&](const auto& l) { return l.device == gpu; });
    auto* fn = reinterpret_cast<MeasureCeilingsFn>(gpu->backend().proc_address(kMeasureCeilingsProc));
    if (!whole || fn == nullptr) return std::nullopt;
    return fn(*gpu, threads);
  }
  Backend* cpu = runtime.find_backend("CPU");
  auto* fn = cpu ? reinterpret_cast<MeasureCeilingsFn>(cpu->proc_address(kMeasureCeilingsProc))
                 : nullptr;
  if (fn == nullptr) return std::nullopt;
  return fn(cpu->device(0), threads);
}

Ceilings mean(const Ceilings& a, const Ceilings& b) {
  Ceilings m = a;
  m.read_gbs = (a.read_gbs + b.read_gbs) / 2;
  m.fma_gflops = (a.fma_gflops + b.fma_gflops) / 2;
  m.int8_gops = (a.int8_gops + b.int8_gops) / 2;
  m.avx_vnni_gops = (a.avx_vnni_gops + b.avx_vnni_gops) / 2;
  m.bf16_gflops = (a.bf16_gflops + b.bf16_gflops) / 2;
  return m;
}

// Decodes `count` random tokens of sequence `seq` from position `pos`,
// `n_batch` at a time (one at a time with n_batch 1).
void decode_random(Context& ctx, std::mt19937& rng, int64_t pos, int64_t count, int64_t n_batch,
                   int32_t seq = 0) {
  Batch batch;
  const auto nv = static_cast<uint32_t>(ctx.n_vocab());
  for (int64_t i = 0; i < count; i += n_batch) {
    batch.clear();
    const int64_t m = std::min(n_batch, count - i);
    for (int64_t j = 0; j < m; ++j) {
      batch.add(static_cast<int32_t>(rng() % nv), static_cast<int32_t>(pos + i + j), {seq}, j + 1 == m);
    }
    ctx.decode(batch);
  }
}

// `count` passes of one random token for each of sequences 0 .. n_seq - 1
// (from position `pos`), every token's logits out: as n_seq clients decode.
void decode_parallel(Context& ctx, std::mt19937& rng, int64_t pos, int64_t count, int n_seq) {
  Batch batch;
  const auto nv = static_cast<uint32_t>(ctx.n_vocab());
  for (int64_t i = 0; i < count; ++i) {
    batch.clear();
    for (int32_t s = 0; s < n_seq; ++s) {
      batch.add(static_cast<int32_t>(rng() % nv), static_cast<int32_t>(pos + i), {s}, true);
    }
    ctx.decode(batch);
  }
}

// Sets the CPU device's op-profile sink (nullptr: none), where it has one.
void set_profile(const LoadedModel& lm, OpProfile* sink) {
  Device& cpu = lm.runtime->device("CPU0");
  if (auto* fn = reinterpret_cast<SetOpProfileFn>(cpu.backend().proc_address(kOpProfileProc))) {
    fn(cpu, sink);
  }
}

// The timed repetitions' ops into *profile when given.
void run_test(const LoadedModel& lm, const BenchFlags& f, Test& t, OpProfile* profile) {
  const int64_t n_ctx = int64_t{t.n_seq} * (t.n_depth + std::max(t.n_prompt, t.n_gen) + 1);
  Context ctx(*lm.model, {.n_ctx = n_ctx,
                          .n_batch = std::max<int64_t>(f.n_batch, t.n_prompt),
                          .type_k = cache_type("--cache-type-k", f.cache_types.k),
                          .type_v = cache_type("--cache-type-v", f.cache_types.v)});
  std::mt19937 rng(42);
  auto once = [&](bool timed) {
    ctx.cache().clear();
    for (int32_t s = 0; s < t.n_seq && t.n_depth > 0; ++s) {
      decode_random(ctx, rng, 0, t.n_depth, ctx.n_batch(), s);
    }
    if (timed && profile != nullptr) set_profile(lm, profile);
    const auto t0 = std::chrono::steady_clock::now();
    if (t.n_prompt > 0) {
      decode_random(ctx, rng, t.n_depth, t.n_prompt, t.n_prompt);
    } else if (t.n_seq > 1) {
      decode_parallel(ctx, rng, t.n_depth, timed ? t.n_gen : 1, t.n_seq);
    } else {
      decode_random(ctx, rng, t.n_depth, timed ? t.n_gen : 1, 1);
    }
    const auto t1 = std::chrono::steady_clock::now();
    if (timed && profile != nullptr) set_profile(lm, nullptr);
    if (timed) t.ns.push_back(std::chrono::duration<double, std::nano>(t1 - t0).count());
  };
  once(false);  // warm-up: plans built, pages touched
  const bool tty = isatty(fileno(stderr)) != 0;
  for (int r = 0; r < f.reps; ++r) {
    if (tty) {
      fmt::print(stderr, "\rbench: {} threads {}, repetition {}/{}   ", t.name(), t.threads, r + 1,
                 f.reps);
    }
    once(true);
  }
  if (tty) fmt::print(stderr, "\r{:80}\r", "");
}

// A test's profile (--profile) per decode step: its op classes by time, then
// the time between ops and between graphs, beside the read probe.
std::string profile_text(const Test& t, const OpProfile& p, const std::optional<Ceilings>& c) {
  const double steps = double(t.n_prompt > 0 ? 1 : t.n_gen) * double(t.ns.size());
  double wall = 0;
  for (double x : t.ns) wall += x * 1e-9;
  if (steps <= 0 || wall <= 0) return {};
  std::string out = fmt::format("\nprofile of {}, {} threads: {:.0f} steps, {:.2f} ms a step", t.name(),
                                t.threads, steps, 1e3 * wall / steps);
  if (c) out += fmt::format("; read probe {:.1f} GB/s ({})", c->read_gbs, c->tier);
  out += "\n\n";
  out += fmt::format("| {:<24} | {:>10} | {:>9} | {:>9} | {:>11} | {:>9} | {:>8} | {:>8} |\n", "op",
                     "calls/step", "ms/step", "% of step", "busy (mean)", "MB/step", "GB/s", "of probe");
  out += fmt::format("| {:-<24} | {:->9}: | {:->8}: | {:->8}: | {:->10}: | {:->8}: | {:->7}: | {:->7}: |\n",
                     "", "", "", "", "", "", "", "");
  std::vector<std::pair<std::string, OpProfileRow>> rows(p.ops.begin(), p.ops.end());
  std::sort(rows.begin(), rows.end(),
            [](const auto& a, const auto& b) { return a.second.seconds > b.second.seconds; });
  double op_seconds = 0, mm_seconds = 0, mm_bytes = 0;
  // A prompt's matmuls are arithmetic: their bytes and GB/s say nothing there.
  const bool reads = t.n_prompt == 0;
  const auto line = [&](std::string_view name, double calls, double seconds, double busy,
                        double bytes) {
    if (!reads) bytes = 0;
    const double gbs = bytes > 0 && seconds > 0 ? bytes / seconds * 1e-9 : 0;
    out += fmt::format("| {:<24} | {:>10} | {:>9.3f} | {:>8.1f}% | {:>11} | {:>9} | {:>8} | {:>8} |\n",
                       name, calls > 0 ? fmt::format("{:.1f}", calls / steps) : "",
                       1e3 * seconds / steps, 100 * seconds / wall,
                       busy > 0 ? fmt::format("{:.0f}%", 100 * busy) : "",
                       bytes > 0 ? fmt::format("{:.1f}", bytes / steps * 1e-6) : "",
                       gbs > 0 ? fmt::format("{:.1f}", gbs) : "",
                       gbs > 0 && c && c->read_gbs > 0 ? fmt::format("{:.0f}%", 100 * gbs / c->read_gbs) : "");
  };
  for (const auto& [name, r] : rows) {
    op_seconds += r.seconds;
    if (r.weight_bytes > 0) {
      mm_seconds += r.seconds;
      mm_bytes += r.weight_bytes;
    }
    line(name, double(r.calls), r.seconds, r.seconds > 0 ? r.busy_mean_seconds / r.seconds : 0,
         r.weight_bytes);
  }
  line("(weight matmuls)", 0, mm_seconds, 0, mm_bytes);
  line("(between ops)", 0, std::max(0.0, p.compute_seconds - op_seconds), 0, 0);
  // (With a BLAS or GPU device in the graph, its ops' time counts here.)
  line("(host, between graphs)", double(p.graphs), std::max(0.0, wall - p.compute_seconds), 0, 0);
  line("(step)", 0, wall, 0, mm_bytes);
  return out;
}

std::string backends_of(const Model& model) {
  std::string out;
  for (Device* d : model.devices()) {
    std::string name(d->backend().name());
    if (out.find(name) == std::string::npos) out += (out.empty() ? "" : ",") + name;
  }
  return out;
}

int bench(const BenchFlags& f) {
  LoadedModel lm = load_model(f.model);
  check_cache_types(*lm.model, f.cache_types);
  const ModelInfo info = describe(*lm.model);
  const std::string backends = backends_of(*lm.model);
  std::vector<int> threads = f.threads;
  if (threads.empty()) threads.push_back(cpu_threads(*lm.runtime));  // the backend's default

  std::vector<Test> tests;
  for (int th : threads) {
    for (int d : f.n_depth) {
      for (int p : f.n_prompt) {
        if (p > 0) tests.push_back({p, 0, d, th, 1, {}});
      }
      for (int n : f.n_gen) {
        for (int np : f.parallel) {
          if (n > 0) tests.push_back({0, n, d, th, np, {}});
        }
      }
    }
  }
  const bool markdown = f.output == "md";
  if (markdown) {
    fmt::print("| {:<30} | {:>10} | {:>10} | {:<10} | {:>7} | {:>15} | {:>20} | {:>28} |\n",
               "model", "size", "params", "backend", "threads", "test", "t/s", "of ceiling");
    fmt::print("| {:-<30} | {:->9}: | {:->9}: | {:-<10} | {:->6}: | {:->14}: | {:->19}: | {:->27}: |\n",
               "", "", "", "", "", "", "", "");
    std::fflush(stdout);
  }
  nlohmann::json rows = nlohmann::json::array();
  std::string profiles;  // --profile: printed after the table
  const Device& cpu = lm.runtime->device("CPU0");
  const DType type_k = cache_type("--cache-type-k", f.cache_types.k);
  const DType type_v = cache_type("--cache-type-v", f.cache_types.v);
  for (Test& t : tests) {
    if (t.threads > 0) set_cpu_threads(*lm.runtime, t.threads);
    std::optional<Ceilings> before, after;
    if (f.ceilings) before = ceilings(*lm.runtime, *lm.model, t.threads);
    OpProfile profile;
    run_test(lm, f, t, f.profile ? &profile : nullptr);
    if (f.ceilings) after = ceilings(*lm.runtime, *lm.model, t.threads);
    std::optional<Ceilings> ceiling;
    Roof roof;
    if (before && after) {
      ceiling = mean(*before, *after);
      // (With several sequences a pass reads what their tokens' experts
      // share: no fixed byte count, so no fraction.)
      if (t.n_seq == 1) roof = roof_of(t, *lm.model, info, *ceiling, type_k, type_v);
    }
    if (markdown) {
      const std::string of = roof.ceiling > 0
                                 ? fmt::format("{:.0f}% of {:.1f} {}", 100 * roof.fraction(),
                                               roof.ceiling, roof.what)
                                 : "-";
      fmt::print("| {:<30} | {:>10} | {:>10} | {:<10} | {:>7} | {:>15} | {:>20} | {:>28} |\n",
                 info.type, bytes_text(info.bytes), params_text(info.params), backends,
                 t.threads, t.name(), fmt::format("{:.2f} ± {:.2f}", t.avg_ts(), t.stddev_ts()),
                 of);
      std::fflush(stdout);
    }
    std::vector<double> ts;
    for (double x : t.ns) ts.push_back(t.tokens() * 1e9 / x);
    double avg_ns = 0;
    for (double x : t.ns) avg_ns += x / double(t.ns.size());
    double sd_ns = 0;
    for (double x : t.ns) sd_ns += (x - avg_ns) * (x - avg_ns);
    sd_ns = t.ns.size() > 1 ? std::sqrt(sd_ns / double(t.ns.size() - 1)) : 0.0;
    const std::time_t now = std::time(nullptr);
    char stamp[32];
    std::strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
    rows.push_back({{"cpu_info", std::string(cpu.description())},
                    {"backends", backends},
                    {"model_filename", f.model.model},
                    {"model_type", info.type},
                    {"model_size", info.bytes},
                    {"model_n_params", info.params},
                    {"n_batch", std::max<int64_t>(f.n_batch, t.n_prompt)},
                    {"n_threads", t.threads},
                    {"type_k", f.cache_types.k},
                    {"type_v", f.cache_types.v},
                    {"n_prompt", t.n_prompt},
                    {"n_gen", t.n_gen},
                    {"n_depth", t.n_depth},
                    {"n_seq", t.n_seq},
                    {"test_time", stamp},
                    {"avg_ns", static_cast<uint64_t>(avg_ns)},
                    {"stddev_ns", static_cast<uint64_t>(sd_ns)},
                    {"avg_ts", t.avg_ts()},
                    {"stddev_ts", t.stddev_ts()},
                    {"samples_ns", t.ns},
                    {"samples_ts", ts}});
    if (f.profile) {
      profiles += profile_text(t, profile, ceiling);
      nlohmann::json ops = nlohmann::json::object();
      for (const auto& [name, r] : profile.ops) {
        ops[name] = {{"calls", r.calls},
                     {"seconds", r.seconds},
                     {"busy_max_seconds", r.busy_max_seconds},
                     {"busy_mean_seconds", r.busy_mean_seconds},
                     {"weight_bytes", r.weight_bytes}};
      }
      rows.back()["profile"] = {{"ops", ops},
                                {"graphs", profile.graphs},
                                {"compute_seconds", profile.compute_seconds}};
    }
    if (ceiling && roof.ceiling > 0) {
      rows.back()["ceilings"] = {{"tier", ceiling->tier},
                                 {"threads", ceiling->threads},
                                 {"read_gbs", ceiling->read_gbs},
                                 {"fma_gflops", ceiling->fma_gflops},
                                 {"int8_gops", ceiling->int8_gops},
                                 {"int8_how", ceiling->int8_how},
                                 {"avx_vnni_gops", ceiling->avx_vnni_gops},
                                 {"bf16_gflops", ceiling->bf16_gflops}};
      rows.back()["ceiling"] = roof.what;
      rows.back()["ceiling_value"] = roof.ceiling;
      rows.back()["reached_value"] = roof.reached;
      rows.back()["ceiling_fraction"] = roof.fraction();
    }
  }
  if (!markdown) fmt::print("{}\n", rows.dump(2));
  if (markdown && !profiles.empty()) fmt::print("{}", profiles);
  return 0;
}

}  // namespace

Runner add_bench(CLI::App& app) {
  auto f = std::make_shared<BenchFlags>();
  CLI::App* cmd = app.add_subcommand(
      "bench", "Prompt and generation speed, as llama-bench measures it (random tokens)");
  add_model_flags(*cmd, f->model);
  // -t takes a list here, as llama-bench's does.
  cmd->remove_option(cmd->get_option("-t"));
  cmd->add_option("-t,--threads", f->threads, "Thread counts to run each test with, e.g. 1,2 "
                  "(default: one per physical core)")
      ->delimiter(',')
      ->check(CLI::Range(1, 1024));
  cmd->add_option("-p,--n-prompt", f->n_prompt, "Prompt tokens decoded as one batch (0: none)")
      ->delimiter(',')
      ->capture_default_str()
      ->check(CLI::Range(0, 1 << 20));
  cmd->add_option("-n,--n-gen", f->n_gen, "Tokens generated one at a time (0: none)")
      ->delimiter(',')
      ->capture_default_str()
      ->check(CLI::Range(0, 1 << 20));
  cmd->add_option("-d,--n-depth", f->n_depth, "Tokens already in the cache before each test")
      ->delimiter(',')
      ->capture_default_str()
      ->check(CLI::Range(0, 1 << 24));
  cmd->add_option("--parallel", f->parallel,
                  "(-np) Sequences generating together in the tg tests, e.g. 1,4,16: each pass one "
                  "token of each (t/s counts them all)")
      ->delimiter(',')
      ->capture_default_str()
      ->check(CLI::Range(1, 64));
  cmd->add_option("-r,--repetitions", f->reps, "Timed repetitions per test")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000));
  cmd->add_option("-b,--batch-size", f->n_batch, "Tokens per forward pass (at least -p)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  cmd->add_option("-o,--output", f->output, "md: llama-bench's table; json: its JSON objects")
      ->capture_default_str()
      ->check(CLI::IsMember({"md", "json"}));
  add_cache_type_flags(*cmd, f->cache_types);
  cmd->add_option("--ceilings", f->ceilings,
                  "Measure the read bandwidth and arithmetic peaks before and after each test "
                  "and give each row's fraction of its ceiling (0: skip)")
      ->capture_default_str();
  cmd->add_flag("--profile", f->profile,
                "After the table, where each test's time went per step: op classes (matmuls by "
                "weight type: time, threads' busy share, weight bytes and GB/s against the read "
                "probe), the time between ops and between graphs (host work)");
  return [f]() { return bench(*f); };
}

}  // namespace tessera::cli
