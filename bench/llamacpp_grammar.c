// What a GBNF grammar costs llama.cpp per sampled token, for
// bench/grammar_overhead.sh: libllama's grammar sampler driven as llama-cli
// and llama-server drive it (common_sampler: the chain samples first, the
// grammar checks that one token, and only when it is refused does the grammar
// mask the whole vocabulary before the chain samples again). The chain is
// top-k 40, top-p 0.95, min-p 0.05, temperature 0.8 and a seeded draw, as
// tessera run's defaults. libllama's entry points: bench/llamacpp_api.h.
//
//   llamacpp_grammar MODEL THREADS N SEED GRAMMAR_FILE|- BACKEND_DIR
// "-": no grammar. Decodes the prompt "Data:" then up to N tokens, stopping
// at an end-of-generation token; prints one line: tokens, decode ms per
// token, sampling CPU microseconds per token (this thread's CPU time).
#define _POSIX_C_SOURCE 199309L

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "llamacpp_api.h"

static double wall_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return 1e3 * (double)t.tv_sec + 1e-6 * (double)t.tv_nsec;
}

static double cpu_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return 1e3 * (double)t.tv_sec + 1e-6 * (double)t.tv_nsec;
}

static char* read_all(const char* path) {
  FILE* f = fopen(path, "rb");
  if (f == NULL) return NULL;
  fseek(f, 0, SEEK_END);
  const long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char* text = malloc((size_t)n + 1);
  if (text == NULL || fread(text, 1, (size_t)n, f) != (size_t)n) {
    fclose(f);
    free(text);
    return NULL;
  }
  text[n] = '\0';
  fclose(f);
  return text;
}

static void fill(llama_token_data_array* cur, const float* logits, int32_t n) {
  for (int32_t i = 0; i < n; ++i) cur->data[i] = (llama_token_data){i, logits[i], 0.0f};
  cur->size = (size_t)n;
  cur->selected = -1;
  cur->sorted = false;
}

int main(int argc, char** argv) {
  if (argc != 7) {
    fprintf(stderr, "usage: %s MODEL THREADS N SEED GRAMMAR_FILE|- BACKEND_DIR\n", argv[0]);
    return 2;
  }
  const int threads = atoi(argv[2]), n_gen = atoi(argv[3]);
  const uint32_t seed = (uint32_t)strtoul(argv[4], NULL, 10);
  char* grammar = NULL;
  if (strcmp(argv[5], "-") != 0 && (grammar = read_all(argv[5])) == NULL) {
    fprintf(stderr, "llamacpp_grammar: cannot read %s\n", argv[5]);
    return 2;
  }
  ggml_backend_load_all_from_path(argv[6]);
  llama_backend_init();
  void* model = llama_model_load_from_file(argv[1], llama_model_default_params());
  if (model == NULL) {
    fprintf(stderr, "llamacpp_grammar: llama.cpp could not load %s\n", argv[1]);
    return 1;
  }
  struct opaque_params cp = llama_context_default_params();
  uint32_t* u = (uint32_t*)cp.bytes;  // n_ctx, n_batch, n_ubatch, n_seq_max, n_threads, n_threads_batch
  u[0] = 4096;
  u[1] = 512;
  u[2] = 512;
  u[3] = 1;
  u[4] = (uint32_t)threads;
  u[5] = (uint32_t)threads;
  void* ctx = llama_init_from_model(model, cp);
  if (ctx == NULL) return 1;
  llama_set_n_threads(ctx, threads, threads);
  const void* vocab = llama_model_get_vocab(model);
  const int32_t n_vocab = llama_vocab_n_tokens(vocab);

  void* chain = llama_sampler_chain_init(llama_sampler_chain_default_params());
  llama_sampler_chain_add(chain, llama_sampler_init_top_k(40));
  llama_sampler_chain_add(chain, llama_sampler_init_top_p(0.95f, 1));
  llama_sampler_chain_add(chain, llama_sampler_init_min_p(0.05f, 1));
  llama_sampler_chain_add(chain, llama_sampler_init_temp(0.8f));
  llama_sampler_chain_add(chain, llama_sampler_init_dist(seed));
  void* gram = grammar != NULL ? llama_sampler_init_grammar(vocab, grammar, "root") : NULL;
  if (grammar != NULL && gram == NULL) {
    fprintf(stderr, "llamacpp_grammar: llama.cpp refused the grammar in %s\n", argv[5]);
    return 1;
  }

  llama_token prompt[64];
  const int32_t n_prompt = llama_tokenize(vocab, "Data:", 5, prompt, 64, true, false);
  if (n_prompt <= 0 || llama_decode(ctx, llama_batch_get_one(prompt, n_prompt)) != 0) return 1;
  llama_token_data_array cur = {malloc(sizeof(llama_token_data) * (size_t)n_vocab), 0, -1, false};
  double decode_ms = 0, sample_ms = 0;
  int generated = 0;
  for (; generated < n_gen; ++generated) {
    const float* logits = llama_get_logits_ith(ctx, -1);
    const double s0 = cpu_ms();
    fill(&cur, logits, n_vocab);
    llama_sampler_apply(chain, &cur);
    llama_token id = cur.data[cur.selected].id;
    if (gram != NULL) {
      llama_token_data one = {id, 1.0f, 0.0f};
      llama_token_data_array single = {&one, 1, -1, false};
      llama_sampler_apply(gram, &single);
      if (isinf(single.data[0].logit)) {  // refused: the grammar over the whole vocabulary, then the chain
        fill(&cur, logits, n_vocab);
        llama_sampler_apply(gram, &cur);
        llama_sampler_apply(chain, &cur);
        id = cur.data[cur.selected].id;
      }
      llama_sampler_accept(gram, id);
    }
    llama_sampler_accept(chain, id);
    sample_ms += cpu_ms() - s0;
    if (llama_vocab_is_eog(vocab, id)) break;
    const double d0 = wall_ms();
    if (llama_decode(ctx, llama_batch_get_one(&id, 1)) != 0) return 1;
    decode_ms += wall_ms() - d0;
  }
  const int n = generated > 0 ? generated : 1;
  printf("%d\t%.3f\t%.1f\n", generated, decode_ms / n, 1e3 * sample_ms / n);
  free(cur.data);
  if (gram != NULL) llama_sampler_free(gram);
  llama_sampler_free(chain);
  llama_free(ctx);
  llama_model_free(model);
  free(grammar);
  return 0;
}
