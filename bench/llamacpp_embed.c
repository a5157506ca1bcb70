// llama.cpp's side of bench/embed.sh: embeds every line of a file with
// libllama (node-llama-cpp's prebuilt, or a native build) as llama-embedding
// does: each text tokenized with special tokens, texts packed into batches
// of at most N_BATCH tokens and N_SEQ sequences (one sequence per text),
// llama_encode, the pooled vector of each sequence, L2-normalized.
//
//   llamacpp_embed MODEL FILE THREADS N_BATCH N_SEQ [BACKEND_DIR]
// prints "texts N tokens T ms M tokens/s R" for the embedding loop (after
// loading and tokenizing).
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "llamacpp_api.h"

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

int main(int argc, char** argv) {
  if (argc < 6) {
    fprintf(stderr, "usage: %s MODEL FILE THREADS N_BATCH N_SEQ [BACKEND_DIR]\n", argv[0]);
    return 2;
  }
  const int threads = atoi(argv[3]), n_batch = atoi(argv[4]), n_seq = atoi(argv[5]);
  if (argc > 6) ggml_backend_load_all_from_path(argv[6]);
  llama_backend_init();
  void* model = llama_model_load_from_file(argv[1], llama_model_default_params());
  if (model == NULL) return 1;
  const void* vocab = llama_model_get_vocab(model);
  const int n_embd = llama_model_n_embd(model);
  struct opaque_params cp = llama_context_default_params();
  uint32_t* u = (uint32_t*)cp.bytes;
  // n_ctx, n_batch, n_ubatch, n_seq_max lead both layouts; node-llama-cpp's
  // fork then has n_rs_seq, n_outputs_max, n_outputs_max_per_seq (default
  // 1) before the thread counts, upstream n_rs_seq, n_outputs_max.
  const int fork = u[6] == 1 && u[7] == u[8];
  u[0] = (uint32_t)n_batch;
  u[1] = (uint32_t)n_batch;
  u[2] = (uint32_t)n_batch;
  u[3] = (uint32_t)n_seq;
  if (fork) u[6] = (uint32_t)n_batch;
  void* ctx = llama_init_from_model(model, cp);
  if (ctx == NULL) return 1;
  llama_set_n_threads(ctx, threads, threads);
  llama_set_embeddings(ctx, true);

  FILE* f = fopen(argv[2], "rb");
  if (f == NULL) return 1;
  size_t cap = 1 << 20, len = 0;
  char* text = malloc(cap);
  for (size_t k; (k = fread(text + len, 1, cap - len, f)) > 0;) {
    len += k;
    if (len == cap) text = realloc(text, cap *= 2);
  }
  fclose(f);
  text[len] = 0;
  // Tokenize every line first (not timed), as llama-embedding does.
  int n_texts = 0, cap_texts = 1024;
  llama_token** toks = malloc(sizeof *toks * cap_texts);
  int* lens = malloc(sizeof *lens * cap_texts);
  long total = 0;
  for (char* line = strtok(text, "\n"); line != NULL; line = strtok(NULL, "\n")) {
    if (*line == 0) continue;
    if (n_texts == cap_texts) {
      cap_texts *= 2;
      toks = realloc(toks, sizeof *toks * cap_texts);
      lens = realloc(lens, sizeof *lens * cap_texts);
    }
    toks[n_texts] = malloc(sizeof(llama_token) * (size_t)n_batch);
    lens[n_texts] = llama_tokenize(vocab, line, (int32_t)strlen(line), toks[n_texts], n_batch, true, false);
    if (lens[n_texts] <= 0) return 1;
    total += lens[n_texts++];
  }
  llama_token* tok = malloc(sizeof *tok * (size_t)n_batch);
  int32_t* pos = malloc(sizeof *pos * (size_t)n_batch);
  int32_t* n_seq_id = malloc(sizeof *n_seq_id * (size_t)n_batch);
  int32_t** seq_ids = malloc(sizeof *seq_ids * (size_t)n_batch);
  int32_t* seq_of = malloc(sizeof *seq_of * (size_t)n_batch);
  int8_t* out = malloc((size_t)n_batch);
  float* sink = calloc((size_t)n_embd, sizeof(float));
  const double t0 = now_ms();
  for (int begin = 0; begin < n_texts;) {
    int end = begin, n = 0;
    while (end < n_texts && end - begin < n_seq && n + lens[end] <= n_batch) {
      for (int i = 0; i < lens[end]; ++i) {
        tok[n] = toks[end][i];
        pos[n] = i;
        n_seq_id[n] = 1;
        seq_of[n] = end - begin;
        seq_ids[n] = &seq_of[n];
        out[n] = 1;
        ++n;
      }
      ++end;
    }
    llama_memory_clear(llama_get_memory(ctx), true);
    struct llama_batch b = {n, tok, NULL, pos, n_seq_id, seq_ids, out};
    if (llama_encode(ctx, b) != 0) return 1;
    for (int s = 0; s < end - begin; ++s) {
      const float* e = llama_get_embeddings_seq(ctx, s);
      double norm = 0;
      for (int j = 0; j < n_embd; ++j) norm += (double)e[j] * e[j];
      norm = sqrt(norm);
      for (int j = 0; j < n_embd; ++j) sink[j] += (float)(e[j] / norm);
    }
    begin = end;
  }
  const double ms = now_ms() - t0;
  printf("texts %d tokens %ld ms %.1f tokens/s %.1f (check %.3f)\n", n_texts, total, ms, 1e3 * (double)total / ms,
         sink[0]);
  llama_free(ctx);
  llama_model_free(model);
  return 0;
}
