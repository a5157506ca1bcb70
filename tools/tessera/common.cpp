#include "common.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdio>

#include <fmt/format.h>

#include "tessera/error.h"

namespace tessera::cli {

void add_model_flags(CLI::App& cmd, ModelFlags& flags) {
  cmd.add_option("-m,--model", flags.model, "GGUF model file")->required();
  cmd.add_option("-t,--threads", flags.threads, "CPU threads (default: one per physical core)")
      ->check(CLI::Range(0, 1024));
  cmd.add_option("--gpu-layers,--n-gpu-layers,--ngl", flags.gpu_layers,
                 "(-ngl) Layers on the GPU, counting the output layer as llama.cpp does "
                 "(n_layer + 1: all; default: all that fit; 0: none)")
      ->check(CLI::Range(-1, 100000));
  cmd.add_option("--device", flags.device, "Device for offloaded layers, e.g. CUDA0");
}

namespace {

std::string device_names(Runtime& runtime) {
  std::string out;
  for (Device* d : runtime.devices()) out += fmt::format("{}{}", out.empty() ? "" : ", ", d->name());
  return out;
}

constexpr std::string_view kCacheTypes[] = {"f16", "f32", "bf16", "q8_0", "q4_0",
                                            "q4_1", "q5_0", "q5_1"};

}  // namespace

// The CPU backend's extension functions, reached by name (no backend header here).
void set_cpu_threads(Runtime& runtime, int threads) {
  using SetThreads = void (*)(Device&, int);
  Backend* cpu = runtime.find_backend("CPU");
  auto* set = cpu ? reinterpret_cast<SetThreads>(cpu->proc_address("cpu_set_threads")) : nullptr;
  if (set == nullptr) {
    fail(ErrorCategory::kUnsupported, "[-t] this build's CPU backend cannot set threads");
  }
  set(cpu->device(0), threads);
  // OpenBLAS keeps its own threads: as many as the CPU pool's.
  if (Backend* blas = runtime.find_backend("BLAS")) {
    if (auto* set_blas = reinterpret_cast<SetThreads>(blas->proc_address("blas_set_threads"))) {
      set_blas(blas->device(0), threads);
    }
  }
}

int cpu_threads(Runtime& runtime) {
  using GetThreads = int (*)(Device&);
  Backend* cpu = runtime.find_backend("CPU");
  auto* get = cpu ? reinterpret_cast<GetThreads>(cpu->proc_address("cpu_get_threads")) : nullptr;
  return get != nullptr ? get(cpu->device(0)) : 0;
}

void add_cache_type_flags(CLI::App& cmd, CacheTypeFlags& flags) {
  cmd.add_option("--cache-type-k", flags.k, "(-ctk) KV cache type for keys: f16, f32, bf16, q8_0, "
                 "q4_0, q4_1, q5_0, q5_1 (quantized: the head size must be a multiple of 32)")
      ->capture_default_str();
  cmd.add_option("--cache-type-v", flags.v, "(-ctv) KV cache type for values (as -ctk)")
      ->capture_default_str();
}

DType cache_type(const std::string& flag, const std::string& value) {
  for (std::string_view name : kCacheTypes) {
    if (value == name) {
      if (auto t = dtype_from_name(name)) return *t;
    }
  }
  std::string known;
  for (std::string_view name : kCacheTypes) known += fmt::format("{}{}", known.empty() ? "" : ", ", name);
  fail(ErrorCategory::kInvalidArgument, "[{} {}] unknown cache type, expected one of {}", flag,
       value, known);
}

void check_cache_types(const Model& model, const CacheTypeFlags& flags) {
  const int64_t head = model.hparams().head_dim;
  for (const auto& [flag, value] : {std::pair{"--cache-type-k", &flags.k},
                                    std::pair{"--cache-type-v", &flags.v}}) {
    const DTypeInfo& info = dtype_info(cache_type(flag, *value));
    if (head % info.block_size != 0) {
      fail(ErrorCategory::kInvalidArgument,
           "[{} {}] needs the model's head size ({}) to be a multiple of its block size {}; "
           "f16, bf16 and f32 always fit",
           flag, *value, head, info.block_size);
    }
  }
}

LoadedModel load_model(const ModelFlags& flags, const PlacementOptions& context) {
  const auto start = std::chrono::steady_clock::now();
  std::unique_ptr<Runtime> runtime = make_runtime();
  // Also when -t is not given: OpenBLAS's default (every logical CPU) may differ.
  if (const int n = flags.threads > 0 ? flags.threads : cpu_threads(*runtime); n > 0) {
    set_cpu_threads(*runtime, n);
  }
  if (!flags.device.empty() && runtime->find_device(flags.device) == nullptr) {
    std::string upper = flags.device;
    for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    if (upper.starts_with("CUDA")) {
      Backend* cuda = runtime->find_backend("CUDA");
      if (cuda == nullptr) {
        fail(ErrorCategory::kUnsupported,
             "[--device {}] this build has no CUDA backend; configure with -DTESSERA_CUDA=ON "
             "(nvcc on PATH); devices here: {}",
             flags.device, device_names(*runtime));
      }
      const std::string why = no_devices_reason(*cuda);
      fail(ErrorCategory::kUnsupported, "[--device {}] the CUDA backend has {} device(s){}; devices here: {}",
           flags.device, cuda->device_count(), why.empty() ? "" : fmt::format(" ({})", why),
           device_names(*runtime));
    }
    fail(ErrorCategory::kInvalidArgument, "[--device {}] no such device; devices here: {}",
         flags.device, device_names(*runtime));
  }
  PlacementOptions placement = context;
  placement.gpu_layers = flags.gpu_layers;
  placement.device = flags.device;
  bool shown = false;
  // A line redrawn in place on a terminal; into a log, one line per 25%.
  const bool tty = isatty(fileno(stderr)) != 0;
  int last_quarter = -1;
  auto progress = [&](uint64_t done, uint64_t total) {
    if (ms_since(start) < 1000.0 && !shown) return;
    shown = true;
    const double pct = total ? 100.0 * double(done) / double(total) : 100.0;
    if (tty) {
      fmt::print(stderr, "\rloading {}: {:3.0f}%", flags.model, pct);
      if (done == total) fmt::print(stderr, "\n");
    } else if (const int quarter = static_cast<int>(pct / 25); quarter != last_quarter) {
      last_quarter = quarter;
      fmt::print(stderr, "loading {}: {:3.0f}%\n", flags.model, pct);
    }
  };
  Placement where;
  std::unique_ptr<Model> model = tessera::load_model(*runtime, flags.model, placement, progress, &where);
  if (!where.message.empty()) fmt::print(stderr, "{}\n", where.message);
  Tokenizer tokenizer = Tokenizer::from_gguf(model->file());
  LoadedModel out{std::move(runtime), std::move(model), std::move(tokenizer), 0.0};
  if (static_cast<int64_t>(out.tokenizer.n_vocab()) != out.model->hparams().n_vocab) {
    fail(ErrorCategory::kInvalidFile, "[model {}] tokenizer has {} tokens, the weights {}",
         flags.model, out.tokenizer.n_vocab(), out.model->hparams().n_vocab);
  }
  out.load_ms = ms_since(start);
  return out;
}

}  // namespace tessera::cli

