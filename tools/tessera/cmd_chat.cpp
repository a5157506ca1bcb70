// `tessera chat -m MODEL`: an interactive chat in the terminal over the
// server's code (chat templates, sampling, one sequence of the engine). Each
// turn renders the whole conversation and decodes only what the cache does
// not hold yet. /reset starts over, /exit (or end of input) quits, Ctrl-C
// stops a reply (at the prompt it quits).
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "common.h"
#include "server/chat.h"
#include "server/http_error.h"
#include "tessera/engine.h"
#include "tessera/error.h"
#include "tessera/sampler.h"

namespace tessera::cli {
namespace {

std::atomic<bool> g_stop_reply{false};
void on_sigint(int) { g_stop_reply.store(true); }

struct ChatFlags {
  ModelFlags model;
  int64_t n_ctx = 0;
  int n_predict = -1;
  std::string system;
  std::string chat_template;
  SamplerParams sampling;
  int64_t seed = -1;
};

class Chat {
 public:
  Chat(const ChatFlags& f, const LoadedModel& lm)
      : f_(f),
        lm_(lm),
        ctx_(*lm.model, {.n_ctx = f.n_ctx}),
        render_(server::make_chat_renderer(lm.model->file(), lm.tokenizer, f.chat_template)) {
    reset();
  }

  void reset() {
    messages_ = nlohmann::json::array();
    if (!f_.system.empty()) messages_.push_back({{"role", "system"}, {"content", f_.system}});
    ctx_.cache().clear();
    cached_.clear();
  }

  // One user turn: the reply streamed to stdout.
  void turn(const std::string& user) {
    messages_.push_back({{"role", "user"}, {"content", user}});
    std::vector<TokenId> prompt;
    try {
      prompt = lm_.tokenizer.tokenize(render_(messages_, true), true, true);
    } catch (const server::HttpError& e) {
      messages_.erase(messages_.end() - 1);
      fmt::print(stderr, "the chat template refused this conversation: {}\n", e.what());
      return;
    }
    if (static_cast<int64_t>(prompt.size()) + 1 >= ctx_.n_ctx()) {
      messages_.erase(messages_.end() - 1);
      fmt::print(stderr, "the conversation ({} tokens) no longer fits the context of {}; /reset "
                 "starts over\n", prompt.size(), ctx_.n_ctx());
      return;
    }
    // Keep the cached prefix the new render shares; decode the rest.
    size_t keep = 0;
    while (keep < cached_.size() && keep + 1 < prompt.size() && cached_[keep] == prompt[keep]) ++keep;
    ctx_.cache().seq_rm(0, static_cast<int32_t>(keep), -1);
    cached_.resize(keep);
    SamplerParams sp = f_.sampling;
    if (f_.seed >= 0) sp.seed = static_cast<uint32_t>(f_.seed + turns_);
    Sampler sampler(sp, ctx_.n_ctx());
    for (TokenId t : prompt) sampler.accept(t);

    const auto t0 = std::chrono::steady_clock::now();
    std::span<const float> logits = decode(std::span(prompt).subspan(keep));
    const double prompt_ms = ms_since(t0);
    std::string reply;
    int64_t n = 0;
    g_stop_reply = false;
    const auto t1 = std::chrono::steady_clock::now();
    while (!g_stop_reply && (f_.n_predict < 0 || n < f_.n_predict) &&
           static_cast<int64_t>(cached_.size()) + 1 < ctx_.n_ctx()) {
      const TokenId next = sampler.sample(logits);
      if (lm_.tokenizer.is_eog(next)) break;
      sampler.accept(next);
      const std::string piece = lm_.tokenizer.token_to_piece(next, false);
      reply += piece;
      fmt::print("{}", piece);
      std::fflush(stdout);
      ++n;
      logits = decode(std::span(&next, 1));
    }
    const double gen_ms = ms_since(t1);
    fmt::print("\n");
    std::fflush(stdout);
    fmt::print(stderr, "[{} prompt tokens ({} cached) in {:.0f} ms, {} tokens at {:.1f} tok/s{}]\n",
               prompt.size(), keep, prompt_ms, n, gen_ms > 0 ? 1000.0 * double(n) / gen_ms : 0.0,
               g_stop_reply ? ", stopped" : "");
    messages_.push_back({{"role", "assistant"}, {"content", reply}});
    ++turns_;
  }

 private:
  std::span<const float> decode(std::span<const TokenId> tokens) {
    batch_.clear();
    const auto p0 = static_cast<int32_t>(cached_.size());
    batch_.add_sequence(tokens, p0, 0);
    ctx_.decode(batch_);
    cached_.insert(cached_.end(), tokens.begin(), tokens.end());
    return ctx_.logits(tokens.size() - 1);
  }

  const ChatFlags& f_;
  const LoadedModel& lm_;
  Context ctx_;
  server::ChatRenderer render_;
  nlohmann::json messages_;
  std::vector<TokenId> cached_;
  Batch batch_;
  int turns_ = 0;
};

}  // namespace

Runner add_chat(CLI::App& app) {
  auto f = std::make_shared<ChatFlags>();
  CLI::App* cmd = app.add_subcommand("chat", "Chat with a model in the terminal");
  cmd->footer("Type a message and Enter. /reset starts over, /exit quits; Ctrl-C stops a reply.");
  add_model_flags(*cmd, f->model);
  cmd->add_option("-c,--ctx-size", f->n_ctx, "Context size (0: the model's, at most 4096)")
      ->capture_default_str();
  cmd->add_option("-n,--n-predict", f->n_predict, "Most tokens per reply (-1: until EOS or full)")
      ->capture_default_str();
  cmd->add_option("--system", f->system, "System message at the start of the conversation");
  cmd->add_option("--chat-template", f->chat_template,
                  "Built-in template instead of the model's: " + server::builtin_chat_names());
  SamplerParams& s = f->sampling;
  cmd->add_option("--temp", s.temp, "Temperature (0: greedy)")->capture_default_str();
  cmd->add_option("--top-k", s.top_k, "Top-k (0: off)")->capture_default_str();
  cmd->add_option("--top-p", s.top_p, "Top-p (1: off)")->capture_default_str()->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--min-p", s.min_p, "Min-p (0: off)")->capture_default_str()->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--repeat-penalty", s.repeat_penalty, "Repetition penalty (1: off)")
      ->capture_default_str();
  cmd->add_option("-s,--seed", f->seed, "Random seed (-1: random); turn i uses seed + i")
      ->capture_default_str();
  return [f]() {
    LoadedModel lm = load_model(f->model, {});
    Chat chat(*f, lm);
    // No SA_RESTART: Ctrl-C at the prompt ends the read, and with it the chat.
    struct sigaction sa = {};
    sa.sa_handler = on_sigint;
    sigaction(SIGINT, &sa, nullptr);
    const bool tty = isatty(STDIN_FILENO) != 0;
    if (tty) fmt::print(stderr, "chatting with {}; /reset starts over, /exit quits\n", f->model.model);
    std::string line;
    while (true) {
      if (tty) {
        fmt::print("> ");
        std::fflush(stdout);
      }
      g_stop_reply = false;
      if (!std::getline(std::cin, line) || line == "/exit" || line == "/quit") break;
      if (line.empty()) continue;
      if (line == "/reset") {
        chat.reset();
        fmt::print(stderr, "[conversation cleared]\n");
        continue;
      }
      chat.turn(line);
    }
    if (tty) fmt::print("\n");
    return 0;
  };
}

}  // namespace tessera::cli
