#include "tessera/backends/builtin.h"
#include "tessera/serving/loaded_model.h"

#include <cctype>
#include <chrono>
#include <cstdlib>

#include <fmt/format.h>

#include "tessera/core/error.h"

namespace tessera::serving {

std::string device_names(Runtime& runtime) {
  std::string out;
  for (Device* d : runtime.devices()) out += fmt::format("{}{}", out.empty() ? "" : ", ", d->name());
  return out;
}

void set_cpu_threads(Runtime& runtime, int threads) {
  using SetThreads = void (*)(Device&, int);
  Backend* cpu = runtime.find_backend("CPU");
  auto* set = cpu ? reinterpret_cast<SetThreads>(cpu->proc_address("cpu_set_threads")) : nullptr;
  if (set == nullptr) {
    fail(ErrorCategory::kUnsupported, "[{}] this build's CPU backend cannot set threads", "threads");
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

std::filesystem::path weights_cache_dir(const std::string& value) {
  if (value.empty() || value == "off" || value == "none") return {};
  return value;
}

std::filesystem::path default_weights_cache() {
  if (const char* env = std::getenv("TESSERA_WEIGHTS_CACHE")) return weights_cache_dir(env);
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg != nullptr && *xdg == '/') {
    return std::filesystem::path(xdg) / "tessera" / "weights";
  }
  if (const char* home = std::getenv("HOME"); home != nullptr && *home == '/') {
    return std::filesystem::path(home) / ".cache" / "tessera" / "weights";
  }
  return {};
}

std::string weights_image_line(const Model& model) {
  const WeightsImageUse& u = model.weights_image();
  using State = WeightsImageUse::State;
  switch (u.state) {
    case State::kNone:
    case State::kMapped: return {};
    case State::kWritten:
      return fmt::format("wrote a weights image, {} MiB: {}{} (later starts map it; "
                         "--weights-cache off: none)",
                         u.bytes >> 20, u.path.string(),
                         u.reason.empty() ? "" : fmt::format("; the one there was not used: {}", u.reason));
    case State::kFailed:
      return fmt::format("warning: no weights image ({}): {}", u.path.string(), u.reason);
  }
  return {};
}

namespace {

[[noreturn]] void unknown_device(Runtime& runtime, const std::string& flag, const std::string& device) {
  std::string upper = device;
  for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  if (upper.starts_with("CUDA")) {
    Backend* cuda = runtime.find_backend("CUDA");
    if (cuda == nullptr) {
      fail(ErrorCategory::kUnsupported,
           "[{} {}] this build has no CUDA backend; configure with -DTESSERA_CUDA=ON "
           "(nvcc on PATH); devices here: {}",
           flag, device, device_names(runtime));
    }
    const std::string why = no_devices_reason(*cuda);
    fail(ErrorCategory::kUnsupported, "[{} {}] the CUDA backend has {} device(s){}; devices here: {}",
         flag, device, cuda->device_count(), why.empty() ? "" : fmt::format(" ({})", why),
         device_names(runtime));
  }
  fail(ErrorCategory::kInvalidArgument, "[{} {}] no such device; devices here: {}", flag, device,
       device_names(runtime));
}

}  // namespace

LoadedModel load(const LoadOptions& o) {
  const auto start = std::chrono::steady_clock::now();
  std::unique_ptr<Runtime> runtime = make_runtime();
  // Also when no count is given: OpenBLAS's default (every logical CPU) may differ.
  if (const int n = o.threads > 0 ? o.threads : cpu_threads(*runtime); n > 0) {
    set_cpu_threads(*runtime, n);
  }
  if (!o.placement.device.empty() && runtime->find_device(o.placement.device) == nullptr) {
    unknown_device(*runtime, o.device_flag, o.placement.device);
  }
  Placement where;
  std::unique_ptr<Model> model = load_model(*runtime, o.model, o.placement, o.progress, &where);
  Tokenizer tokenizer = Tokenizer::from_gguf(model->file());
  if (static_cast<int64_t>(tokenizer.n_vocab()) != model->hparams().n_vocab) {
    fail(ErrorCategory::kInvalidFile, "[model {}] tokenizer has {} tokens, the weights {}",
         o.model.string(), tokenizer.n_vocab(), model->hparams().n_vocab);
  }
  LoadedModel out{std::move(runtime), std::move(model), std::move(tokenizer), where.message, 0.0,
                  o.placement.pipeline};
  out.load_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  return out;
}

}  // namespace tessera::serving
