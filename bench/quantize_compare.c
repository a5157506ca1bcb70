// llama.cpp's side of bench/quantize_compare.sh: the prebuilt libllama /
// libggml-base that node-llama-cpp publishes on npm (see bench/llamacpp.sh),
// with the few entry points it calls declared here.
//
//   quantize_compare quantize IN.gguf OUT.gguf FTYPE
//     llama_model_quantize with default parameters and ftype FTYPE (the
//     llama_ftype number, e.g. 15 for Q4_K_M), as `llama-quantize IN OUT N`.
//   quantize_compare quantize IN.gguf OUT.gguf FTYPE IMATRIX.gguf
//     the same with an importance matrix, passed as llama-quantize passes it
//     (values = in_sum2 / counts, 1 where a count is 0).
//   quantize_compare imatrix MODEL.gguf OUT.gguf
//     writes a made-up importance matrix in llama-imatrix's GGUF layout for
//     every 2-D weight of MODEL but token_embd (values from a fixed generator).
//   quantize_compare diff A.gguf B.gguf
//     per tensor of A: same type and bytes in B? For those that differ prints
//     the name, both types and the largest |a - b| after dequantizing both
//     with ggml; last line "identical N of M".
//   quantize_compare hashes
//     quantizes the rows of tests/core/quants_ggml_test.cpp (same generator,
//     restated below) with ggml_quantize_chunk for each type the test checks
//     and prints one FNV-1a 64 hash of the bytes per (type, row): the expected
//     data that test keeps. The two generators must stay identical.
#define _POSIX_C_SOURCE 200809L  // strndup under -std=c11

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct opaque_params {  // larger than llama_model_quantize_params
  _Alignas(8) unsigned char bytes[1024];
};
struct opaque_params llama_model_quantize_default_params(void);
uint32_t llama_model_quantize(const char* in, const char* out, const struct opaque_params* params);
void llama_backend_init(void);
size_t ggml_quantize_chunk(int type, const float* src, void* dst, int64_t start, int64_t nrows,
                           int64_t n_per_row, const float* imatrix);
size_t ggml_row_size(int type, int64_t ne);
const char* ggml_type_name(int type);

// gguf.h / ggml.h, as declared there since 2024.
struct gguf_init_params {
  _Bool no_alloc;
  void** ctx;
};
void* gguf_init_from_file(const char* fname, struct gguf_init_params params);
void gguf_free(void* ctx);
int64_t gguf_get_n_tensors(const void* ctx);
int64_t gguf_find_tensor(const void* ctx, const char* name);
const char* gguf_get_tensor_name(const void* ctx, int64_t id);
int gguf_get_tensor_type(const void* ctx, int64_t id);
size_t gguf_get_tensor_offset(const void* ctx, int64_t id);
size_t gguf_get_tensor_size(const void* ctx, int64_t id);
size_t gguf_get_data_offset(const void* ctx);
int64_t gguf_find_key(const void* ctx, const char* key);
uint32_t gguf_get_val_u32(const void* ctx, int64_t key_id);
struct ggml_type_traits {
  const char* type_name;
  int64_t blck_size;
  int64_t blck_size_interleave;
  size_t type_size;
  _Bool is_quantized;
  void (*to_float)(const void* x, float* y, int64_t k);
  void (*from_float_ref)(const float* x, void* y, int64_t k);
};
const struct ggml_type_traits* ggml_get_type_traits(int type);

// ggml.h / gguf.h, for reading and writing importance matrices.
struct ggml_init_params {
  size_t mem_size;
  void* mem_buffer;
  _Bool no_alloc;
};
void* ggml_init(struct ggml_init_params params);
void ggml_free(void* ctx);
void* ggml_new_tensor_2d(void* ctx, int type, int64_t ne0, int64_t ne1);
void* ggml_set_name(void* tensor, const char* name);
void* ggml_get_data(const void* tensor);
void* ggml_get_tensor(void* ctx, const char* name);
int ggml_n_dims(const void* tensor);
void* gguf_init_empty(void);
void gguf_set_val_u32(void* ctx, const char* key, uint32_t val);
void gguf_set_val_str(void* ctx, const char* key, const char* val);
void gguf_set_arr_str(void* ctx, const char* key, const char** data, size_t n);
void gguf_add_tensor(void* ctx, const void* tensor);
_Bool gguf_write_to_file(const void* ctx, const char* fname, _Bool only_meta);
// ggml_tensor's leading fields (type, buffer, ne[4]), stable since 2023.
struct tensor_head {
  int type;
  void* buffer;
  int64_t ne[4];
};
// llama.h's llama_model_imatrix_data: the list params.imatrix points at,
// ended by a null name.
struct imatrix_entry {
  const char* name;
  const float* data;
  size_t size;
};

