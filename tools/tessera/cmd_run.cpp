// `tessera run`: generate text from a prompt, streamed as it is generated,
// through the serving loop (src/serving/). With -np N, N continuations of
// the prompt decode together.
#include <atomic>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "commands.h"
#include "common.h"
#include "tessera/core/error.h"
#include "tessera/serving/serving.h"

namespace tessera::cli {
namespace {

std::atomic<bool> g_interrupted{false};

void on_sigint(int) { g_interrupted.store(true); }

struct RunFlags {
  ModelFlags model;
  std::string prompt;
  std::string file;
  int n_predict = -1;
  int64_t n_ctx = 0;
  int64_t n_batch = 512;
  bool no_display_prompt = false;
  int n_parallel = 1;
  CacheTypeFlags cache_types;
  SamplingFlags sampling;
};

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(ErrorCategory::kIo, "[-f {}] cannot open the file", path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void print_rate(const char* what, int64_t n, double ms) {
  fmt::print(stderr, "{:<10} {:6} tokens in {:9.2f} ms ({:.2f} tok/s)\n", what, n, ms,
             ms > 0 ? 1000.0 * double(n) / ms : 0.0);
}

// Installs the Ctrl-C handler for the whole command (loading included) and
// restores the previous one on the way out.
struct InterruptScope {
  using Handler = void (*)(int);
  Handler previous;
  InterruptScope() : previous(std::signal(SIGINT, on_sigint)) { g_interrupted = false; }
  ~InterruptScope() { std::signal(SIGINT, previous); }
};

serving::GeneratorOptions generator_options(const RunFlags& f) {
  return {.n_slots = f.n_parallel,
          .n_ctx = f.n_ctx,
          .n_batch = f.n_batch,
          .type_k = cache_type("--cache-type-k", f.cache_types.k),
          .type_v = cache_type("--cache-type-v", f.cache_types.v)};
}

std::vector<TokenId> tokenize_prompt(const RunFlags& f, const Tokenizer& tok,
                                     const std::string& prompt, int64_t slot_ctx) {
  std::vector<TokenId> tokens = tok.tokenize(prompt, /*add_special=*/true, /*parse_special=*/true);
  if (tokens.empty()) fail(ErrorCategory::kInvalidArgument, "[-p] the prompt is empty");
  if (static_cast<int64_t>(tokens.size()) >= slot_ctx) {
    fail(ErrorCategory::kInvalidArgument, "[{}] the prompt has {} tokens, the context {} (-c{})",
         f.file.empty() ? "-p" : "-f " + f.file, tokens.size(), slot_ctx,
         f.n_parallel > 1 ? fmt::format(" over -np {}", f.n_parallel) : "");
  }
  return tokens;
}

// The text of each sequence as it comes: sequence 0 of one streams to
// stdout; with -np each is kept for the end.
struct Output {
  bool stream = false;
  std::string text;
  serving::Event last;
};

int run(const RunFlags& f) {
  if (f.sampling.print_grammar) {
    const std::string g = grammar_text(f.sampling);
    if (g.empty()) fail(ErrorCategory::kInvalidArgument, "[--print-grammar] give --grammar, --grammar-file, -j or --json-schema-file");
    fmt::print("{}", g);
    return 0;
  }
  const InterruptScope interrupt;
  std::string prompt = f.prompt;
  if (!f.file.empty()) prompt = read_file(f.file);
  serving::GeneratorOptions go = generator_options(f);
  LoadedModel lm = load_model(f.model, {.n_ctx = go.n_ctx > 0 ? go.n_ctx : 4096,
                                        .n_batch = go.n_batch,
                                        .type_k = go.type_k,
                                        .type_v = go.type_v});
  check_cache_types(*lm.model, f.cache_types);
  go.pipeline = lm.pipeline.get();
  serving::Generator generator(*lm.model, lm.tokenizer, go);
  const std::vector<TokenId> tokens = tokenize_prompt(f, lm.tokenizer, prompt, generator.slot_ctx());
  const int64_t room = generator.slot_ctx() - static_cast<int64_t>(tokens.size());

  std::vector<Output> out(static_cast<size_t>(f.n_parallel));
  out[0].stream = f.n_parallel == 1;
  if (out[0].stream && !f.no_display_prompt) {
    fmt::print("{}", prompt);
    std::fflush(stdout);
  }
  for (int i = 0; i < f.n_parallel; ++i) {
    Output& o = out[static_cast<size_t>(i)];
    generator.submit(std::make_shared<serving::Request>(
        tokens, generation_params(f.sampling, i, f.n_predict, room, lm.tokenizer), [&o](serving::Event&& e) {
          if (o.stream) {
            fmt::print("{}", e.text);
            std::fflush(stdout);
          } else {
            o.text += e.text;
          }
          if (e.done) o.last = std::move(e);
        }));
  }
  generator.run(&g_interrupted);

  int64_t generated = 0;
  double gen_ms = 0;
  std::string seeds;
  bool full = false;
  for (size_t i = 0; i < out.size(); ++i) {
    const serving::Event& e = out[i].last;
    if (e.finish == serving::FinishReason::kError) fail(ErrorCategory::kDevice, "[run] {}", e.error);
    generated += e.n_gen;
    gen_ms = std::max(gen_ms, e.gen_ms);  // the sequences ran side by side
    seeds += fmt::format("{}{}", i ? ", " : "", e.seed);
    full |= e.finish == serving::FinishReason::kLength && (f.n_predict < 0 || e.n_gen < f.n_predict);
    if (!out[i].stream) {
      fmt::print("[sequence {}]\n{}{}\n\n", i, f.no_display_prompt ? "" : prompt, out[i].text);
    }
  }
  if (out[0].stream) fmt::print("\n");
  std::fflush(stdout);
  if (full) {
    fmt::print(stderr, "context full ({} cells a sequence, -c): generation stopped\n",
               generator.slot_ctx());
  }
  fmt::print(stderr, "\n{:<10} {:.2f} ms\n", "load", lm.load_ms);
  print_rate("prompt", static_cast<int64_t>(tokens.size()), out[0].last.prompt_ms);
  print_rate("generated", generated, gen_ms);
  double sample_ms = 0;
  for (const Output& o : out) sample_ms += o.last.sample_ms;
  fmt::print(stderr, "{:<10} {:9.2f} ms of CPU choosing tokens ({:.1f} us a token)\n", "sampling", sample_ms,
             generated > 0 ? 1000.0 * sample_ms / double(generated) : 0.0);
  fmt::print(stderr, "{:<10} {}\n", "seed", seeds);
  if (const auto& pipeline = lm.pipeline; pipeline != nullptr && pipeline->size() > 1) {
    fmt::print(stderr, "{:<10} rank 0 sent {} bytes to rank 1 ({:.0f} per token decoded)\n",
               "pipeline", pipeline->bytes_sent(),
               double(pipeline->bytes_sent()) / double(std::max<int64_t>(generated + tokens.size(), 1)));
  }
  if (g_interrupted) fmt::print(stderr, "interrupted\n");
  return g_interrupted ? 130 : 0;
}

}  // namespace

Runner add_run(CLI::App& app, const MpiWorld& world) {
  auto f = std::make_shared<RunFlags>();
  f->model.world = &world;
  CLI::App* cmd = app.add_subcommand("run", "Generate text from a prompt");
  add_model_flags(*cmd, f->model);
  add_split_flags(*cmd, f->model);
  auto* p = cmd->add_option("-p,--prompt", f->prompt, "Prompt text");
  auto* file = cmd->add_option("-f,--file", f->file, "Read the prompt from a file");
  p->excludes(file);
  cmd->add_option("-n,--n-predict", f->n_predict, "Tokens to generate (-1: until EOS or full)")
      ->check(CLI::Range(-1, 1 << 30));
  cmd->add_option("-c,--ctx-size", f->n_ctx,
                  "Context size, shared by the -np sequences (0: the model's, at most 4096)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 24));
  cmd->add_option("-b,--batch-size", f->n_batch, "Prompt tokens per forward pass")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  cmd->add_flag("--no-display-prompt", f->no_display_prompt, "Print only the generated text");
  cmd->add_option("--parallel", f->n_parallel,
                  "(-np) Sequences generated together from the prompt, decoded once "
                  "(each with seed + i, printed at the end)")
      ->capture_default_str()
      ->check(CLI::Range(1, kMaxSequences));
  add_cache_type_flags(*cmd, f->cache_types);
  add_sampling_flags(*cmd, f->sampling, "sequence i of -np uses seed + i");
  return [f, p, file]() {
    if (is_worker(f->model)) return serve_stage(f->model);
    if (p->count() == 0 && file->count() == 0 && !f->sampling.print_grammar) {
      fail(ErrorCategory::kInvalidArgument, "[run] give a prompt with -p TEXT or -f FILE");
    }
    return run(*f);
  };
}

}  // namespace tessera::cli
