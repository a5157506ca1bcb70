// `tessera serve -m MODEL [--host 127.0.0.1] [--port 8080] [-np SLOTS] [-c CTX]
// [--api-key KEY] [-t THREADS] [--chat-template NAME]`: an OpenAI-compatible
// HTTP server with continuous batching (tools/server/).
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include <fmt/format.h>

#include "commands.h"
#include "common.h"
#include "server/server.h"
#include "tessera/core/error.h"
#include "tessera/serving/chat.h"
#include "tessera/serving/embedder.h"
#include "tessera/serving/serving.h"

namespace tessera::cli {

namespace {

struct ServeFlags {
  ModelFlags model;
  server::ServerOptions http;
  int slots = 4;
  int64_t n_ctx = 0;
  int64_t n_batch = 512;
  std::string chat_template;
  std::string pooling;
  int64_t health_stall_ms = 30000;
  size_t max_request_memory_mib = 1024;
};

// What serving needs once the model is loaded, owned together and built in
// place (the generator and the embedder refer to the model and tokenizer).
struct Loaded {
  explicit Loaded(const ServeFlags& o)
      : model(load_model(o.model, {.n_ctx = o.n_ctx > 0 ? o.n_ctx : PlacementOptions{}.n_ctx,
                                   .n_batch = o.n_batch})),
        chat(model.model->file(), model.tokenizer, o.chat_template),
        generator(*model.model, model.tokenizer,
                  {.n_slots = o.slots,
                   .n_ctx = o.n_ctx,
                   .n_batch = o.n_batch,
                   .pipeline = model.pipeline.get()}),
        embedder(*model.model, pooling_of(o, *model.model),
                 model.model->is_encoder() ? std::min<int64_t>(model.model->hparams().n_ctx_train, 8192)
                                           : generator.slot_ctx(),
                 model.model->is_encoder() ? 2048 : 0) {}  // an encoder packs inputs into passes
  // --rerank ranks (the model's head); else --pooling, else the file's
  // pooling_type, whose rank (a reranker's file) embeds as cls and whose
  // none as mean: /v1/embeddings gives one vector per input.
  static serving::Pooling pooling_of(const ServeFlags& o, const Model& m) {
    if (o.http.rerank) return serving::Pooling::kRank;
    if (!o.pooling.empty()) return serving::pooling_from_name(o.pooling);  // mean, last or cls
    const serving::Pooling p = serving::model_pooling(m);
    if (p == serving::Pooling::kNone) return serving::Pooling::kMean;
    return p == serving::Pooling::kRank ? serving::Pooling::kCls : p;
  }
  Loaded(const Loaded&) = delete;
  Loaded& operator=(const Loaded&) = delete;