// ---- the test rows: keep identical to tests/core/quants_ggml_test.cpp ----
enum { kRows = 8, kPerRow = 512 };

static uint32_t next_u32(uint32_t* s) {  // xorshift32
  *s ^= *s << 13;
  *s ^= *s >> 17;
  *s ^= *s << 5;
  return *s;
}
static float uniform(uint32_t* s) {  // [-1, 1), exact in float
  return (float)(int32_t)(next_u32(s) >> 8) * (1.0f / 8388608.0f) - 1.0f;
}
static void make_rows(float* x) {
  uint32_t s = 0x9E3779B9u;
  for (int r = 0; r < kRows; ++r) {
    float* row = x + r * kPerRow;
    for (int i = 0; i < kPerRow; ++i) {
      const float u = uniform(&s);
      switch (r) {
        case 0: row[i] = u; break;                                   // uniform
        case 1: {  // weight-like bell; the draws sequenced as in the test
          const float u2 = uniform(&s);
          const float u3 = uniform(&s);
          row[i] = 0.02f * (u + u2 + u3);
          break;
        }
        case 2: row[i] = i % 37 == 5 ? 40.0f * u : u; break;          // outliers
        case 3: row[i] = 3e-6f * u; break;                            // tiny: f16 scales go subnormal
        case 4: row[i] = 0.375f; break;                               // all equal
        case 5: row[i] = 0.5f * u + 0.75f; break;                     // all positive
        case 6: row[i] = (i / 32) % 3 == 1 ? 0.0f : u; break;         // zero blocks among others
        default: row[i] = u * u * u; break;                           // heavy centre
      }
    }
  }
}

// Importance per column: mostly in [0, 1), every 17th zero, every 29th 25.
static void make_importance(float* w) {
  for (uint32_t i = 0; i < kPerRow; ++i) {
    const uint32_t h = i * 2654435761u;
    w[i] = i % 17 == 3 ? 0.0f : i % 29 == 7 ? 25.0f : (float)(h >> 20) * (1.0f / 4096.0f);
  }
}

static uint64_t fnv1a(const unsigned char* p, size_t n) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 0x100000001b3ull;
  return h;
}

static int hashes(void) {
  static const struct {
    const char* name;
    int type;
  } types[] = {{"q2_k", 10}, {"q3_k", 11},   {"q4_k", 12},   {"q5_k", 13}, {"q6_k", 14}, {"iq4_nl", 20},
               {"iq4_xs", 23}, {"q4_0", 2}, {"q4_1", 3}, {"q5_0", 6}, {"q5_1", 7}, {"mxfp4", 39}};
  static float x[kRows * kPerRow], w[kPerRow];
  static unsigned char q[kRows * kPerRow * 2];
  make_rows(x);
  make_importance(w);
  for (int weighted = 0; weighted < 2; ++weighted) {
    printf(weighted ? "# with importance\n" : "# without\n");
    for (size_t t = 0; t < sizeof types / sizeof types[0]; ++t) {
      if (!weighted && types[t].type < 10) continue;  // legacy types: tested elsewhere
      const size_t row = ggml_row_size(types[t].type, kPerRow);
      ggml_quantize_chunk(types[t].type, x, q, 0, kRows, kPerRow, weighted ? w : NULL);
      printf("%s", types[t].name);
      for (int r = 0; r < kRows; ++r) printf(" 0x%016llxull", (unsigned long long)fnv1a(q + r * row, row));
      printf("\n");
    }
  }
  return 0;
}