namespace tessera::cli {

void add_sampling_flags(CLI::App& cmd, SamplingFlags& f, const std::string& seed_help) {
  SamplerParams& s = f.sampler;
  cmd.add_option("--temp", s.temp, "Temperature (0: greedy)")->capture_default_str();
  cmd.add_option("--top-k", s.top_k, "Top-k (0: off)")->capture_default_str();
  cmd.add_option("--top-p", s.top_p, "Top-p (1: off)")->capture_default_str()->check(CLI::Range(0.0, 1.0));
  cmd.add_option("--min-p", s.min_p, "Min-p (0: off)")->capture_default_str()->check(CLI::Range(0.0, 1.0));
  cmd.add_option("--repeat-penalty", s.repeat_penalty, "Repetition penalty (1: off)")->capture_default_str();
  cmd.add_option("--repeat-last-n", s.repeat_last_n, "Tokens the penalties look at (-1: all)")
      ->capture_default_str()
      ->check(CLI::Range(-1, 1 << 30));
  cmd.add_option("--presence-penalty", s.presence_penalty, "Presence penalty")->capture_default_str();
  cmd.add_option("--frequency-penalty", s.frequency_penalty, "Frequency penalty")->capture_default_str();
  cmd.add_option("-s,--seed", f.seed, "Random seed (-1 or absent: random); " + seed_help)
      ->check(CLI::Range(int64_t{-1}, int64_t{0xFFFFFFFE}));
  cmd.add_flag("--ignore-eos", f.ignore_eos, "Keep generating past end-of-generation tokens");
  cmd.add_option("--stop", f.stop,
                 "Stop when the text contains this string (repeatable); the text ends before it")
      ->allow_extra_args(false)
      ->check([](const std::string& v) { return v.empty() ? std::string("--stop: an empty string") : std::string(); });
}

serving::GenerationParams generation_params(const SamplingFlags& f, int i, int64_t n_predict,
                                            int64_t room) {
  serving::GenerationParams p;
  p.sampling = f.sampler;
  p.sampling.seed = f.seed < 0 ? 0xFFFFFFFF : static_cast<uint32_t>((f.seed + i) % 0xFFFFFFFF);
  p.ignore_eos = f.ignore_eos;
  p.stop = f.stop;
  p.max_tokens = static_cast<int32_t>(n_predict < 0 ? -1 : std::min(n_predict, std::max<int64_t>(room, 0)));
  return p;
}

}  // namespace tessera::cli
