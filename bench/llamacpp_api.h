// The few entry points of libllama's public C API that the bench programs
// call (bench/llamacpp_bench.c, bench/llamacpp_grammar.c, bench/arch_fixture.c,
// bench/embd_fixture.c), declared here
// from the llama.h of the llama.cpp that node-llama-cpp 3.22.1 bundles (the
// npm package ships no headers). Parameter structs are passed as oversized
// opaque blocks; only their leading fields, whose layout has been stable
// across releases, are written.
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef int32_t llama_token;
struct llama_batch {
  int32_t n_tokens;
  llama_token* token;
  float* embd;
  int32_t* pos;
  int32_t* n_seq_id;
  int32_t** seq_id;
  int8_t* logits;
};
typedef struct {
  llama_token id;
  float logit;
  float p;
} llama_token_data;
typedef struct {
  llama_token_data* data;
  size_t size;
  int64_t selected;
  bool sorted;
} llama_token_data_array;
struct llama_sampler_chain_params {
  bool no_perf;
};
struct opaque_params {  // larger than llama_model_params / llama_context_params
  _Alignas(8) unsigned char bytes[1024];
};

struct opaque_params llama_model_default_params(void);
struct opaque_params llama_context_default_params(void);
void* llama_model_load_from_file(const char* path, struct opaque_params params);
void* llama_init_from_model(void* model, struct opaque_params params);
void llama_set_n_threads(void* ctx, int32_t n_threads, int32_t n_threads_batch);
struct llama_batch llama_batch_get_one(llama_token* tokens, int32_t n_tokens);
int32_t llama_decode(void* ctx, struct llama_batch batch);
float* llama_get_logits_ith(void* ctx, int32_t i);
int32_t llama_encode(void* ctx, struct llama_batch batch);
void llama_set_embeddings(void* ctx, bool embeddings);
float* llama_get_embeddings_seq(void* ctx, int32_t seq_id);
float* llama_get_embeddings_ith(void* ctx, int32_t i);
int32_t llama_pooling_type(const void* ctx);  // llama_pooling_type: 1 mean, 2 cls, 3 last, 4 rank
int32_t llama_model_n_embd(const void* model);
uint32_t llama_model_n_cls_out(const void* model);
llama_token llama_vocab_bos(const void* vocab);
llama_token llama_vocab_eos(const void* vocab);
llama_token llama_vocab_sep(const void* vocab);
bool llama_vocab_get_add_bos(const void* vocab);
bool llama_vocab_get_add_eos(const void* vocab);
bool llama_vocab_get_add_sep(const void* vocab);
void* llama_get_memory(void* ctx);
void llama_memory_clear(void* mem, bool data);
void llama_synchronize(void* ctx);
void llama_free(void* ctx);
void llama_model_free(void* model);
void llama_backend_init(void);
void ggml_backend_load_all_from_path(const char* dir);

const void* llama_model_get_vocab(const void* model);
const char* llama_model_chat_template(const void* model, const char* name);
int32_t llama_vocab_n_tokens(const void* vocab);
bool llama_vocab_is_eog(const void* vocab, llama_token token);
int32_t llama_tokenize(const void* vocab, const char* text, int32_t text_len, llama_token* tokens,
                       int32_t n_tokens_max, bool add_special, bool parse_special);

struct llama_sampler_chain_params llama_sampler_chain_default_params(void);
void* llama_sampler_chain_init(struct llama_sampler_chain_params params);
void llama_sampler_chain_add(void* chain, void* smpl);
void* llama_sampler_init_grammar(const void* vocab, const char* grammar_str, const char* grammar_root);
void* llama_sampler_init_top_k(int32_t k);
void* llama_sampler_init_top_p(float p, size_t min_keep);
void* llama_sampler_init_min_p(float p, size_t min_keep);
void* llama_sampler_init_temp(float t);
void* llama_sampler_init_dist(uint32_t seed);
void llama_sampler_apply(void* smpl, llama_token_data_array* cur_p);
void llama_sampler_accept(void* smpl, llama_token token);
void llama_sampler_free(void* smpl);