static int write_imatrix(const char* model_path, const char* out_path) {
  void* meta = NULL;
  struct gguf_init_params p = {1, &meta};
  void* model = gguf_init_from_file(model_path, p);
  if (!model) {
    fprintf(stderr, "quantize_compare: cannot read %s\n", model_path);
    return 1;
  }
  const int64_t n = gguf_get_n_tensors(model);
  struct ggml_init_params ip = {(size_t)64 << 20, NULL, 0};
  void* ctx = ggml_init(ip);
  void* out = gguf_init_empty();
  const char* datasets[] = {"made-up.txt"};
  gguf_set_val_str(out, "general.type", "imatrix");
  gguf_set_arr_str(out, "imatrix.datasets", datasets, 1);
  gguf_set_val_u32(out, "imatrix.chunk_count", 12);
  gguf_set_val_u32(out, "imatrix.chunk_size", 512);
  uint32_t state = 7;
  for (int64_t i = 0; i < n; ++i) {
    const char* name = gguf_get_tensor_name(model, i);
    const struct tensor_head* t = ggml_get_tensor(meta, name);
    const size_t len = strlen(name);
    if (ggml_n_dims(t) < 2 || len < 6 || strcmp(name + len - 6, "weight") != 0 ||
        strcmp(name, "token_embd.weight") == 0) {
      continue;
    }
    // Experts (3-D weights): a row of sums and a count per expert, as
    // llama-imatrix writes them.
    const int64_t n_expert = t->ne[2] > 1 ? t->ne[2] : 1;
    char buf[256];
    snprintf(buf, sizeof buf, "%s.in_sum2", name);
    void* sums = ggml_set_name(ggml_new_tensor_2d(ctx, 0, t->ne[0], n_expert), buf);
    snprintf(buf, sizeof buf, "%s.counts", name);
    void* counts = ggml_set_name(ggml_new_tensor_2d(ctx, 0, 1, n_expert), buf);
    float* s = ggml_get_data(sums);
    for (int64_t k = 0; k < t->ne[0] * n_expert; ++k) {
      state = state * 1664525u + 1013904223u;
      s[k] = (float)(state >> 8) * (1.0f / 65536.0f);
    }
    float* c = ggml_get_data(counts);
    for (int64_t e = 0; e < n_expert; ++e) c[e] = (float)(6 + e % 3);
    gguf_add_tensor(out, sums);
    gguf_add_tensor(out, counts);
  }
  if (!gguf_write_to_file(out, out_path, 0)) {
    fprintf(stderr, "quantize_compare: cannot write %s\n", out_path);
    return 1;
  }
  gguf_free(out);
  gguf_free(model);
  ggml_free(ctx);
  ggml_free(meta);
  return 0;
}

// Reads IMATRIX.gguf into the list llama_model_quantize takes; the tensors
// stay in *ctx_out.
static struct imatrix_entry* read_imatrix(const char* path, void** ctx_out) {
  struct gguf_init_params p = {0, ctx_out};
  void* g = gguf_init_from_file(path, p);
  if (!g) return NULL;
  const int64_t n = gguf_get_n_tensors(g);
  struct imatrix_entry* list = calloc((size_t)n + 1, sizeof *list);
  int64_t k = 0;
  for (int64_t i = 0; i < n; ++i) {
    const char* name = gguf_get_tensor_name(g, i);
    const size_t len = strlen(name);
    if (len < 8 || strcmp(name + len - 8, ".in_sum2") != 0) continue;
    char* weight = strndup(name, len - 8);
    char counts_name[256];
    snprintf(counts_name, sizeof counts_name, "%s.counts", weight);
    const struct tensor_head* sums = ggml_get_tensor(*ctx_out, name);
    const float* c = ggml_get_data(ggml_get_tensor(*ctx_out, counts_name));
    const float* s = ggml_get_data(sums);
    const int64_t ne0 = sums->ne[0], rows = sums->ne[1];  // rows: one per expert
    float* v = malloc((size_t)(ne0 * rows) * sizeof(float));
    for (int64_t j = 0; j < ne0 * rows; ++j) {
      const float cj = c[j / ne0];
      v[j] = cj > 0.0f ? s[j] / cj : 1.0f;
    }
    list[k].name = weight;
    list[k].data = v;
    list[k].size = (size_t)(ne0 * rows);
    ++k;
  }
  gguf_free(g);
  return list;
}

struct gguf_file {
  void* ctx;
  FILE* f;
};

static int open_gguf(const char* path, struct gguf_file* g) {
  struct gguf_init_params p = {1, NULL};
  g->ctx = gguf_init_from_file(path, p);
  g->f = fopen(path, "rb");
  if (!g->ctx || !g->f) {
    fprintf(stderr, "quantize_compare: cannot read %s as GGUF\n", path);
    return 0;
  }
  return 1;
}

static unsigned char* read_tensor(const struct gguf_file* g, int64_t id, size_t* size) {
  *size = gguf_get_tensor_size(g->ctx, id);
  unsigned char* p = malloc(*size ? *size : 1);
  if (fseek(g->f, (long)(gguf_get_data_offset(g->ctx) + gguf_get_tensor_offset(g->ctx, id)), SEEK_SET) != 0 ||
      fread(p, 1, *size, g->f) != *size) {
    fprintf(stderr, "quantize_compare: short read of %s\n", gguf_get_tensor_name(g->ctx, id));
    exit(1);
  }
  return p;
}

