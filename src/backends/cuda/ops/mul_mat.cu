// Matrix-vector products on split Q4_0 / Q8_0 weights (docs/cuda.md, "Decode matrix-vector kernels"), for
// decode. The activations are quantized once per node to blocks of 32 int8
// with a scale and the block's sum (llama.cpp's q8_1), so a weight block
// meets 32 bytes of activations instead of 128 and the products run on dp4a.
// One warp per weight row; each lane takes whole blocks (16- or 32-byte
// quant loads through the read-only path, an f16 scale), for up to
// kMaxMmvColumns activation columns at once so the weights are read once.
// Larger batches go to cuBLAS (ops.cpp).
#include <algorithm>

#include "cuda/ops/device.cuh"
#include "cuda/ops/kquants.cuh"

namespace tessera::cuda::k {
namespace {

constexpr int kQK = 32;
constexpr int kWarpsPerBlock = 4;

// Column c's block b of the quantized activations: 32 int8 at
// q + (c * blocks + b) * 32, and (scale, scale * sum of the int8) at ds[c * blocks + b].
__global__ void quantize_kernel(const float* __restrict__ x, int64_t x_stride, int64_t blocks,
                                int64_t c0, int8_t* __restrict__ q, float2* __restrict__ ds) {
  const int lane = threadIdx.x % kWarp;
  const int64_t b = blockIdx.x * int64_t{kWarpsPerBlock} + threadIdx.x / kWarp;
  const int64_t c = c0 + blockIdx.y;
  if (b >= blocks) return;
  const float v = x[c * x_stride + b * kQK + lane];
  const float amax = warp_max(fabsf(v));
  const float d = amax / 127.0f;
  const int qv = amax == 0.0f ? 0 : __float2int_rn(v / d);
  q[(c * blocks + b) * kQK + lane] = static_cast<int8_t>(qv);
  const float sum = warp_sum(static_cast<float>(qv));  // |sum| <= 32 * 127: exact in f32
  if (lane == 0) ds[c * blocks + b] = make_float2(d, d * sum);
}

// One weight block against one activation block: the int dot product, scaled.
template <uint32_t kType>
__device__ __forceinline__ float block_dot(const uint4* wq, float dw, const int4* xq, float2 ds) {
  const int4 x0 = xq[0], x1 = xq[1];
  const int xs[8] = {x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w};
  int sum = 0;
  if constexpr (kType == kQ4_0) {
    // Byte j of the weights: element j in its low nibble, j + 16 in its high.
    const uint4 w = wq[0];
    const uint32_t words[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      sum = __dp4a(static_cast<int>(words[i] & 0x0f0f0f0fu), xs[i], sum);
      sum = __dp4a(static_cast<int>((words[i] >> 4) & 0x0f0f0f0fu), xs[4 + i], sum);
    }
    // Nibbles hold q + 8: sum (q + 8) x - 8 sum x.
    return dw * (ds.x * static_cast<float>(sum) - 8.0f * ds.y);
  } else {
    const uint4 w0 = wq[0], w1 = wq[1];
    const uint32_t words[8] = {w0.x, w0.y, w0.z, w0.w, w1.x, w1.y, w1.z, w1.w};
#pragma unroll
    for (int i = 0; i < 8; ++i) sum = __dp4a(static_cast<int>(words[i]), xs[i], sum);
    return dw * ds.x * static_cast<float>(sum);
  }
}

// One row of split weights (quants and f16 scales of `blocks` blocks) against
// kCols quantized columns (column c's block b at c * blocks + b), this lane's
// share into acc. kUnroll blocks a lane at a time, all loads issued before the
// products: more bytes in flight per warp (a 4096-wide row is 4 blocks a lane).
template <uint32_t kType, int kCols>
__device__ __forceinline__ void split_row_dot(const uint8_t* __restrict__ quants,
                                              const __half* __restrict__ scales, int64_t blocks,
                                              const int8_t* __restrict__ xq,
                                              const float2* __restrict__ xds, int lane,
                                              float (&acc)[kCols]) {
  constexpr int kQuantBytes = kType == kQ4_0 ? 16 : 32;
  constexpr int kUnroll = 4;
  int64_t b = lane;
  for (; b + (kUnroll - 1) * kWarp < blocks; b += kUnroll * kWarp) {
    uint4 wq[kUnroll][kQuantBytes / 16];
    float dw[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t bu = b + u * kWarp;
#pragma unroll
      for (int i = 0; i < kQuantBytes / 16; ++i) {
        wq[u][i] = __ldg(reinterpret_cast<const uint4*>(quants + bu * kQuantBytes) + i);
      }
      dw[u] = __half2float(scales[bu]);
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
#pragma unroll
      for (int c = 0; c < kCols; ++c) {
        const int64_t at_b = c * blocks + b + u * kWarp;
        acc[c] += block_dot<kType>(wq[u], dw[u], reinterpret_cast<const int4*>(xq + at_b * kQK), xds[at_b]);
      }
    }
  }
  for (; b < blocks; b += kWarp) {
    uint4 wq[kQuantBytes / 16];
#pragma unroll
    for (int i = 0; i < kQuantBytes / 16; ++i) {
      wq[i] = __ldg(reinterpret_cast<const uint4*>(quants + b * kQuantBytes) + i);
    }
    const float dw = __half2float(scales[b]);
#pragma unroll
    for (int c = 0; c < kCols; ++c) {
      const int64_t at_b = c * blocks + b;
      acc[c] += block_dot<kType>(wq, dw, reinterpret_cast<const int4*>(xq + at_b * kQK), xds[at_b]);
    }
  }
}

template <uint32_t kType, int kCols>
__global__ void __launch_bounds__(kWarpsPerBlock * kWarp)
    mmv_kernel(SplitQ w, const int8_t* __restrict__ xq, const float2* __restrict__ xds,
               float* __restrict__ y, int64_t y_stride) {
  const int lane = threadIdx.x % kWarp;
  const int64_t row = blockIdx.x * int64_t{kWarpsPerBlock} + threadIdx.x / kWarp;
  if (row >= w.rows) return;
  constexpr int kQuantBytes = kType == kQ4_0 ? 16 : 32;
  const int64_t blocks = w.k / kQK;
  float acc[kCols];
#pragma unroll
  for (int c = 0; c < kCols; ++c) acc[c] = 0.0f;
  split_row_dot<kType, kCols>(static_cast<const uint8_t*>(w.quants) + row * blocks * kQuantBytes,
                              static_cast<const __half*>(w.scales) + row * blocks, blocks, xq, xds,
                              lane, acc);
#pragma unroll
  for (int c = 0; c < kCols; ++c) {
    const float sum = warp_sum(acc[c]);
    if (lane == 0) y[c * y_stride + row] = sum;
  }
}

// Decode on K-quant / IQ4 weights in GGUF blocks (kquants.cuh): one warp per
// row, each lane taking 32-element sub-blocks (of a super-block of 8, or an
// IQ4_NL block of one), unpacked once and met with every column's int8 block.
// One row of K-quant / IQ4 / MXFP4 blocks (`subs` 32-element sub-blocks)
// against kCols quantized columns, this lane's share into acc.
template <int kCols>
__device__ __forceinline__ void kquant_row_dot(const uint8_t* __restrict__ base, uint32_t type,
                                               int64_t subs, const int8_t* __restrict__ xq,
                                               const float2* __restrict__ xds, int lane,
                                               float (&acc)[kCols]) {
  const int bb = kq::block_bytes(type);
  const int per_block = kq::block_elems(type) / kQK;  // sub-blocks
  for (int64_t s = lane; s < subs; s += kWarp) {
    const kq::SubBlock sub = kq::load_sub(base + (s / per_block) * bb, type, static_cast<int>(s % per_block));
#pragma unroll
    for (int c = 0; c < kCols; ++c) {
      const int64_t at_b = c * subs + s;
      acc[c] += kq::dot(sub, xq + at_b * kQK, xds[at_b].x);
    }
  }
}

template <int kCols>
__global__ void __launch_bounds__(kWarpsPerBlock * kWarp)
    mmv_kquant_kernel(Arr w, const int8_t* __restrict__ xq, const float2* __restrict__ xds,
                      float* __restrict__ y, int64_t y_stride) {
  const int lane = threadIdx.x % kWarp;
  const int64_t row = blockIdx.x * int64_t{kWarpsPerBlock} + threadIdx.x / kWarp;
  if (row >= w.ne[1]) return;
  float acc[kCols];
#pragma unroll
  for (int c = 0; c < kCols; ++c) acc[c] = 0.0f;
  kquant_row_dot<kCols>(static_cast<const uint8_t*>(w.data) + row * w.nb[1], w.type, w.ne[0] / kQK,
                        xq, xds, lane, acc);
#pragma unroll
  for (int c = 0; c < kCols; ++c) {
    const float sum = warp_sum(acc[c]);
    if (lane == 0) y[c * y_stride + row] = sum;
  }
}

// ---- MUL_MAT_ID ---------------------------------------------------------------------------
// One (slot, token) pair per blockIdx.y (pair p = t * n_used + s, from
// ExpertPairs::first), four rows of its expert per block: the expert id read
// on the device, so decode reads each active expert once and waits on nothing.

__device__ __forceinline__ int64_t expert_id(const ExpertPairs& e, int64_t p, int64_t& s, int64_t& t,
                                             int* bad) {
  s = p % e.n_used;
  t = p / e.n_used;
  const char* at_id = static_cast<const char*>(e.ids.data) + s * e.ids.nb[0] + t * e.ids.nb[1];
  const int64_t id = e.ids.type == kI64 ? *reinterpret_cast<const int64_t*>(at_id)
                                        : *reinterpret_cast<const int32_t*>(at_id);
  if (id >= 0 && id < e.n_expert) return id;
  *bad = 1;  // the stream reports it; the pair's output reads as zeros
  return -1;
}

template <uint32_t kType>
__global__ void __launch_bounds__(kWarpsPerBlock * kWarp)
    mmv_id_split_kernel(SplitQ w, ExpertPairs e, const int8_t* __restrict__ xq,
                        const float2* __restrict__ xds, float* __restrict__ y, int* bad) {
  const int lane = threadIdx.x % kWarp;
  const int64_t row = blockIdx.x * int64_t{kWarpsPerBlock} + threadIdx.x / kWarp;
  if (row >= e.m) return;
  const int64_t p = e.first + blockIdx.y;
  int64_t s, t;
  const int64_t id = expert_id(e, p, s, t, bad);
  float acc[1] = {0.0f};
  if (id >= 0) {
    constexpr int kQuantBytes = kType == kQ4_0 ? 16 : 32;
    const int64_t blocks = w.k / kQK;
    const int64_t flat_row = id * e.m + row;
    const int64_t col = t * e.n_x + s % e.n_x;
    split_row_dot<kType, 1>(static_cast<const uint8_t*>(w.quants) + flat_row * blocks * kQuantBytes,
                            static_cast<const __half*>(w.scales) + flat_row * blocks, blocks,
                            xq + col * blocks * kQK, xds + col * blocks, lane, acc);
  }
  const float sum = warp_sum(acc[0]);
  if (lane == 0) y[p * e.m + row] = sum;
}

__global__ void __launch_bounds__(kWarpsPerBlock * kWarp)
    mmv_id_kquant_kernel(Arr w, ExpertPairs e, const int8_t* __restrict__ xq,
                         const float2* __restrict__ xds, float* __restrict__ y, int* bad) {
  const int lane = threadIdx.x % kWarp;
  const int64_t row = blockIdx.x * int64_t{kWarpsPerBlock} + threadIdx.x / kWarp;
  if (row >= e.m) return;
  const int64_t p = e.first + blockIdx.y;
  int64_t s, t;
  const int64_t id = expert_id(e, p, s, t, bad);
  float acc[1] = {0.0f};
  if (id >= 0) {
    const int64_t subs = w.ne[0] / kQK;
    const int64_t col = t * e.n_x + s % e.n_x;
    kquant_row_dot<1>(static_cast<const uint8_t*>(w.data) + row * w.nb[1] + id * w.nb[2], w.type, subs,
                      xq + col * subs * kQK, xds + col * subs, lane, acc);
  }
  const float sum = warp_sum(acc[0]);
  if (lane == 0) y[p * e.m + row] = sum;
}

// Float weights (f32 / f16 / bf16 at w's strides) against f32 columns of x
// (column c at x + c * w.ne[0]), summed in f32.
__global__ void __launch_bounds__(kWarpsPerBlock * kWarp)
    mmv_id_float_kernel(Arr w, ExpertPairs e, const float* __restrict__ x, float* __restrict__ y,
                        int* bad) {
  const int lane = threadIdx.x % kWarp;
  const int64_t row = blockIdx.x * int64_t{kWarpsPerBlock} + threadIdx.x / kWarp;
  if (row >= e.m) return;
  const int64_t p = e.first + blockIdx.y;
  int64_t s, t;
  const int64_t id = expert_id(e, p, s, t, bad);
  float acc = 0.0f;
  if (id >= 0) {
    const float* xc = x + (t * e.n_x + s % e.n_x) * w.ne[0];
    for (int64_t i = lane; i < w.ne[0]; i += kWarp) acc += load(at(w, i, row, id, 0), w.type) * __ldg(xc + i);
  }
  const float sum = warp_sum(acc);
  if (lane == 0) y[p * e.m + row] = sum;
}

template <int kCols>
void launch_kquant(cudaStream_t s, const Arr& w, const int8_t* xq, const float2* xds, float* y,
                   int64_t ys) {
  const auto blocks = static_cast<unsigned>((w.ne[1] + kWarpsPerBlock - 1) / kWarpsPerBlock);
  mmv_kquant_kernel<kCols><<<blocks, kWarpsPerBlock * kWarp, 0, s>>>(w, xq, xds, y, ys);
}

template <uint32_t kType, int kCols>
void launch(cudaStream_t s, const SplitQ& w, const int8_t* xq, const float2* xds, float* y, int64_t ys) {
  const auto blocks = static_cast<unsigned>((w.rows + kWarpsPerBlock - 1) / kWarpsPerBlock);
  mmv_kernel<kType, kCols><<<blocks, kWarpsPerBlock * kWarp, 0, s>>>(w, xq, xds, y, ys);
}

// f.template operator()<C>() for C = n (1..kMaxMmvColumns): the column
// count as a template argument, so each kernel keeps its accumulators in registers.
template <class F>
void by_columns(int n, F&& f) {
  switch (n) {
    case 1: f.template operator()<1>(); break;
    case 2: f.template operator()<2>(); break;
    case 3: f.template operator()<3>(); break;
    case 4: f.template operator()<4>(); break;
    case 5: f.template operator()<5>(); break;
    case 6: f.template operator()<6>(); break;
    case 7: f.template operator()<7>(); break;
    default: f.template operator()<8>(); break;
  }
}

// Quantizes n_cols columns of x into scratch: (int8 quants, (scale, scaled sum) pairs).
// (Grids take at most 65535 in y: columns and expert pairs go in chunks.)
constexpr int64_t kMaxGridY = 65535;

void quantize_columns(cudaStream_t s, const float* x, int64_t x_stride, int64_t k, int64_t n_cols,
                      void* scratch, int8_t*& xq, float2*& xds) {
  const int64_t blocks = k / kQK;
  xq = static_cast<int8_t*>(scratch);
  const auto quants = static_cast<size_t>(n_cols * blocks * kQK);
  xds = reinterpret_cast<float2*>(static_cast<uint8_t*>(scratch) + (quants + 15) / 16 * 16);
  for (int64_t c0 = 0; c0 < n_cols; c0 += kMaxGridY) {
    const dim3 qgrid(static_cast<unsigned>((blocks + kWarpsPerBlock - 1) / kWarpsPerBlock),
                     static_cast<unsigned>(std::min(kMaxGridY, n_cols - c0)));
    quantize_kernel<<<qgrid, kWarpsPerBlock * kWarp, 0, s>>>(x, x_stride, blocks, c0, xq, xds);
  }
}

// kernel<<<(rows / 4, pairs), ...>>> over every (slot, token) pair, in chunks.
template <class Launch>
void by_pairs(ExpertPairs e, Launch&& launch) {
  const int64_t pairs = e.n_used * e.n_tokens;
  const auto row_blocks = static_cast<unsigned>((e.m + kWarpsPerBlock - 1) / kWarpsPerBlock);
  for (e.first = 0; e.first < pairs; e.first += kMaxGridY) {
    launch(dim3(row_blocks, static_cast<unsigned>(std::min(kMaxGridY, pairs - e.first))), e);
  }
}

}  // namespace

size_t mul_mat_vec_scratch(int64_t k, int64_t n_cols) {
  const int64_t blocks = k / kQK;
  // int8 quants, then (scale, scaled sum) pairs 16-byte aligned after them.
  const auto quants = static_cast<size_t>(n_cols * blocks * kQK);
  return (quants + 15) / 16 * 16 + static_cast<size_t>(n_cols * blocks) * sizeof(float2);
}

void mul_mat_vec_split(cudaStream_t s, const SplitQ& w, const float* x, int64_t x_stride,
                       float* y, int64_t y_stride, int n_cols, void* scratch) {
  if (w.rows == 0 || n_cols <= 0) return;
  int8_t* xq = nullptr;
  float2* xds = nullptr;
  quantize_columns(s, x, x_stride, w.k, n_cols, scratch, xq, xds);
  if (w.type == kQ4_0) {
    by_columns(n_cols, [&]<int C>() { launch<kQ4_0, C>(s, w, xq, xds, y, y_stride); });
  } else {
    by_columns(n_cols, [&]<int C>() { launch<kQ8_0, C>(s, w, xq, xds, y, y_stride); });
  }
}

void mul_mat_vec_kquant(cudaStream_t s, const Arr& w, const float* x, int64_t x_stride, float* y,
                        int64_t y_stride, int n_cols, void* scratch) {
  if (w.ne[1] == 0 || n_cols <= 0) return;
  int8_t* xq = nullptr;
  float2* xds = nullptr;
  quantize_columns(s, x, x_stride, w.ne[0], n_cols, scratch, xq, xds);
  by_columns(n_cols, [&]<int C>() { launch_kquant<C>(s, w, xq, xds, y, y_stride); });
}

void mul_mat_id_split(cudaStream_t s, const SplitQ& w, const ExpertPairs& e, const float* x, float* y,
                      void* scratch, int* bad) {
  if (e.m == 0 || e.n_used * e.n_tokens == 0) return;
  int8_t* xq = nullptr;
  float2* xds = nullptr;
  quantize_columns(s, x, w.k, w.k, e.n_x * e.n_tokens, scratch, xq, xds);
  by_pairs(e, [&](dim3 grid, const ExpertPairs& chunk) {
    if (w.type == kQ4_0) {
      mmv_id_split_kernel<kQ4_0><<<grid, kWarpsPerBlock * kWarp, 0, s>>>(w, chunk, xq, xds, y, bad);
    } else {
      mmv_id_split_kernel<kQ8_0><<<grid, kWarpsPerBlock * kWarp, 0, s>>>(w, chunk, xq, xds, y, bad);
    }
  });
}

void mul_mat_id_kquant(cudaStream_t s, const Arr& w, const ExpertPairs& e, const float* x, float* y,
                       void* scratch, int* bad) {
  if (e.m == 0 || e.n_used * e.n_tokens == 0) return;
  int8_t* xq = nullptr;
  float2* xds = nullptr;
  quantize_columns(s, x, w.ne[0], w.ne[0], e.n_x * e.n_tokens, scratch, xq, xds);
  by_pairs(e, [&](dim3 grid, const ExpertPairs& chunk) {
    mmv_id_kquant_kernel<<<grid, kWarpsPerBlock * kWarp, 0, s>>>(w, chunk, xq, xds, y, bad);
  });
}

void mul_mat_id_float(cudaStream_t s, const Arr& w, const ExpertPairs& e, const float* x, float* y,
                      int* bad) {
  if (e.m == 0 || e.n_used * e.n_tokens == 0) return;
  by_pairs(e, [&](dim3 grid, const ExpertPairs& chunk) {
    mmv_id_float_kernel<<<grid, kWarpsPerBlock * kWarp, 0, s>>>(w, chunk, x, y, bad);
  });
}

}  // namespace tessera::cuda::k
