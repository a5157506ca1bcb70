// `tessera run`: generate text from a prompt, streamed token by token.
#include <atomic>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "commands.h"
#include "common.h"
#include "tessera/engine.h"
#include "tessera/error.h"
#include "tessera/sampler.h"

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
  bool ignore_eos = false;
  int64_t seed = -1;
  SamplerParams sampling;
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

int run(const RunFlags& f) {
  const InterruptScope interrupt;
  std::string prompt = f.prompt;
  if (!f.file.empty()) prompt = read_file(f.file);
  LoadedModel lm = load_model(f.model);
  const Tokenizer& tok = lm.tokenizer;
  std::vector<TokenId> tokens = tok.tokenize(prompt, /*add_special=*/true, /*parse_special=*/true);
  if (tokens.empty()) fail(ErrorCategory::kInvalidArgument, "[-p] the prompt is empty");

  Session session(*lm.model, {.n_ctx = f.n_ctx, .n_batch = f.n_batch});
  if (static_cast<int64_t>(tokens.size()) >= session.n_ctx()) {
    fail(ErrorCategory::kInvalidArgument, "[{}] the prompt has {} tokens, the context {} (-c)",
         f.file.empty() ? "-p" : "-f " + f.file, tokens.size(), session.n_ctx());
  }
  SamplerParams sp = f.sampling;
  sp.seed = f.seed < 0 ? 0xFFFFFFFF : static_cast<uint32_t>(f.seed);
  if (f.ignore_eos) {
    for (TokenId id = 0; id < static_cast<TokenId>(tok.n_vocab()); ++id) {
      if (tok.is_eog(id)) sp.banned.push_back(id);
    }
  }
  Sampler sampler(sp, session.n_ctx());
  for (TokenId t : tokens) sampler.accept(t);

  if (!f.no_display_prompt) {
    fmt::print("{}", prompt);
    std::fflush(stdout);
  }

  auto t0 = std::chrono::steady_clock::now();
  std::span<const float> logits = session.decode(tokens);
  const double prompt_ms = ms_since(t0);

  int64_t generated = 0;
  t0 = std::chrono::steady_clock::now();
  while (!g_interrupted && (f.n_predict < 0 || generated < f.n_predict) &&
         session.n_past() < session.n_ctx()) {
    const TokenId next = sampler.sample(logits);
    if (tok.is_eog(next)) break;
    sampler.accept(next);
    fmt::print("{}", tok.token_to_piece(next, /*render_special=*/false));
    std::fflush(stdout);
    generated += 1;
    if (session.n_past() >= session.n_ctx()) break;
    logits = session.decode(std::span(&next, 1));
  }
  const double gen_ms = ms_since(t0);
  fmt::print("\n");
  std::fflush(stdout);

  fmt::print(stderr, "\n{:<10} {:.2f} ms\n", "load", lm.load_ms);
  print_rate("prompt", static_cast<int64_t>(tokens.size()), prompt_ms);
  print_rate("generated", generated, gen_ms);
  fmt::print(stderr, "{:<10} {}\n", "seed", sampler.seed());
  if (g_interrupted) fmt::print(stderr, "interrupted\n");
  return g_interrupted ? 130 : 0;
}

}  // namespace

Runner add_run(CLI::App& app) {
  auto f = std::make_shared<RunFlags>();
  CLI::App* cmd = app.add_subcommand("run", "Generate text from a prompt");
  add_model_flags(*cmd, f->model);
  auto* p = cmd->add_option("-p,--prompt", f->prompt, "Prompt text");
  auto* file = cmd->add_option("-f,--file", f->file, "Read the prompt from a file");
  p->excludes(file);
  cmd->add_option("-n,--n-predict", f->n_predict, "Tokens to generate (-1: until EOS or full)")
      ->check(CLI::Range(-1, 1 << 30));
  cmd->add_option("-c,--ctx-size", f->n_ctx, "Context size (0: the model's, at most 4096)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 24));
  cmd->add_option("-b,--batch-size", f->n_batch, "Prompt tokens per forward pass")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  cmd->add_flag("--no-display-prompt", f->no_display_prompt, "Print only the generated text");
  SamplerParams& s = f->sampling;
  cmd->add_option("--temp", s.temp, "Temperature (0: greedy)")->capture_default_str();
  cmd->add_option("--top-k", s.top_k, "Top-k (0: off)")->capture_default_str();
  cmd->add_option("--top-p", s.top_p, "Top-p (1: off)")->capture_default_str()->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--min-p", s.min_p, "Min-p (0: off)")->capture_default_str()->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--repeat-penalty", s.repeat_penalty, "Repetition penalty (1: off)")->capture_default_str();
  cmd->add_option("--repeat-last-n", s.repeat_last_n, "Tokens the penalties look at (-1: all)")
      ->capture_default_str()
      ->check(CLI::Range(-1, 1 << 30));
  cmd->add_option("--presence-penalty", s.presence_penalty, "Presence penalty")->capture_default_str();
  cmd->add_option("--frequency-penalty", s.frequency_penalty, "Frequency penalty")->capture_default_str();
  cmd->add_option("-s,--seed", f->seed, "Random seed (-1 or absent: random)")
      ->check(CLI::Range(int64_t{-1}, int64_t{0xFFFFFFFE}));
  cmd->add_flag("--ignore-eos", f->ignore_eos, "Keep generating past end-of-generation tokens");
  return [f, p, file]() {
    if (p->count() == 0 && file->count() == 0) {
      fail(ErrorCategory::kInvalidArgument, "[run] give a prompt with -p TEXT or -f FILE");
    }
    return run(*f);
  };
}

}  // namespace tessera::cli
