// Device-side helpers shared by the kernels: typed loads and stores through
// byte strides, index arithmetic, warp and block reductions.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "cuda/ops/launch.h"
#include "cuda/ops/quant_blocks.cuh"

namespace tessera::cuda::k {

inline constexpr int kWarp = 32;

// Element (i0, i1, i2, i3) of an array as bytes.
__device__ __forceinline__ char* at(const Arr& a, int64_t i0, int64_t i1, int64_t i2, int64_t i3) {
  return static_cast<char*>(a.data) + i0 * a.nb[0] + i1 * a.nb[1] + i2 * a.nb[2] + i3 * a.nb[3];
}

__device__ __forceinline__ float load(const char* p, uint32_t type) {
  switch (type) {
    case kF16: return __half2float(*reinterpret_cast<const __half*>(p));
    case kBF16: return __bfloat162float(*reinterpret_cast<const __nv_bfloat16*>(p));
    default: return *reinterpret_cast<const float*>(p);
  }
}

__device__ __forceinline__ void store(char* p, uint32_t type, float v) {
  switch (type) {
    case kF16: *reinterpret_cast<__half*>(p) = __float2half_rn(v); break;
    case kBF16: *reinterpret_cast<__nv_bfloat16*>(p) = __float2bfloat16_rn(v); break;
    default: *reinterpret_cast<float*>(p) = v; break;
  }
}

// Element (i0, i1, i2, i3) as a float from a float array or from Q4_0 /
// Q8_0 blocks (nb[0] the block's bytes: a quantized KV cache).
__device__ __forceinline__ float load_elem(const Arr& a, int64_t i0, int64_t i1, int64_t i2, int64_t i3) {
  if (qb::is_q4_0_or_q8_0(a.type)) {
    return qb::value(reinterpret_cast<const uint8_t*>(at(a, i0 / qb::kQK, i1, i2, i3)), a.type,
                     static_cast<int>(i0 % qb::kQK));
  }
  return load(at(a, i0, i1, i2, i3), a.type);
}

// Flat row-major index -> (i0, i1, i2, i3) over shape ne.
struct Index {
  int64_t i0, i1, i2, i3;
};
__device__ __forceinline__ Index unflatten(int64_t i, const int64_t* ne) {
  Index r;
  r.i0 = i % ne[0];
  i /= ne[0];
  r.i1 = i % ne[1];
  i /= ne[1];
  r.i2 = i % ne[2];
  r.i3 = i / ne[2];
  return r;
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = kWarp / 2; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = kWarp / 2; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Sum (or max) over the block; every thread gets the result. `shared` holds
// one float per warp. blockDim.x a multiple of 32, at most 1024.
template <bool kMax>
__device__ float block_reduce(float v, float* shared) {
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  const int n_warps = blockDim.x / kWarp;
  v = kMax ? warp_max(v) : warp_sum(v);
  __syncthreads();  // shared may still be read by a previous reduction
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  v = lane < n_warps ? shared[lane] : (kMax ? -INFINITY : 0.0f);
  return kMax ? warp_max(v) : warp_sum(v);
}

// Launch shape for n independent elements.
inline unsigned grid_for(int64_t n, int block) {
  const int64_t g = (n + block - 1) / block;
  return static_cast<unsigned>(g < 65535 * 16 ? (g > 0 ? g : 1) : 65535 * 16);
}

// ALiBi slope of head h (SOFT_MAX: dim 2 of the scores; attention: q's heads).
__device__ __forceinline__ float alibi_slope(const Alibi& a, int64_t h) {
  if (a.max_bias <= 0.0f) return 1.0f;
  return h < a.n2 ? powf(a.m0, static_cast<float>(h + 1))
                  : powf(a.m1, static_cast<float>(2 * (h - a.n2) + 1));
}

}  // namespace tessera::cuda::k