static float* to_f32(int type, const unsigned char* p, size_t size, int64_t* n) {
  const struct ggml_type_traits* t = ggml_get_type_traits(type);
  *n = (int64_t)(size / t->type_size) * t->blck_size;
  float* y = malloc((size_t)*n * sizeof(float) + 1);
  if (type == 0) {
    memcpy(y, p, (size_t)*n * sizeof(float));
  } else {
    t->to_float(p, y, *n);
  }
  return y;
}

static int diff(const char* a_path, const char* b_path) {
  struct gguf_file a, b;
  if (!open_gguf(a_path, &a) || !open_gguf(b_path, &b)) return 1;
  const int64_t fa = gguf_find_key(a.ctx, "general.file_type"), fb = gguf_find_key(b.ctx, "general.file_type");
  if (fa < 0 || fb < 0 || gguf_get_val_u32(a.ctx, fa) != gguf_get_val_u32(b.ctx, fb)) {
    printf("general.file_type differs\n");
  }
  const int64_t n = gguf_get_n_tensors(a.ctx);
  int same = 0;
  for (int64_t i = 0; i < n; ++i) {
    const char* name = gguf_get_tensor_name(a.ctx, i);
    const int64_t j = gguf_find_tensor(b.ctx, name);
    if (j < 0) {
      printf("%s: missing from %s\n", name, b_path);
      continue;
    }
    const int ta = gguf_get_tensor_type(a.ctx, i), tb = gguf_get_tensor_type(b.ctx, j);
    size_t sa, sb;
    unsigned char* pa = read_tensor(&a, i, &sa);
    unsigned char* pb = read_tensor(&b, j, &sb);
    if (ta == tb && sa == sb && memcmp(pa, pb, sa) == 0) {
      ++same;
    } else {
      int64_t na, nb;
      float* ya = to_f32(ta, pa, sa, &na);
      float* yb = to_f32(tb, pb, sb, &nb);
      double max_diff = 0;
      for (int64_t k = 0; k < na && k < nb; ++k) {
        const double d = fabs((double)ya[k] - (double)yb[k]);
        if (d > max_diff) max_diff = d;
      }
      printf("  %-32s %-7s vs %-7s max |diff| %.3g\n", name, ggml_type_name(ta), ggml_type_name(tb), max_diff);
      free(ya);
      free(yb);
    }
    free(pa);
    free(pb);
  }
  printf("identical %d of %lld\n", same, (long long)n);
  gguf_free(a.ctx);
  gguf_free(b.ctx);
  fclose(a.f);
  fclose(b.f);
  return 0;
}

int main(int argc, char** argv) {
  if (argc == 2 && strcmp(argv[1], "hashes") == 0) return hashes();
  if (argc == 4 && strcmp(argv[1], "diff") == 0) return diff(argv[2], argv[3]);
  if (argc == 4 && strcmp(argv[1], "imatrix") == 0) return write_imatrix(argv[2], argv[3]);
  if ((argc != 5 && argc != 6) || strcmp(argv[1], "quantize") != 0) {
    fprintf(stderr, "usage: %s quantize IN OUT FTYPE [IMATRIX] | imatrix MODEL OUT | diff A B | hashes\n",
            argv[0]);
    return 2;
  }
  llama_backend_init();
  struct opaque_params params = llama_model_quantize_default_params();
  const int32_t nthread = 2, ftype = atoi(argv[4]);
  memcpy(params.bytes + 0, &nthread, 4);  // nthread, then ftype: stable leading fields
  memcpy(params.bytes + 4, &ftype, 4);
  if (argc == 6) {  // params.imatrix: after 4 ints and 8 bools (checked by disassembling the defaults)
    void* ctx = NULL;
    const struct imatrix_entry* list = read_imatrix(argv[5], &ctx);
    if (!list) {
      fprintf(stderr, "quantize_compare: cannot read %s\n", argv[5]);
      return 1;
    }
    memcpy(params.bytes + 0x18, &list, sizeof list);
  }
  const uint32_t rc = llama_model_quantize(argv[2], argv[3], &params);
  if (rc != 0) fprintf(stderr, "llama_model_quantize failed: %u\n", rc);
  return rc == 0 ? 0 : 1;
}
