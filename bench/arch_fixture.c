// Reference data for an architecture fixture (tests/fixtures/archs): what
// llama.cpp computes on a random-weight GGUF, through node-llama-cpp's
// prebuilt libllama (bench/llamacpp_api.h), as bench/arch_fixture.sh runs it.
//
//   arch_fixture MODEL OUT_PREFIX BACKEND_DIR
// decodes the fixture prompt (24 ids, BOS first) in one llama_decode with
// logits at every position and writes them to OUT_PREFIX.logits.f32
// ([24][n_vocab] f32); then decodes 24 greedy tokens one at a time (argmax,
// ties to the lowest id) and prints the JSON of the fixture (prompt, greedy
// tokens, smallest top-1/top-2 margin) on stdout. A second context decodes
// the prompt one token per call and runs the same greedy loop: its tokens
// must be the same (else exit 3), and the largest difference of its prompt
// logits from the batched ones is printed on stderr.
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llamacpp_api.h"

enum { kPrompt = 24, kGreedy = 24, kCtx = 256 };

static const llama_token kPromptIds[kPrompt] = {1,   403, 407, 261, 378, 432, 383, 286, 261, 376, 400, 428,
                                                395, 392, 412, 444, 426, 346, 397, 355, 267, 352, 379, 322};

static void* make_context(void* model) {
  struct opaque_params cp = llama_context_default_params();
  // The leading uint32 fields of this build's llama_context_params (its
  // defaults: 512, 2048, 512, 1, 0, 0, 1, 4, 4): n_ctx, n_batch, n_ubatch,
  // n_seq_max, n_rs_seq, n_outputs_max (0: n_batch), n_outputs_max_per_seq
  // (1: only the last token's logits), n_threads, n_threads_batch.
  uint32_t* u = (uint32_t*)cp.bytes;
  u[0] = kCtx;
  u[1] = kCtx;
  u[2] = kCtx;
  u[3] = 1;
  u[6] = kCtx;
  u[7] = 1;
  u[8] = 1;
  void* ctx = llama_init_from_model(model, cp);
  if (ctx != NULL) llama_set_n_threads(ctx, 1, 1);
  return ctx;
}

// Decodes tokens [0, n) at positions from `pos`, logits for every one when all_logits.
static int decode(void* ctx, const llama_token* tokens, int n, int pos, int all_logits) {
  static llama_token tok[kCtx];
  static int32_t positions[kCtx], n_seq[kCtx], seq0 = 0;
  static int32_t* seq_ids[kCtx];
  static int8_t logits[kCtx];
  for (int i = 0; i < n; ++i) {
    tok[i] = tokens[i];
    positions[i] = pos + i;
    n_seq[i] = 1;
    seq_ids[i] = &seq0;
    logits[i] = (int8_t)(all_logits || i == n - 1);
  }
  struct llama_batch b = {n, tok, NULL, positions, n_seq, seq_ids, logits};
  return llama_decode(ctx, b);
}

static int argmax(const float* v, int n, float* margin) {
  int best = 0;
  for (int i = 1; i < n; ++i) {
    if (v[i] > v[best]) best = i;
  }
  float second = -INFINITY;
  for (int i = 0; i < n; ++i) {
    if (i != best && v[i] > second) second = v[i];
  }
  *margin = v[best] - second;
  return best;
}

// The greedy loop after the prompt, whose last logits are `last`.
static int greedy(void* ctx, const float* last, int n_vocab, llama_token* out, float* min_margin) {
  *min_margin = INFINITY;
  const float* logits = last;
  for (int i = 0; i < kGreedy; ++i) {
    float margin;
    out[i] = argmax(logits, n_vocab, &margin);
    if (margin < *min_margin) *min_margin = margin;
    if (decode(ctx, &out[i], 1, kPrompt + i, 0) != 0) return 1;
    logits = llama_get_logits_ith(ctx, -1);
  }
  return 0;
}

int main(int argc, char** argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: %s MODEL OUT_PREFIX BACKEND_DIR\n", argv[0]);
    return 2;
  }
  ggml_backend_load_all_from_path(argv[3]);
  llama_backend_init();
  struct opaque_params mp = llama_model_default_params();
  void* model = llama_model_load_from_file(argv[1], mp);
  if (model == NULL) {
    fprintf(stderr, "arch_fixture: llama.cpp could not load %s\n", argv[1]);
    return 1;
  }
  const int n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));
  void* ctx = make_context(model);
  if (ctx == NULL || decode(ctx, kPromptIds, kPrompt, 0, 1) != 0) {
    fprintf(stderr, "arch_fixture: the batched prompt failed\n");
    return 1;
  }
  float* batched = malloc(sizeof(float) * kPrompt * (size_t)n_vocab);
  for (int i = 0; i < kPrompt; ++i) memcpy(batched + (size_t)i * n_vocab, llama_get_logits_ith(ctx, i), sizeof(float) * n_vocab);
  char path[4096];
  snprintf(path, sizeof path, "%s.logits.f32", argv[2]);
  FILE* f = fopen(path, "wb");
  if (f == NULL || fwrite(batched, sizeof(float) * n_vocab, kPrompt, f) != kPrompt || fclose(f) != 0) {
    fprintf(stderr, "arch_fixture: cannot write %s\n", path);
    return 1;
  }
  llama_token tokens[kGreedy], again[kGreedy];
  float min_margin, unused;
  if (greedy(ctx, batched + (size_t)(kPrompt - 1) * n_vocab, n_vocab, tokens, &min_margin) != 0) return 1;

  // The check: one token per call.
  void* seq = make_context(model);
  float max_diff = 0;
  for (int i = 0; i < kPrompt; ++i) {
    if (seq == NULL || decode(seq, &kPromptIds[i], 1, i, 0) != 0) return 1;
    const float* l = llama_get_logits_ith(seq, -1);
    for (int v = 0; v < n_vocab; ++v) max_diff = fmaxf(max_diff, fabsf(l[v] - batched[(size_t)i * n_vocab + v]));
  }
  float* last = malloc(sizeof(float) * (size_t)n_vocab);
  memcpy(last, llama_get_logits_ith(seq, -1), sizeof(float) * n_vocab);
  if (greedy(seq, last, n_vocab, again, &unused) != 0) return 1;
  fprintf(stderr, "arch_fixture: one-token prompt logits differ from the batch by at most %.4g\n", max_diff);
  if (memcmp(tokens, again, sizeof tokens) != 0) {
    fprintf(stderr, "arch_fixture: the one-token run chose other greedy tokens\n");
    return 3;
  }

  printf("  \"prompt\": [");
  for (int i = 0; i < kPrompt; ++i) printf("%s%d", i ? ", " : "", kPromptIds[i]);
  printf("],\n  \"greedy\": [");
  for (int i = 0; i < kGreedy; ++i) printf("%s%d", i ? ", " : "", tokens[i]);
  printf("],\n  \"min_margin\": %.10g,\n  \"n_vocab\": %d,\n", min_margin, n_vocab);
  free(last);
  free(batched);
  llama_free(seq);
  llama_free(ctx);
  llama_model_free(model);
  return 0;
}
