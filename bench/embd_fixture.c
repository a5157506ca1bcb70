// Reference data for an encoder fixture (tests/fixtures/archs): what
// llama.cpp computes on a random-weight BERT-family GGUF, through
// node-llama-cpp's prebuilt libllama (bench/llamacpp_api.h), as
// bench/embd_fixture.sh runs it.
//
//   embd_fixture MODEL OUT_PREFIX BACKEND_DIR [decode | tokens]
// tokenizes each text below with llama.cpp's tokenizer (special tokens
// added: [CLS] ... [SEP]), encodes it alone (one llama_encode, every token
// an output; with `decode`, a decoder that embeds such as Qwen3-Embedding,
// one llama_decode, whose attention stays causal: llama_encode's is not;
// with `tokens`, the context's pooling set to none: every token's state is
// written, [all texts' tokens][n_embd], to OUT_PREFIX.tokens.embd.f32, and
// nothing printed) and writes the pooled embedding llama.cpp returns (the model's
// pooling type, not normalized) to OUT_PREFIX.embd.f32 ([n_texts][n_embd]
// f32); prints the JSON body of the fixture (texts, their ids, pooling,
// n_embd) on stdout. A reranker (rank pooling) scores (query, document)
// pairs instead, laid out as llama-server does ([BOS] query [EOS] [SEP]
// document [EOS], as the vocabulary adds them), and writes its n_cls_out
// scores per pair.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llamacpp_api.h"

enum { kCtx = 512 };

static const char* const kTexts[] = {
    "Hello world",
    "The quick brown fox jumps over the lazy dog.",
    "a",
    "Retrieval-augmented generation embeds documents, then ranks them against a query: "
    "F\xC3\xBChrer, caf\xC3\xA9, na\xC3\xAFve, 4 \xC2\xBD months.",
};
enum { kNumTexts = sizeof kTexts / sizeof kTexts[0] };

static const char* const kPairs[][2] = {
    {"what is a panda?", "The giant panda is a bear species endemic to China."},
    {"what is a panda?", "Paris is the capital of France."},
    {"how fast is a cheetah", "hi"},
};
enum { kNumPairs = sizeof kPairs / sizeof kPairs[0] };

// Appends text's tokens (no special tokens) at tok + n; returns the new n.
static int append_tokens(const void* vocab, const char* text, llama_token* tok, int n, int cap) {
  const int k = llama_tokenize(vocab, text, (int32_t)strlen(text), tok + n, cap - n, false, false);
  return k < 0 ? -1 : n + k;
}

