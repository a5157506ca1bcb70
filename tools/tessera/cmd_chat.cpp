// `tessera chat -m MODEL`: an interactive chat in the terminal over the
// serving core (its chat renderer and its decode loop, one slot). Each turn
// renders the whole conversation; the slot's cache keeps the prefix the
// render shares, so only the new part is decoded. /reset starts over, /exit
// (or end of input) quits, Ctrl-C stops a reply (at the prompt it quits).
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "common.h"
#include "tessera/core/error.h"
#include "tessera/serving/chat.h"
#include "tessera/serving/serving.h"

namespace tessera::cli {
namespace {

std::atomic<bool> g_stop_reply{false};
void on_sigint(int) { g_stop_reply.store(true); }

struct ChatFlags {
  ModelFlags model;
  int64_t n_ctx = 0;
  int64_t n_batch = 512;
  int n_predict = -1;
  std::string system;
  std::string chat_template;
  CacheTypeFlags cache_types;
  SamplingFlags sampling;
};

class Chat {
 public:
  Chat(const ChatFlags& f, const LoadedModel& lm)
      : f_(f),
        lm_(lm),
        generator_(*lm.model, lm.tokenizer,
                   {.n_slots = 1,
                    .n_ctx = f.n_ctx,
                    .n_batch = f.n_batch,
                    .type_k = cache_type("--cache-type-k", f.cache_types.k),
                    .type_v = cache_type("--cache-type-v", f.cache_types.v),
                    .pipeline = lm.pipeline.get()}),
        render_(lm.model->file(), lm.tokenizer, f.chat_template) {
    reset();
  }

  void reset() {
    messages_ = nlohmann::json::array();
    if (!f_.system.empty()) messages_.push_back({{"role", "system"}, {"content", f_.system}});
    fresh_ = true;
  }

  // One user turn: the reply streamed to stdout.
  void turn(const std::string& user) {
    messages_.push_back({{"role", "user"}, {"content", user}});
    std::vector<TokenId> prompt;
    try {
      prompt = render_.tokenize(messages_, true, lm_.tokenizer);
    } catch (const serving::ChatError& e) {
      messages_.erase(messages_.end() - 1);
      fmt::print(stderr, "the chat template refused this conversation: {}\n", e.what());
      return;
    }
    const int64_t room = generator_.slot_ctx() - static_cast<int64_t>(prompt.size());
    if (room < 2) {
      messages_.erase(messages_.end() - 1);
      fmt::print(stderr, "the conversation ({} tokens) no longer fits the context of {}; /reset "
                 "starts over\n", prompt.size(), generator_.slot_ctx());
      return;
    }
    serving::GenerationParams params = generation_params(f_.sampling, turns_, f_.n_predict, room, lm_.tokenizer);
    params.cache_prompt = !fresh_;  // after /reset nothing cached is kept
    // gpt-oss (harmony): its analysis channel on stderr, the answer on stdout
    // and, alone, in the conversation (the template drops past thinking).
    params.harmony = render_.tool_format() == serving::ToolFormat::kHarmony;
    params.split_reasoning = params.harmony;
    std::string reply;
    serving::Event last;
    generator_.submit(std::make_shared<serving::Request>(
        std::move(prompt), std::move(params), [&](serving::Event&& e) {
          if (!e.reasoning.empty()) fmt::print(stderr, "{}", e.reasoning);
          reply += e.text;
          fmt::print("{}", e.text);
          std::fflush(stdout);
          if (e.done) last = std::move(e);
        }));
    g_stop_reply = false;
    generator_.run(&g_stop_reply);
    fmt::print("\n");
    std::fflush(stdout);
    if (last.finish == serving::FinishReason::kError) {
      fmt::print(stderr, "the reply failed: {}\n", last.error);
    }
    fmt::print(stderr, "[{} prompt tokens ({} cached) in {:.0f} ms, {} tokens at {:.1f} tok/s{}]\n",
               last.n_prompt, last.n_cached, last.prompt_ms, last.n_gen,
               last.gen_ms > 0 ? 1000.0 * double(last.n_gen) / last.gen_ms : 0.0,
               last.finish == serving::FinishReason::kCancelled ? ", stopped" : "");
    messages_.push_back({{"role", "assistant"}, {"content", reply}});
    fresh_ = false;
    ++turns_;
  }

 private:
  const ChatFlags& f_;
  const LoadedModel& lm_;
  serving::Generator generator_;
  serving::ChatRenderer render_;
  nlohmann::json messages_;
  bool fresh_ = true;
  int turns_ = 0;
};

int chat_loop(const ChatFlags& f) {
  LoadedModel lm = load_model(f.model, {.n_ctx = f.n_ctx > 0 ? f.n_ctx : 4096,
                                        .n_batch = f.n_batch,
                                        .type_k = cache_type("--cache-type-k", f.cache_types.k),
                                        .type_v = cache_type("--cache-type-v", f.cache_types.v)});
  check_cache_types(*lm.model, f.cache_types);
  Chat chat(f, lm);
  // No SA_RESTART: Ctrl-C at the prompt ends the read, and with it the chat.
  struct sigaction sa = {};
  sa.sa_handler = on_sigint;
  sigaction(SIGINT, &sa, nullptr);
  const bool tty = isatty(STDIN_FILENO) != 0;
  if (tty) fmt::print(stderr, "chatting with {}; /reset starts over, /exit quits\n", f.model.model);
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
}

}  // namespace

Runner add_chat(CLI::App& app, const MpiWorld& world) {
  auto f = std::make_shared<ChatFlags>();
  CLI::App* cmd = app.add_subcommand("chat", "Chat with a model in the terminal");
  cmd->footer("Type a message and Enter. /reset starts over, /exit quits; Ctrl-C stops a reply.");
  f->model.world = &world;
  add_model_flags(*cmd, f->model);
  add_split_flags(*cmd, f->model);
  cmd->add_option("-c,--ctx-size", f->n_ctx, "Context size (0: the model's, at most 4096)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 24));
  cmd->add_option("-b,--batch-size", f->n_batch, "Prompt tokens per forward pass")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  cmd->add_option("-n,--n-predict", f->n_predict, "Most tokens per reply (-1: until EOS or full)")
      ->capture_default_str()
      ->check(CLI::Range(-1, 1 << 30));
  cmd->add_option("--system", f->system, "System message at the start of the conversation");
  cmd->add_option("--chat-template", f->chat_template,
                  "Built-in template instead of the model's: " + serving::ChatRenderer::builtin_names());
  add_cache_type_flags(*cmd, f->cache_types);
  add_sampling_flags(*cmd, f->sampling, "turn i uses seed + i");
  return [f]() {
    // Under mpirun, rank 0 reads the terminal (mpirun gives stdin to it).
    if (is_worker(f->model)) return serve_stage(f->model);
    return chat_loop(*f);
  };
}

}  // namespace tessera::cli
