// llama.cpp's speed on this machine, timed as `tessera bench` times itself,
// for bench/llamacpp.sh: a same-machine baseline for the ratios in issue 9.
// It links the prebuilt libllama that node-llama-cpp publishes on npm (the
// only llama.cpp build these machines can fetch), through the entry points
// bench/llamacpp_api.h declares.
//
//   llamacpp_bench MODEL THREADS DEPTH REPS BACKEND_DIR [NP]
// prints one line: pp512 and tg128 (after DEPTH tokens in the cache) as
// mean and sample standard deviation over REPS runs after one warm-up.
// With NP > 1, tg128 is NP sequences generating together (each pass a batch
// of one token per sequence, every logit out; DEPTH tokens of each first),
// its t/s their total, as `tessera bench --parallel NP` counts it.
// With REPS 0 it loads the model, makes a context, decodes one token and
// exits (bench/load.sh times the whole process: load time to a first token).
#define _POSIX_C_SOURCE 199309L  // clock_gettime under -std=c11

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "llamacpp_api.h"

enum { kPrompt = 512, kGen = 128, kMaxReps = 64, kTokens = 32768, kMaxSeq = 64 };

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

// n tokens of sequence `seq` from position `pos`, the last one's logits out.
static int seq_batch(void* ctx, llama_token* tok, int n, int pos, int seq) {
  static int32_t positions[kPrompt], n_seq[kPrompt], seq_ids[kPrompt];
  static int32_t* seq_ptr[kPrompt];
  static int8_t logits[kPrompt];
  for (int i = 0; i < n; ++i) {
    positions[i] = pos + i;
    n_seq[i] = 1;
    seq_ids[i] = seq;
    seq_ptr[i] = &seq_ids[i];
    logits[i] = i + 1 == n;
  }
  struct llama_batch b = {n, tok, NULL, positions, n_seq, seq_ptr, logits};
  return llama_decode(ctx, b);
}

// One token for each of sequences 0 .. np - 1 at position `pos`, every logit out.
static int parallel_batch(void* ctx, llama_token* tok, int np, int pos) {
  static int32_t positions[kMaxSeq], n_seq[kMaxSeq], seq_ids[kMaxSeq];
  static int32_t* seq_ptr[kMaxSeq];
  static int8_t logits[kMaxSeq];
  for (int s = 0; s < np; ++s) {
    positions[s] = pos;
    n_seq[s] = 1;
    seq_ids[s] = s;
    seq_ptr[s] = &seq_ids[s];
    logits[s] = 1;
  }
  struct llama_batch b = {np, tok, NULL, positions, n_seq, seq_ptr, logits};
  return llama_decode(ctx, b);
}

int main(int argc, char** argv) {
  if (argc != 6 && argc != 7) {
    fprintf(stderr, "usage: %s MODEL THREADS DEPTH REPS BACKEND_DIR [NP]\n", argv[0]);
    return 2;
  }
  const char* path = argv[1];
  const int threads = atoi(argv[2]), depth = atoi(argv[3]), reps = atoi(argv[4]);
  const int np = argc == 7 ? atoi(argv[6]) : 1;
  if (np < 1 || np > kMaxSeq) {
    fprintf(stderr, "llamacpp_bench: bad NP\n");
    return 2;
  }
  if (threads < 1 || depth < 0 || depth + kPrompt + kGen * np > kTokens || reps < 0 || reps > kMaxReps ||
      np < 1 || np > kMaxSeq) {
    fprintf(stderr, "llamacpp_bench: bad THREADS, DEPTH, REPS or NP\n");
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
  // The leading u32 fields (bench/arch_fixture.c): n_ctx, n_batch, n_ubatch, n_seq_max,
  // n_rs_seq, n_outputs_max (0: n_batch), n_outputs_max_per_seq, n_threads, n_threads_batch.
  uint32_t* u = (uint32_t*)cp.bytes;
  // (Each sequence gets n_ctx / NP cells of llama.cpp's cache, and pp runs in sequence 0.)
  u[0] = (uint32_t)(np * (depth + kPrompt + kGen));
  u[1] = kPrompt;
  u[2] = kPrompt;
  u[3] = (uint32_t)np;
  u[7] = (uint32_t)threads;
  u[8] = (uint32_t)threads;
  void* ctx = llama_init_from_model(model, cp);
  if (ctx == NULL) {
    fprintf(stderr, "llamacpp_bench: llama.cpp could not make a context\n");
    return 1;
  }
  llama_set_n_threads(ctx, threads, threads);
  if (reps == 0) {  // load time: one token, then exit
    llama_token first = 1;
    if (llama_decode(ctx, llama_batch_get_one(&first, 1)) != 0) return 1;
    llama_synchronize(ctx);
    llama_free(ctx);
    llama_model_free(model);
    return 0;
  }
  static llama_token tokens[kTokens];
  srand(1);
  const int n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));
  const int id_range = n_vocab - 1 < 30000 ? n_vocab - 1 : 30000;
  for (int i = 0; i < kTokens; ++i) tokens[i] = 1 + rand() % id_range;  // random ids, as llama-bench
  double pp[kMaxReps], tg[kMaxReps];
  for (int r = -1; r < reps; ++r) {  // r = -1: warm-up
    llama_memory_clear(llama_get_memory(ctx), 1);
    const double t0 = seconds();
    if (llama_decode(ctx, llama_batch_get_one(tokens, kPrompt)) != 0) return 1;
    llama_synchronize(ctx);
    const double t1 = seconds();
    llama_memory_clear(llama_get_memory(ctx), 1);
    for (int s = 0; s < np; ++s) {
      for (int d = 0; d < depth; d += kPrompt) {
        const int n = depth - d < kPrompt ? depth - d : kPrompt;
        if (seq_batch(ctx, tokens + d, n, d, s) != 0) return 1;
      }
    }
    llama_synchronize(ctx);
    const double t2 = seconds();
    for (int i = 0; i < kGen; ++i) {
      const int rc = np == 1 ? llama_decode(ctx, llama_batch_get_one(tokens + depth + i, 1))
                             : parallel_batch(ctx, tokens + depth + i * np, np, depth + i);
      if (rc != 0) return 1;
    }
    llama_synchronize(ctx);
    const double t3 = seconds();
    if (r >= 0) {
      pp[r] = kPrompt / (t1 - t0);
      tg[r] = (double)kGen * np / (t3 - t2);
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
