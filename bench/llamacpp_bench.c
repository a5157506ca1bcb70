// llama.cpp's speed on this machine, timed as `tessera bench` times itself,
// for bench/llamacpp.sh: a same-machine baseline for the ratios in issue 9.
// It links the prebuilt libllama that node-llama-cpp publishes on npm (the
// only llama.cpp build these machines can fetch), through the entry points
// bench/llamacpp_api.h declares.
//
//   llamacpp_bench MODEL THREADS DEPTH REPS BACKEND_DIR
// prints one line: pp512 and tg128 (after DEPTH tokens in the cache) as
// mean and sample standard deviation over REPS runs after one warm-up.
#define _POSIX_C_SOURCE 199309L  // clock_gettime under -std=c11

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "llamacpp_api.h"

enum { kPrompt = 512, kGen = 128, kMaxReps = 64, kTokens = 8192 };

static double seconds(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void mean_sd(const double* v, int n, double* mean, double* sd) {
  double m = 0, s = 0;
  for (int i = 0; i < n; ++i) m += v[i] / n;
  for (int i = 0; i < n; ++i) s += (v[i] - m) * (v[i] - m);
  *mean = m;
  *sd = n > 1 ? sqrt(s / (n - 1)) : 0;
}

int main(int argc, char** argv) {
  if (argc != 6) {
    fprintf(stderr, "usage: %s MODEL THREADS DEPTH REPS BACKEND_DIR\n", argv[0]);
    return 2;
  }
  const char* path = argv[1];
  const int threads = atoi(argv[2]), depth = atoi(argv[3]), reps = atoi(argv[4]);
  if (threads < 1 || depth < 0 || depth + kPrompt + kGen > kTokens || reps < 1 || reps > kMaxReps) {
    fprintf(stderr, "llamacpp_bench: bad THREADS, DEPTH or REPS\n");
    return 2;
  }
  ggml_backend_load_all_from_path(argv[5]);
  llama_backend_init();
  void* model = llama_model_load_from_file(path, llama_model_default_params());
  if (model == NULL) {
    fprintf(stderr, "llamacpp_bench: llama.cpp could not load %s\n", path);
    return 1;
  }
  struct opaque_params cp = llama_context_default_params();
  uint32_t* u = (uint32_t*)cp.bytes;  // n_ctx, n_batch, n_ubatch, n_seq_max, n_threads, n_threads_batch
  u[0] = (uint32_t)(depth + kPrompt + kGen);
  u[1] = kPrompt;
  u[2] = kPrompt;
  u[3] = 1;
  u[4] = (uint32_t)threads;
  u[5] = (uint32_t)threads;
  void* ctx = llama_init_from_model(model, cp);
  if (ctx == NULL) {
    fprintf(stderr, "llamacpp_bench: llama.cpp could not make a context\n");
    return 1;
  }
  llama_set_n_threads(ctx, threads, threads);
  static llama_token tokens[kTokens];
  srand(1);
  for (int i = 0; i < kTokens; ++i) tokens[i] = 1 + rand() % 30000;  // random ids, as llama-bench
  double pp[kMaxReps], tg[kMaxReps];
  for (int r = -1; r < reps; ++r) {  // r = -1: warm-up
    llama_memory_clear(llama_get_memory(ctx), 1);
    const double t0 = seconds();
    if (llama_decode(ctx, llama_batch_get_one(tokens, kPrompt)) != 0) return 1;
    llama_synchronize(ctx);
    const double t1 = seconds();
    llama_memory_clear(llama_get_memory(ctx), 1);
    for (int d = 0; d < depth; d += kPrompt) {
      const int n = depth - d < kPrompt ? depth - d : kPrompt;
      if (llama_decode(ctx, llama_batch_get_one(tokens + d, n)) != 0) return 1;
    }
    llama_synchronize(ctx);
    const double t2 = seconds();
    for (int i = 0; i < kGen; ++i) {
      if (llama_decode(ctx, llama_batch_get_one(tokens + depth + i, 1)) != 0) return 1;
    }
    llama_synchronize(ctx);
    const double t3 = seconds();
    if (r >= 0) {
      pp[r] = kPrompt / (t1 - t0);
      tg[r] = kGen / (t3 - t2);
    }
  }
  double ppm, pps, tgm, tgs;
  mean_sd(pp, reps, &ppm, &pps);
  mean_sd(tg, reps, &tgm, &tgs);
  printf("%d\t%d\t%.2f\t%.2f\t%.2f\t%.2f\n", threads, depth, ppm, pps, tgm, tgs);
  llama_free(ctx);
  llama_model_free(model);
  return 0;
}
