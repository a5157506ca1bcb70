// The kernels' host-side entry points (defined in the .cu files next to
// this header), called by ops.cpp. Arguments are plain descriptors, so the
// .cu files need no tessera headers beyond this one.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

// Callable from both sides where a .cu file includes this header.
#ifdef __CUDACC__
#define TESSERA_HOST_DEVICE __host__ __device__
#else
#define TESSERA_HOST_DEVICE
#endif

namespace tessera::cuda::k {

// Element types, by their GGUF numbers (tessera::DType).
enum Type : uint32_t {
  kF32 = 0, kF16 = 1, kQ4_0 = 2, kQ8_0 = 8, kQ4_K = 12, kQ5_K = 13, kQ6_K = 14,
  kI32 = 26, kI64 = 27, kBF16 = 30
};

// A tensor as the kernels see it: element 0's address, shape, byte strides.
struct Arr {
  void* data = nullptr;
  uint32_t type = kF32;
  int64_t ne[4] = {1, 1, 1, 1};
  int64_t nb[4] = {0, 0, 0, 0};
  TESSERA_HOST_DEVICE int64_t n() const { return ne[0] * ne[1] * ne[2] * ne[3]; }
};

// Split Q4_0 / Q8_0 weights (backends/cuda/repack.h): quants then scales.
struct SplitQ {
  const void* quants = nullptr;
  const void* scales = nullptr;  // f16, one per block
  uint32_t type = kQ4_0;
  int64_t k = 0;     // elements per row (a multiple of 32)
  int64_t rows = 0;  // rows in the tensor (all matrices)
};

enum class Binary : int { kAdd, kSub, kMul, kDiv };
// ggml's unary ops, numbered as tessera::UnaryOp.
enum class Unary : int { kGelu, kGeluQuick, kSilu, kRelu, kLeakyRelu, kHardSigmoid, kHardSwish, kTanh, kSigmoid };
enum class Glu : int { kSwiglu, kGeglu };

// ---- elementwise.cu ---------------------------------------------------------------------
// d = a op b, b broadcast over a's shape (d's shape); f32.
void binary(cudaStream_t s, Binary op, const Arr& a, const Arr& b, const Arr& d);
void scale(cudaStream_t s, const Arr& a, const Arr& d, float mul, float add);
void unary(cudaStream_t s, Unary op, float param, const Arr& a, const Arr& d);
void clamp(cudaStream_t s, const Arr& a, const Arr& d, float lo, float hi);
void glu(cudaStream_t s, Glu op, const Arr& gate, const Arr& up, const Arr& d);
// gpt-oss's SwiGLU: min(gate, limit) sigmoid(alpha min(gate, limit)) (clamp(up, +-limit) + 1).
void swiglu_oai(cudaStream_t s, const Arr& gate, const Arr& up, const Arr& d, float alpha, float limit);
// d = a + b[:, ids[i1, i2]] (ADD_ID: a per-expert bias row); ids i32 [ne1, ne2] of a.
// An id outside b's rows sets *bad (host-mapped, as the row kernels').
void add_id(cudaStream_t s, const Arr& a, const Arr& b, const Arr& ids, const Arr& d, int* bad);
// Element i of a (row-major over a's shape) into element i of d, converting
// between f32, f16 and bf16 (or copying i32 as it is).
void copy(cudaStream_t s, const Arr& a, const Arr& d);
// f32 a (contiguous along dim 0) into Q4_0 / Q8_0 blocks of d, same shape:
// a quantized cache's keys written back after a K shift.
void copy_to_blocks(cudaStream_t s, const Arr& a, const Arr& d);

// ---- rows.cu ----------------------------------------------------------------------------
// Row ids outside the source (or destination) are skipped and reported by
// setting *bad (host-mapped memory the stream checks after synchronizing).
// d[:, i1, i2, i3] = a[:, ids[i1, i2, i3], i2, i3] as f32 (a f32/f16/bf16).
void get_rows(cudaStream_t s, const Arr& a, const Arr& ids, const Arr& d, int* bad);
void get_rows_split(cudaStream_t s, const SplitQ& a, const Arr& ids, const Arr& d, int* bad);
// Rows of values (f32) into the rows of dst that ids (i32/i64, broadcast) name.
void set_rows(cudaStream_t s, const Arr& values, const Arr& ids, const Arr& dst, int* bad);
// The split weights as f16, row-major [rows, k], into `out`.
void dequantize_split(cudaStream_t s, const SplitQ& a, void* out);
// Q4_0 / Q8_0 in GGUF blocks (rows of whole blocks at a's strides, any
// batch dims): GET_ROWS, and every row as f16, row-major, into `out`.
void get_rows_blocks(cudaStream_t s, const Arr& a, const Arr& ids, const Arr& d, int* bad);
void dequantize_blocks(cudaStream_t s, const Arr& a, void* out);

// ---- norm.cu ----------------------------------------------------------------------------
void rms_norm(cudaStream_t s, const Arr& a, const Arr& d, float eps);
void norm(cudaStream_t s, const Arr& a, const Arr& d, float eps);
// softmax(a * scale + slope(i2) * mask) per row; mask nullable (data null).
struct Alibi {
  float max_bias = 0.0f, m0 = 1.0f, m1 = 1.0f;
  int n2 = 1;  // the largest power of two <= the head count
};
void soft_max(cudaStream_t s, const Arr& a, const Arr& mask, const Arr& d, float scale,
              const Alibi& alibi);
// SUM_ROWS: d [1, ne1, ne2, ne3] the sums of a's rows.
void sum_rows(cudaStream_t s, const Arr& a, const Arr& d);
// ARGSORT into i32 d (a's shape), stable; rows of at most kMaxArgsortRow.
inline constexpr int kMaxArgsortRow = 1024;
void argsort(cudaStream_t s, const Arr& a, const Arr& d, bool descending);

// ---- rope.cu ----------------------------------------------------------------------------
struct Rope {
  int n_dims = 0;
  bool neox = false;
  float freq_base = 10000.0f, freq_scale = 1.0f, ext_factor = 0.0f, attn_factor = 1.0f;
  float theta_scale = 1.0f;  // freq_base^(-2 / n_dims), computed on the host as the CPU does
  float yarn_low = 0.0f, yarn_high = 0.0f;  // YaRN's ramp, from the host
};
// pos i32 [ne2 of a]; freq factors f32 (data null when absent).
void rope(cudaStream_t s, const Arr& a, const Arr& pos, const Arr& factors, const Arr& d,
          const Rope& p);

// ---- mul_mat.cu -------------------------------------------------------------------------
// y[c * y_stride + r] = sum_k w[r, k] x[c * x_stride + k] for rows r < w.rows
// and columns c < n_cols (1..8); x, y f32. The activations are quantized to
// int8 blocks in `scratch` (mul_mat_vec_scratch bytes, 16-byte aligned).
inline constexpr int kMaxMmvColumns = 8;
size_t mul_mat_vec_scratch(int64_t k, int64_t n_cols);
void mul_mat_vec_split(cudaStream_t s, const SplitQ& w, const float* x, int64_t x_stride,
                       float* y, int64_t y_stride, int n_cols, void* scratch);
// The same on one matrix of Q2_K..Q6_K / IQ4_NL / IQ4_XS weights in GGUF
// blocks (rows at w.nb[1], whole blocks), read in place.
void mul_mat_vec_kquant(cudaStream_t s, const Arr& w, const float* x, int64_t x_stride, float* y,
                        int64_t y_stride, int n_cols, void* scratch);

// MUL_MAT_ID: y[:, s, t] = w[:, :, ids[s, t]] x[:, s % n_x, t] for every
// slot s < n_used and token t, x contiguous f32 [k, n_x, n_tokens], y
// contiguous f32 [m, n_used, n_tokens]. One pair per grid row, the id read
// on the device; an id outside [0, n_expert) sets *bad (host-mapped, as the
// row kernels') and leaves zeros. The quantized forms take
// mul_mat_vec_scratch(k, n_x * n_tokens) bytes of scratch.
struct ExpertPairs {
  Arr ids;  // i32 (or i64) [n_used, n_tokens]
  int64_t n_used = 0, n_tokens = 0;
  int64_t n_expert = 0;  // matrices in w
  int64_t m = 0;         // rows of each
  int64_t n_x = 1;       // activation columns per token: 1 (shared by the slots) or n_used
  int64_t first = 0;     // the launch's first pair (the launcher sets it)
};
void mul_mat_id_split(cudaStream_t s, const SplitQ& w, const ExpertPairs& e, const float* x, float* y,
                      void* scratch, int* bad);
// K-quant / IQ4 / MXFP4 (and Q4_1 / Q5_0 / Q5_1) experts in GGUF blocks, read in place.
void mul_mat_id_kquant(cudaStream_t s, const Arr& w, const ExpertPairs& e, const float* x, float* y,
                       void* scratch, int* bad);
// f32 / f16 / bf16 experts at w's strides, summed in f32.
void mul_mat_id_float(cudaStream_t s, const Arr& w, const ExpertPairs& e, const float* x, float* y,
                      int* bad);

// ---- flash_attn.cu ----------------------------------------------------------------------
struct Attention {
  float scale = 1.0f, softcap = 0.0f;
  Alibi alibi;
  const float* sinks = nullptr;  // f32 [n_head]: each head's logit in its rows' denominators
};
inline constexpr int kMaxHeadDim = 256;
// Result of the blocks that each took a share of the keys, combined; `partial`
// scratch of attention_scratch_floats(...) floats when splits > 1.
int attention_splits(const Arr& q, const Arr& k, const Arr& v, int sm_count);
int64_t attention_scratch_floats(const Arr& q, const Arr& v, int splits);
void flash_attn(cudaStream_t s, const Arr& q, const Arr& k, const Arr& v, const Arr& mask,
                const Arr& d, const Attention& p, int splits, float* partial);

}  // namespace tessera::cuda::k