int main(int argc, char** argv) {
  if (argc != 4 && !(argc == 5 && (strcmp(argv[4], "decode") == 0 || strcmp(argv[4], "tokens") == 0))) {
    fprintf(stderr, "usage: %s MODEL OUT_PREFIX BACKEND_DIR [decode | tokens]\n", argv[0]);
    return 2;
  }
  const int decode = argc == 5 && strcmp(argv[4], "decode") == 0;
  const int tokens = argc == 5 && strcmp(argv[4], "tokens") == 0;
  ggml_backend_load_all_from_path(argv[3]);
  llama_backend_init();
  void* model = llama_model_load_from_file(argv[1], llama_model_default_params());
  if (model == NULL) {
    fprintf(stderr, "embd_fixture: llama.cpp could not load %s\n", argv[1]);
    return 1;
  }
  const void* vocab = llama_model_get_vocab(model);
  const int n_embd = llama_model_n_embd(model);
  struct opaque_params cp = llama_context_default_params();
  // Leading uint32 fields (see arch_fixture.c): n_ctx, n_batch, n_ubatch,
  // n_seq_max, n_rs_seq, n_outputs_max, n_outputs_max_per_seq, n_threads,
  // n_threads_batch.
  uint32_t* u = (uint32_t*)cp.bytes;
  u[0] = kCtx;
  u[1] = kCtx;
  u[2] = kCtx;
  u[3] = 1;
  u[6] = kCtx;
  u[7] = 1;
  u[8] = 1;
  if (tokens) {
    // The enums after the thread counts (an optional context type, then
    // rope scaling, pooling, ...) default to -1 from rope scaling on:
    // pooling follows the first -1. Checked below.
    int k = 9;
    while (k < 16 && u[k] != 0xFFFFFFFFu) ++k;
    u[k + 1] = 0;  // LLAMA_POOLING_TYPE_NONE
  }
  void* ctx = llama_init_from_model(model, cp);
  if (ctx == NULL) {
    fprintf(stderr, "embd_fixture: no context\n");
    return 1;
  }
  if (tokens && llama_pooling_type(ctx) != 0) {
    fprintf(stderr, "embd_fixture: could not set pooling none (the context params' layout)\n");
    return 1;
  }
  llama_set_embeddings(ctx, true);
  char path[4096];
  snprintf(path, sizeof path, "%s.%sembd.f32", argv[2], tokens ? "tokens." : "");
  FILE* f = fopen(path, "wb");
  if (f == NULL) {
    fprintf(stderr, "embd_fixture: cannot write %s\n", path);
    return 1;
  }
  static llama_token tok[kCtx];
  static int32_t pos[kCtx], n_seq[kCtx], seq0 = 0;
  static int32_t* seq_ids[kCtx];
  static int8_t out[kCtx];
  const int rank = llama_pooling_type(ctx) == 4;
  const int n_out = rank ? (int)llama_model_n_cls_out(model) : n_embd;
  const int n_inputs = rank ? kNumPairs : kNumTexts;
  printf("  \"%s\": [\n", rank ? "pairs" : "texts");
  for (int t = 0; t < n_inputs; ++t) {
    int n;
    const char* tmpl = rank ? llama_model_chat_template(model, "rerank") : NULL;
    if (tmpl != NULL) {  // llama-server's format_prompt_rerank with the model's template
      static char prompt[8192];
      size_t len = 0;
      for (const char* p = tmpl; *p != 0 && len + 512 < sizeof prompt;) {
        const char* value = strncmp(p, "{query}", 7) == 0 ? kPairs[t][0] : strncmp(p, "{document}", 10) == 0 ? kPairs[t][1] : NULL;
        if (value != NULL) {
          len += (size_t)snprintf(prompt + len, sizeof prompt - len, "%s", value);
          p += value == kPairs[t][0] ? 7 : 10;
        } else {
          prompt[len++] = *p++;
        }
      }
      prompt[len] = 0;
      n = llama_tokenize(vocab, prompt, (int32_t)len, tok, kCtx, false, true);
    } else if (rank) {
      llama_token eos = llama_vocab_eos(vocab);
      if (eos < 0) eos = llama_vocab_sep(vocab);
      n = 0;
      if (llama_vocab_get_add_bos(vocab)) tok[n++] = llama_vocab_bos(vocab);
      n = append_tokens(vocab, kPairs[t][0], tok, n, kCtx - 4);
      if (n >= 0 && llama_vocab_get_add_eos(vocab)) tok[n++] = eos;
      if (n >= 0 && llama_vocab_get_add_sep(vocab)) tok[n++] = llama_vocab_sep(vocab);
      if (n >= 0) n = append_tokens(vocab, kPairs[t][1], tok, n, kCtx - 4);
      if (n >= 0 && llama_vocab_get_add_eos(vocab)) tok[n++] = eos;
    } else {
      n = llama_tokenize(vocab, kTexts[t], (int32_t)strlen(kTexts[t]), tok, kCtx, true, false);
    }
    if (n <= 0) {
      fprintf(stderr, "embd_fixture: cannot tokenize text %d\n", t);
      return 1;
    }
    for (int i = 0; i < n; ++i) {
      pos[i] = i;
      n_seq[i] = 1;
      seq_ids[i] = &seq0;
      out[i] = 1;
    }
    llama_memory_clear(llama_get_memory(ctx), true);
    struct llama_batch b = {n, tok, NULL, pos, n_seq, seq_ids, out};
    if ((decode ? llama_decode(ctx, b) : llama_encode(ctx, b)) != 0) {
      fprintf(stderr, "embd_fixture: llama_%s failed on text %d\n", decode ? "decode" : "encode", t);
      return 1;
    }
    if (tokens) {
      for (int i = 0; i < n; ++i) {
        const float* e = llama_get_embeddings_ith(ctx, i);
        if (e == NULL || fwrite(e, sizeof(float), (size_t)n_embd, f) != (size_t)n_embd) {
          fprintf(stderr, "embd_fixture: no embedding for token %d of text %d\n", i, t);
          return 1;
        }
      }
      continue;
    }
    const float* e = llama_get_embeddings_seq(ctx, 0);
    if (e == NULL || fwrite(e, sizeof(float), (size_t)n_out, f) != (size_t)n_out) {
      fprintf(stderr, "embd_fixture: no pooled embedding for input %d\n", t);
      return 1;
    }
    if (rank) {
      printf("    {\"query\": \"%s\", \"document\": \"%s\", \"ids\": [", kPairs[t][0], kPairs[t][1]);
    } else {
      printf("    {\"text\": \"%s\", \"ids\": [", kTexts[t]);
    }
    for (int i = 0; i < n; ++i) printf("%s%d", i ? ", " : "", tok[i]);
    printf("]}%s\n", t + 1 < n_inputs ? "," : "");
  }
  if (fclose(f) != 0) return 1;
  if (tokens) return 0;
  printf("  ],\n  \"pooling\": %d,\n  \"n_embd\": %d,\n  \"n_out\": %d,\n", llama_pooling_type(ctx),
         n_embd, n_out);
  llama_free(ctx);
  llama_model_free(model);
  return 0;
}
