// `tessera embed -m MODEL (-p TEXT | -f FILE) [--pooling P] [--embd-normalize N]
// [--embd-output-format json|array] [--embd-separator S]`: one embedding per
// text, as llama-embedding computes them (docs/cli.md, "embed").
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "common.h"
#include "tessera/core/error.h"
#include "tessera/serving/embedder.h"

namespace tessera::cli {
namespace {

constexpr uintmax_t kMaxFileBytes = uintmax_t{256} << 20;

std::string read_texts_file(const std::string& path) {
  std::error_code ec;
  const uintmax_t size = std::filesystem::file_size(path, ec);
  if (ec) fail(ErrorCategory::kIo, "[-f {}] cannot open the file: {}", path, ec.message());
  if (size > kMaxFileBytes) {
    fail(ErrorCategory::kInvalidArgument, "[-f {}] found {} bytes, expected at most {} MiB", path, size,
         kMaxFileBytes >> 20);
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(ErrorCategory::kIo, "[-f {}] cannot open the file", path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The texts: the input split at every separator, empty pieces dropped.
std::vector<std::string> split_texts(const std::string& all, const std::string& sep) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos <= all.size()) {
    const size_t hit = sep.empty() ? std::string::npos : all.find(sep, pos);
    std::string piece = all.substr(pos, hit == std::string::npos ? std::string::npos : hit - pos);
    if (!piece.empty() && piece != "\r") out.push_back(std::move(piece));
    if (hit == std::string::npos) break;
    pos = hit + sep.size();
  }
  return out;
}

}  // namespace

Runner add_embed(CLI::App& app) {
  struct Flags {
    ModelFlags model;
    std::string prompt, file, pooling, format, separator = "\n", cls_separator = "\t";
    int normalize = 2;
    int64_t n_ctx = 0;
    int64_t n_batch = 2048;
  };
  auto f = std::make_shared<Flags>();
  CLI::App* cmd = app.add_subcommand(
      "embed", "One embedding vector per text (encoders such as bge, or decoders), as llama-embedding");
  add_model_flags(*cmd, f->model);
  auto* p = cmd->add_option("-p,--prompt", f->prompt, "Texts, split at --embd-separator (default: each line)");
  auto* file = cmd->add_option("-f,--file", f->file, "A file of texts, split likewise (at most 256 MiB)");
  p->excludes(file);
  cmd->add_option("--pooling", f->pooling,
                  "mean, cls, last, none (every token's state, each its own embedding), or rank (a "
                  "reranker: each text is QUERY<cls-separator>DOCUMENT, the output its scores; default: "
                  "the model's pooling_type, else mean)")
      ->check(CLI::IsMember({"mean", "cls", "last", "none", "rank"}));
  cmd->add_option("--cls-separator", f->cls_separator,
                  "With --pooling rank: what separates a text's query from its document (default a tab)");
  cmd->add_option("--embd-normalize", f->normalize,
                  "-1 none, 0 max-abs scaled to int16's range, 1 taxicab, 2 Euclidean, >2 p-norm")
      ->capture_default_str()
      ->check(CLI::Range(-1, 64));
  cmd->add_option("--embd-output-format", f->format,
                  "json (OpenAI's list of embeddings), array ([[...], ...]); default one line of "
                  "values per text")
      ->check(CLI::IsMember({"json", "array"}));
  cmd->add_option("--embd-separator", f->separator, "What separates texts (default a newline)");
  cmd->add_option("-c,--ctx-size", f->n_ctx,
                  "Most tokens in one text (default: the model's training context, at most 8192)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  cmd->add_option("-b,--batch-size", f->n_batch, "Tokens per pass: texts are packed into passes, each its own sequence")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  return [f, p, file]() {
    if (p->count() == 0 && file->count() == 0) {
      fail(ErrorCategory::kInvalidArgument, "[embed] give the texts with -p TEXT or -f FILE");
    }
    const std::vector<std::string> texts =
        split_texts(f->file.empty() ? f->prompt : read_texts_file(f->file), f->separator);
    if (texts.empty()) fail(ErrorCategory::kInvalidArgument, "[embed] found no text to embed");
    LoadedModel lm = load_model(f->model);
    const Model& model = *lm.model;
    const int64_t n_ctx = f->n_ctx > 0 ? f->n_ctx : std::min<int64_t>(model.hparams().n_ctx_train, 8192);
    const serving::Pooling pooling =
        f->pooling.empty() ? serving::model_pooling(model) : serving::pooling_from_name(f->pooling);
    serving::Embedder embedder(model, pooling, n_ctx, f->n_batch);
    const bool progress = texts.size() > 1 && isatty(STDERR_FILENO) != 0;
    std::vector<std::vector<int32_t>> inputs;
    inputs.reserve(texts.size());
    const std::string rerank_prompt = serving::rerank_template(model);
    int64_t tokens = 0;
    for (size_t i = 0; i < texts.size(); ++i) {
      if (pooling == serving::Pooling::kRank) {  // QUERY<sep>DOCUMENT, laid out as llama-server does
        const size_t at = f->cls_separator.empty() ? std::string::npos : texts[i].find(f->cls_separator);
        if (at == std::string::npos) {
          fail(ErrorCategory::kInvalidArgument, "[embed] text {} of {}: --pooling rank wants QUERY{}DOCUMENT, "
               "found no separator", i + 1, texts.size(), f->cls_separator == "\t" ? "<tab>" : f->cls_separator);
        }
        inputs.push_back(serving::rerank_tokens(lm.tokenizer, std::string_view(texts[i]).substr(0, at),
                                                std::string_view(texts[i]).substr(at + f->cls_separator.size()),
                                                rerank_prompt));
      } else {
        inputs.push_back(lm.tokenizer.tokenize(texts[i], /*add_special=*/true));
      }
      tokens += static_cast<int64_t>(inputs.back().size());
      if (static_cast<int64_t>(inputs.back().size()) > n_ctx) {
        fail(ErrorCategory::kInvalidArgument, "[embed] text {} of {}: {} tokens, at most -c {} fit", i + 1,
             texts.size(), inputs.back().size(), n_ctx);
      }
    }
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<std::vector<float>> vectors =
        embedder.embed_all(inputs, f->normalize, [&](size_t done) {
          if (progress) fmt::print(stderr, "\rembed: {} of {} texts", done, texts.size());
        });
    if (progress) fmt::print(stderr, "\n");
    const double ms = ms_since(t0);
    fmt::print(stderr, "embed: {} texts, {} tokens, {} pooling, in {:.2f} ms ({:.1f} tokens/s)\n", texts.size(),
               tokens, serving::pooling_name(pooling), ms, ms > 0 ? 1000.0 * double(tokens) / ms : 0.0);
    if (pooling == serving::Pooling::kNone) {  // each token's row its own embedding, as llama-embedding prints
      std::vector<std::vector<float>> rows;
      for (size_t i = 0; i < vectors.size(); ++i) {
        const size_t width = vectors[i].size() / inputs[i].size();
        for (size_t at = 0; at < vectors[i].size(); at += width) {
          rows.emplace_back(vectors[i].begin() + static_cast<ptrdiff_t>(at),
                            vectors[i].begin() + static_cast<ptrdiff_t>(at + width));
        }
      }
      vectors = std::move(rows);
    }
    if (f->format == "json") {
      nlohmann::ordered_json out = {{"object", "list"}, {"data", nlohmann::ordered_json::array()}};
      for (size_t i = 0; i < vectors.size(); ++i) {
        out["data"].push_back({{"object", "embedding"}, {"index", i}, {"embedding", vectors[i]}});
      }
      fmt::print("{}\n", out.dump());
    } else if (f->format == "array") {
      fmt::print("{}\n", nlohmann::json(vectors).dump());
    } else {
      for (const std::vector<float>& v : vectors) {
        for (size_t j = 0; j < v.size(); ++j) fmt::print("{}{:.6f}", j ? " " : "", v[j]);
        fmt::print("\n");
      }
    }
    return 0;
  };
}

}  // namespace tessera::cli
