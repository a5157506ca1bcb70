// `tessera perplexity`: perplexity of a text file, as llama-perplexity computes it.
#include <cstdio>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "commands.h"
#include "common.h"
#include "tessera/core/error.h"
#include "tessera/engine/perplexity.h"

namespace tessera::cli {

Runner add_perplexity(CLI::App& app, const MpiWorld& world) {
  struct Flags {
    ModelFlags model;
    std::string file;
    int64_t n_ctx = 512;
    int64_t n_batch = 512;
    CacheTypeFlags cache_types;
  };
  auto f = std::make_shared<Flags>();
  CLI::App* cmd = app.add_subcommand(
      "perplexity", "Perplexity of a text: chunks of -c tokens, the second half of each scored");
  f->model.world = &world;
  add_model_flags(*cmd, f->model);
  add_split_flags(*cmd, f->model);
  cmd->add_option("-f,--file", f->file, "Text file")->required();
  cmd->add_option("-c,--ctx-size", f->n_ctx, "Tokens per chunk")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{4}, int64_t{1} << 20));
  cmd->add_option("-b,--batch-size", f->n_batch, "Tokens per forward pass")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  add_cache_type_flags(*cmd, f->cache_types);
  return [f]() {
    if (is_worker(f->model)) return serve_stage(f->model);
    std::ifstream in(f->file, std::ios::binary);
    if (!in) fail(ErrorCategory::kIo, "[-f {}] cannot open the file", f->file);
    std::stringstream ss;
    ss << in.rdbuf();
    const DType type_k = cache_type("--cache-type-k", f->cache_types.k);
    const DType type_v = cache_type("--cache-type-v", f->cache_types.v);
    LoadedModel lm = load_model(
        f->model, {.n_ctx = f->n_ctx, .n_batch = f->n_batch, .type_k = type_k, .type_v = type_v});
    check_cache_types(*lm.model, f->cache_types);
    const auto t0 = std::chrono::steady_clock::now();
    const std::vector<TokenId> tokens = lm.tokenizer.tokenize(ss.str(), /*add_special=*/true);
    fmt::print(stderr, "perplexity: {} tokens, {} chunks of {}, scoring the second half of each\n",
               tokens.size(), tokens.size() / static_cast<size_t>(f->n_ctx), f->n_ctx);
    PerplexityOptions options{
        .n_ctx = f->n_ctx, .n_batch = f->n_batch, .type_k = type_k, .type_v = type_v};
    if (lm.tokenizer.add_bos() && lm.tokenizer.bos() != kNoToken) options.bos = lm.tokenizer.bos();
    options.pipeline = lm.pipeline.get();
    options.on_chunk = [](int64_t i, double ppl) {
      fmt::print("[{}]{:.4f},", i + 1, ppl);
      std::fflush(stdout);
    };
    const PerplexityResult r = perplexity(*lm.model, tokens, options);
    fmt::print("\nFinal estimate: PPL = {:.4f} +/- {:.5f}\n", r.ppl, r.uncertainty);
    fmt::print(stderr, "scored {} tokens in {:.2f} ms\n", r.scored, ms_since(t0));
    return 0;
  };
}

}  // namespace tessera::cli
