// Reference ids for a tokenizer fixture (tests/fixtures/tokenizer): what
// llama.cpp's tokenizer gives for each case of a test-tokenizer-0 .inp file,
// through node-llama-cpp's prebuilt libllama (bench/llamacpp_api.h), as
// bench/tok_fixture.sh runs it.
//
//   tok_fixture MODEL INP BACKEND_DIR > OUT
// splits INP on "\n__ggml_vocab_test__\n" and prints one line per case: its
// ids, each after a space, with no special tokens added or parsed (the
// layout of llama.cpp's .out files).
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llamacpp_api.h"

int main(int argc, char** argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: %s MODEL INP BACKEND_DIR\n", argv[0]);
    return 2;
  }
  FILE* f = fopen(argv[2], "rb");
  if (f == NULL) {
    fprintf(stderr, "tok_fixture: cannot open %s\n", argv[2]);
    return 1;
  }
  fseek(f, 0, SEEK_END);
  const long size = ftell(f);
  fseek(f, 0, SEEK_SET);
  char* inp = malloc((size_t)size + 1);
  if (inp == NULL || fread(inp, 1, (size_t)size, f) != (size_t)size) return 1;
  inp[size] = 0;
  fclose(f);

  ggml_backend_load_all_from_path(argv[3]);
  llama_backend_init();
  void* model = llama_model_load_from_file(argv[1], llama_model_default_params());
  if (model == NULL) {
    fprintf(stderr, "tok_fixture: llama.cpp could not load %s\n", argv[1]);
    return 1;
  }
  const void* vocab = llama_model_get_vocab(model);
  static const char kSeparator[] = "\n__ggml_vocab_test__\n";
  enum { kCap = 1 << 16 };
  static llama_token ids[kCap];
  for (char* pos = inp;;) {
    char* hit = strstr(pos, kSeparator);
    if (hit == NULL) break;
    const int n = llama_tokenize(vocab, pos, (int32_t)(hit - pos), ids, kCap, false, false);
    if (n < 0) {
      fprintf(stderr, "tok_fixture: a case needs more than %d tokens\n", kCap);
      return 1;
    }
    for (int i = 0; i < n; ++i) printf(" %d", ids[i]);
    printf("\n");
    pos = hit + sizeof kSeparator - 1;
  }
  llama_model_free(model);
  free(inp);
  return 0;
}