  LoadedModel model;
  serving::ChatRenderer chat;
  serving::Generator generator;
  serving::Embedder embedder;
};

int serve(ServeFlags& o) {
  // Blocks of a megabyte or more (request bodies, their JSON, answers) come
  // from mmap and go back to the system when freed: a burst of large
  // requests leaves no lasting growth in the worker threads' heaps.
  mallopt(M_MMAP_THRESHOLD, 1 << 20);
  // Signals go to the thread that waits for them; a client that leaves
  // mid-stream is a failed write, not a SIGPIPE.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  signal(SIGPIPE, SIG_IGN);

  if (o.http.model_name.empty()) {
    const auto slash = o.model.model.find_last_of('/');
    o.http.model_name = slash == std::string::npos ? o.model.model : o.model.model.substr(slash + 1);
  }
  // Each open stream holds an HTTP thread: room for every slot twice over
  // (streams queued for a slot too) plus quick requests beside them.
  o.http.http_threads = std::max(16, 2 * o.slots + 8);
  o.http.health_stall = std::chrono::milliseconds(o.health_stall_ms);
  o.http.max_request_memory = o.max_request_memory_mib << 20;
  server::Server http(o.http);
  const int port = http.bind();
  std::thread listener([&] { http.listen(); });
  fmt::print(stderr, "listening on http://{}:{} (loading {})\n", o.http.host, port, o.model.model);
  std::fflush(stderr);

  std::optional<Loaded> l;
  try {
    l.emplace(o);
  } catch (const std::exception& e) {
    http.set_load_error(e.what());
    http.stop();
    listener.join();
    throw;
  }
  l->generator.start();
  http.attach(l->model.tokenizer, l->generator, l->embedder, l->chat);
  if (o.model.world != nullptr && o.model.world->size() > 1) {
    // mpirun ends the whole job at once on Ctrl-C; rank 0 itself stops
    // gracefully (the workers leave signals to it).
    fmt::print(stderr, "ready: {} slots of {} cells; SIGTERM to rank 0 (pid {}) stops it\n",
               l->generator.n_slots(), l->generator.slot_ctx(), ::getpid());
  } else if (l->model.model->is_encoder()) {
    fmt::print(stderr, "ready: an encoder ({}): /v1/embeddings only; Ctrl-C stops\n",
               l->model.model->hparams().architecture);
  } else {
    fmt::print(stderr, "ready: {} slots of {} cells; Ctrl-C stops\n", l->generator.n_slots(),
               l->generator.slot_ctx());
  }
  std::fflush(stderr);

  int sig = 0;
  sigwait(&stop_signals, &sig);
  fmt::print(stderr, "{}: finishing the requests in flight, then stopping\n",
             sig == SIGINT ? "SIGINT" : "SIGTERM");
  std::fflush(stderr);
  // Stopping is bounded: whatever the requests are doing (a long prompt, a
  // large embedding, a write to a stalled client), the process ends within
  // 2 s of the signal, or at once on a second one.
  std::atomic<bool> stopped{false};
  std::thread watchdog([&] {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(1800);
    const timespec tick{0, 20'000'000};
    while (!stopped.load() && std::chrono::steady_clock::now() < deadline) {
      if (sigtimedwait(&stop_signals, nullptr, &tick) > 0) break;  // a second signal
    }
    if (stopped.load()) return;
    fmt::print(stderr, "serve: the requests in flight did not finish in time; exiting\n");
    std::fflush(stderr);
    std::_Exit(0);
  });
  l->generator.shutdown();  // every stream gets its last chunk and [DONE]
  http.stop();
  listener.join();
  stopped = true;
  watchdog.join();
  return 0;
}

}  // namespace

Runner add_serve(CLI::App& app, const MpiWorld& world) {
  auto o = std::make_shared<ServeFlags>();
  CLI::App* cmd = app.add_subcommand(
      "serve", "OpenAI-compatible HTTP server (completions, chat, streaming, metrics)");
  o->model.world = &world;
  add_model_flags(*cmd, o->model);
  add_split_flags(*cmd, o->model);
  cmd->add_option("--host", o->http.host, "Address to listen on")->capture_default_str();
  cmd->add_option("--port", o->http.port, "Port (0: any free port)")
      ->capture_default_str()
      ->check(CLI::Range(0, 65535));
  cmd->add_option("--parallel", o->slots,
                  "(-np) Slots: requests decoded together; each holds CTX / SLOTS cells")
      ->capture_default_str()
      ->check(CLI::Range(1, 64));
  cmd->add_option("-c,--ctx-size", o->n_ctx,
                  "KV cache cells shared by the slots (0: the model's, at most 4096)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 24));
  cmd->add_option("-b,--batch-size", o->n_batch, "Tokens per forward pass")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 16));
  cmd->add_option("--api-key", o->http.api_key,
                  "Require 'Authorization: Bearer KEY' (all but /health and /)");
  cmd->add_option("--alias", o->http.model_name, "Model name in responses (default: file name)");
  cmd->add_option("--chat-template", o->chat_template,
                  "Built-in chat template instead of the model's: " + serving::ChatRenderer::builtin_names());
  cmd->add_flag("--rerank,--reranking", o->http.rerank,
               "Serve /v1/rerank and /rerank with a reranker's classifier head (bge-reranker, ...); "
               "/v1/embeddings then answers 501");
  cmd->add_option("--pooling", o->pooling,
                  "Embeddings pooling: mean, last or cls (default: the model's, else mean)")
      ->check(CLI::IsMember({"mean", "last", "cls"}));
  cmd->add_option("--max-body", o->http.max_body_bytes,
                  "Largest request body in bytes, as sent and decoded (413 past it)")
      ->capture_default_str()
      ->check(CLI::Range(size_t{1024}, size_t{1} << 30));
  cmd->add_option("--max-request-memory", o->max_request_memory_mib,
                  "MiB all requests in flight may hold together: bodies, and 64 bytes per body byte "
                  "while one is handled (503 with Retry-After past it)")
      ->capture_default_str()
      ->check(CLI::Range(size_t{16}, size_t{1} << 20));
  cmd->add_option("--health-stall-ms", o->health_stall_ms,
                  "/health answers 503 when requests wait or run and no decode step has "
                  "finished for this long")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{24} * 3600 * 1000));
  cmd->add_flag("--ignore-unknown-fields", o->http.ignore_unknown_fields,
               "Let request fields no endpoint reads through (default: a 400 naming the field)");
  cmd->add_option("--cors-origin", o->http.cors_origins,
                  "An origin whose web pages may call the API (repeatable; '*': any). Other "
                  "origins get 403; none is allowed by default")
      ->allow_extra_args(false);
  return [o]() {
    // Under mpirun the other ranks hold their layers and run the front's
    // passes; rank 0 is the HTTP server.
    if (is_worker(o->model)) return serve_stage(o->model);
    return serve(*o);
  };
}

}  // namespace tessera::cli
