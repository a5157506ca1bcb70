// End-to-end engine benchmark: decode of one sequence (time per token, split
// into device compute and host work around it) and many sequences decoded
// together (total tokens/s against one sequence alone, in the same run).
//
//   engine_bench [--model PATH | --shape NAME (tessera synth's)] [--type f16|f32|q8_0|q4_0]
//                [-t THREADS] [-n STEPS] [--prompt TOKENS]
//
// Without --model it writes a random-weight Llama of the shape (tessera
// synth's) to the temp folder, once. Weights are copied into anonymous memory on load, so the page
// cache does not matter once loaded. Every figure is a median of 3 runs; the
// many-sequence ratios divide by the one-sequence rate measured alongside.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "tessera/backends/builtin.h"
#include "tessera/engine/engine.h"
#include "tessera/engine/placement.h"
#include "tessera/models/synth.h"
#include "tessera/runtime/runtime.h"

namespace tessera {
namespace {

std::filesystem::path synthesize(const SynthShape& s, DType type) {
  const auto path = std::filesystem::temp_directory_path() /
                    fmt::format("tessera-bench-{}-{}-v3.gguf", s.name, dtype_name(type));
  if (std::filesystem::exists(path)) return path;
  fmt::print(stderr, "writing {} ...\n", path.string());
  SynthOptions o;
  o.shape = s;
  o.type = type;
  o.vocab = std::filesystem::path(TESSERA_FIXTURES_DIR) / "tokenizer/ggml-vocab-llama-spm.gguf";
  synthesize_model(o, path);
  return path;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

struct SeqRun {
  double tok_per_s;  // generated tokens of all sequences per second
  double compute_us, host_us;  // per pass
};

// n_seq sequences share a prompt (decoded once, seq_cp), then `steps` batches
// of one token per sequence.
SeqRun run(const Model& model, int n_seq, int prompt, int steps) {
  Context ctx(model, {.n_ctx = prompt + n_seq * (steps + 1) + 8});
  std::mt19937 rng(n_seq);
  const auto nv = static_cast<int32_t>(model.hparams().n_vocab);
  Batch batch;
  for (int i = 0; i < prompt; ++i) batch.add(static_cast<int32_t>(rng() % nv), i, {0}, i + 1 == prompt);
  ctx.decode(batch);
  for (int s = 1; s < n_seq; ++s) ctx.cache().seq_cp(0, s, 0, -1);
  // One warm-up step builds the plan of this shape.
  auto step = [&](int pos) {
    batch.clear();
    for (int s = 0; s < n_seq; ++s) batch.add(static_cast<int32_t>(rng() % nv), pos, {s}, true);
    ctx.decode(batch);
  };
  step(prompt);
  const Context::Timings before = ctx.timings();
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 1; i <= steps; ++i) step(prompt + i);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const Context::Timings& after = ctx.timings();
  const double passes = double(after.passes - before.passes);
  return {double(n_seq) * steps / s, (after.compute_us - before.compute_us) / passes,
          (after.host_us - before.host_us) / passes};
}

int main_(int argc, char** argv) {
  std::string model_path, shape_name = "llama-100m", type_name = "q8_0";
  int threads = 0, steps = 64, prompt = 32;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) throw std::runtime_error("missing value after " + a);
      return argv[++i];
    };
    if (a == "--model") model_path = next();
    else if (a == "--shape") shape_name = next();
    else if (a == "--type") type_name = next();
    else if (a == "-t") threads = std::stoi(next());
    else if (a == "-n") steps = std::stoi(next());
    else if (a == "--prompt") prompt = std::stoi(next());
    else throw std::runtime_error("unknown argument " + a + " (see the comment at the top)");
  }
  if (model_path.empty()) {
    const SynthShape* s = find_synth_shape(shape_name);
    if (s == nullptr) throw std::runtime_error("unknown --shape " + shape_name);
    const auto type = dtype_from_name(type_name);
    if (!type) throw std::runtime_error("unknown --type " + type_name);
    model_path = synthesize(*s, *type).string();
  }
  auto rt = make_runtime();
  if (threads > 0) {
    using SetThreads = void (*)(Device&, int);
    Backend* cpu = rt->find_backend("CPU");
    reinterpret_cast<SetThreads>(cpu->proc_address("cpu_set_threads"))(cpu->device(0), threads);
  }
  auto model = load_model(*rt, model_path);
  fmt::print("model {} ({:.1f} MiB of weights), {} steps after a {}-token prompt\n", model_path,
             double(model->weight_bytes()) / (1 << 20), steps, prompt);

  std::vector<double> one_rate, one_compute, one_host;
  std::vector<std::vector<double>> many(3);
  const int counts[] = {4, 8, 16};
  for (int rep = 0; rep < 3; ++rep) {
    const SeqRun r1 = run(*model, 1, prompt, steps);
    one_rate.push_back(r1.tok_per_s);
    one_compute.push_back(r1.compute_us);
    one_host.push_back(r1.host_us);
    for (size_t k = 0; k < 3; ++k) many[k].push_back(run(*model, counts[k], prompt, steps).tok_per_s / r1.tok_per_s);
  }
  fmt::print("1 sequence: {:.1f} tok/s, per token {:.1f} us compute + {:.1f} us host\n",
             median(one_rate), median(one_compute), median(one_host));
  for (size_t k = 0; k < 3; ++k) {
    fmt::print("{:2} sequences: {:.2f}x the total tok/s of 1 ({:.1f} tok/s)\n", counts[k],
               median(many[k]), median(many[k]) * median(one_rate));
  }
  return 0;
}

}  // namespace
}  // namespace tessera

int main(int argc, char** argv) {
  try {
    return tessera::main_(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "engine_bench: %s\n", e.what());
    return 1;
  }
}
