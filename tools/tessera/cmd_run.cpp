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
  int n_parallel = 1;
  CacheTypeFlags cache_types;
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

struct Prepared {
  std::vector<TokenId> tokens;
  SamplerParams sampling;
};

Prepared prepare(const RunFlags& f, const Tokenizer& tok, const std::string& prompt,
                 int64_t n_ctx) {
  Prepared p;
  p.tokens = tok.tokenize(prompt, /*add_special=*/true, /*parse_special=*/true);
  if (p.tokens.empty()) fail(ErrorCategory::kInvalidArgument, "[-p] the prompt is empty");
  if (static_cast<int64_t>(p.tokens.size()) >= n_ctx) {
    fail(ErrorCategory::kInvalidArgument, "[{}] the prompt has {} tokens, the context {} (-c)",
         f.file.empty() ? "-p" : "-f " + f.file, p.tokens.size(), n_ctx);
  }
  p.sampling = f.sampling;
  p.sampling.seed = f.seed < 0 ? 0xFFFFFFFF : static_cast<uint32_t>(f.seed);
  if (f.ignore_eos) {
    for (TokenId id = 0; id < static_cast<TokenId>(tok.n_vocab()); ++id) {
      if (tok.is_eog(id)) p.sampling.banned.push_back(id);
    }
  }
  return p;
}

ContextOptions context_options(const RunFlags& f) {
  return {.n_ctx = f.n_ctx,
          .n_batch = f.n_batch,
          .type_k = cache_type("--cache-type-k", f.cache_types.k),
          .type_v = cache_type("--cache-type-v", f.cache_types.v)};
}

void print_timings(const LoadedModel& lm, int64_t n_prompt, double prompt_ms, int64_t generated,
                   double gen_ms, const std::string& seeds) {
  fmt::print(stderr, "\n{:<10} {:.2f} ms\n", "load", lm.load_ms);
  print_rate("prompt", n_prompt, prompt_ms);
  print_rate("generated", generated, gen_ms);
  fmt::print(stderr, "{:<10} {}\n", "seed", seeds);
  if (g_interrupted) fmt::print(stderr, "interrupted\n");
}

// One sequence, streamed to stdout as it is generated.
int run_one(const RunFlags& f, const LoadedModel& lm, const std::string& prompt) {
  const Tokenizer& tok = lm.tokenizer;
  Session session(*lm.model, context_options(f));
  Prepared p = prepare(f, tok, prompt, session.n_ctx());
  Sampler sampler(p.sampling, session.n_ctx());
  for (TokenId t : p.tokens) sampler.accept(t);

  if (!f.no_display_prompt) {
    fmt::print("{}", prompt);
    std::fflush(stdout);
  }

  auto t0 = std::chrono::steady_clock::now();
  std::span<const float> logits = session.decode(p.tokens);
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
  print_timings(lm, static_cast<int64_t>(p.tokens.size()), prompt_ms, generated, gen_ms,
                std::to_string(sampler.seed()));
  return g_interrupted ? 130 : 0;
}

// -np N: the prompt decoded once for sequence 0 and shared with the others
// (seq_cp), then one batch per step holding the next token of every
// sequence still going. Each sequence samples with its own seed (seed + i);
// the texts are printed at the end, each under its label.
int run_parallel(const RunFlags& f, const LoadedModel& lm, const std::string& prompt) {
  const Tokenizer& tok = lm.tokenizer;
  const int n_seq = f.n_parallel;
  Context ctx(*lm.model, context_options(f));
  Prepared p = prepare(f, tok, prompt, ctx.n_ctx());
  const auto n_prompt = static_cast<int32_t>(p.tokens.size());

  struct Seq {
    std::unique_ptr<Sampler> sampler;
    std::string text;
    int32_t pos = 0;
    size_t batch_index = 0;
    bool done = false;
  };
  std::vector<Seq> seqs(static_cast<size_t>(n_seq));
  for (int s = 0; s < n_seq; ++s) {
    SamplerParams sp = p.sampling;
    // Seed + i, wrapping below 0xFFFFFFFF (the "random" value).
    if (f.seed >= 0) sp.seed = static_cast<uint32_t>((f.seed + s) % 0xFFFFFFFF);
    seqs[static_cast<size_t>(s)].sampler = std::make_unique<Sampler>(sp, ctx.n_ctx());
    for (TokenId t : p.tokens) seqs[static_cast<size_t>(s)].sampler->accept(t);
    seqs[static_cast<size_t>(s)].pos = n_prompt;
  }

  Batch batch;
  batch.add_sequence(p.tokens, 0, 0);
  auto t0 = std::chrono::steady_clock::now();
  ctx.decode(batch);
  const double prompt_ms = ms_since(t0);
  for (int s = 1; s < n_seq; ++s) ctx.cache().seq_cp(0, s, 0, -1);
  for (Seq& s : seqs) s.batch_index = batch.size() - 1;

  int64_t generated = 0;
  bool full = false;
  t0 = std::chrono::steady_clock::now();
  for (int step = 0; !g_interrupted && (f.n_predict < 0 || step < f.n_predict); ++step) {
    Batch next;
    for (int s = 0; s < n_seq; ++s) {
      Seq& q = seqs[static_cast<size_t>(s)];
      if (q.done) continue;
      const TokenId t = q.sampler->sample(ctx.logits(q.batch_index));
      if (tok.is_eog(t)) {
        q.done = true;
        continue;
      }
      q.sampler->accept(t);
      q.text += tok.token_to_piece(t, /*render_special=*/false);
      generated += 1;
      q.batch_index = next.size();
      next.add(t, q.pos++, {s}, true);
    }
    if (next.empty()) break;
    if (ctx.cache().size() - ctx.cache().used() < static_cast<int64_t>(next.size())) {
      full = true;
      break;
    }
    ctx.decode(next);
    batch = std::move(next);
  }
  const double gen_ms = ms_since(t0);
  for (int s = 0; s < n_seq; ++s) {
    fmt::print("[sequence {}]\n{}{}\n\n", s, f.no_display_prompt ? "" : prompt,
               seqs[static_cast<size_t>(s)].text);
  }
  std::fflush(stdout);
  if (full) fmt::print(stderr, "context full ({} cells, -c): generation stopped\n", ctx.n_ctx());
  std::string seeds;
  for (int s = 0; s < n_seq; ++s) {
    seeds += fmt::format("{}{}", s ? ", " : "", seqs[static_cast<size_t>(s)].sampler->seed());
  }
  print_timings(lm, n_prompt, prompt_ms, generated, gen_ms, seeds);
  return g_interrupted ? 130 : 0;
}

int run(const RunFlags& f) {
  const InterruptScope interrupt;
  std::string prompt = f.prompt;
  if (!f.file.empty()) prompt = read_file(f.file);
  const ContextOptions co = context_options(f);
  LoadedModel lm = load_model(f.model, {.n_ctx = co.n_ctx > 0 ? co.n_ctx : 4096,
                                        .n_batch = co.n_batch,
                                        .type_k = co.type_k,
                                        .type_v = co.type_v});
  check_cache_types(*lm.model, f.cache_types);
  return f.n_parallel == 1 ? run_one(f, lm, prompt) : run_parallel(f, lm, prompt);
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
  cmd->add_option("--parallel", f->n_parallel,
                  "Sequences generated together from the prompt (each with seed + i)")
      ->capture_default_str()
      ->check(CLI::Range(1, kMaxSequences));
  add_cache_type_flags(*cmd, f->cache_types);
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
