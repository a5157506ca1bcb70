// Matrix-vector products on split Q4_0 / Q8_0 weights (kernels.md §3.2), for
// decode: one warp per weight row, each lane taking whole blocks (16- or
// 32-byte quant loads through the read-only path, an f16 scale), for up to
// kMaxMmvColumns activation columns at once so the weights are read once.
// Larger batches go to cuBLAS (ops.cpp).
#include "backends/cuda/ops/device.cuh"

namespace tessera::cuda::k {
namespace {

constexpr int kQK = 32;
constexpr int kWarpsPerBlock = 4;

// Sum over one block's 32 elements of w * x, before the scale.
template <uint32_t kType>
__device__ __forceinline__ float block_dot(const uint8_t* q, const float* x) {
  float sum = 0.0f;
  if constexpr (kType == kQ4_0) {
    const uint4 packed = __ldg(reinterpret_cast<const uint4*>(q));
    const uint32_t words[4] = {packed.x, packed.y, packed.z, packed.w};
#pragma unroll
    for (int w = 0; w < 4; ++w) {
      const float4 lo = *reinterpret_cast<const float4*>(x + 4 * w);
      const float4 hi = *reinterpret_cast<const float4*>(x + 16 + 4 * w);
      const uint32_t v = words[w];
      sum += static_cast<float>(static_cast<int>(v & 0xf) - 8) * lo.x;
      sum += static_cast<float>(static_cast<int>((v >> 8) & 0xf) - 8) * lo.y;
      sum += static_cast<float>(static_cast<int>((v >> 16) & 0xf) - 8) * lo.z;
      sum += static_cast<float>(static_cast<int>((v >> 24) & 0xf) - 8) * lo.w;
      sum += static_cast<float>(static_cast<int>((v >> 4) & 0xf) - 8) * hi.x;
      sum += static_cast<float>(static_cast<int>((v >> 12) & 0xf) - 8) * hi.y;
      sum += static_cast<float>(static_cast<int>((v >> 20) & 0xf) - 8) * hi.z;
      sum += static_cast<float>(static_cast<int>((v >> 28) & 0xf) - 8) * hi.w;
    }
  } else {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const uint4 packed = __ldg(reinterpret_cast<const uint4*>(q) + h);
      const uint32_t words[4] = {packed.x, packed.y, packed.z, packed.w};
#pragma unroll
      for (int w = 0; w < 4; ++w) {
        const float4 xv = *reinterpret_cast<const float4*>(x + 16 * h + 4 * w);
        const uint32_t v = words[w];
        sum += static_cast<float>(static_cast<int8_t>(v & 0xff)) * xv.x;
        sum += static_cast<float>(static_cast<int8_t>((v >> 8) & 0xff)) * xv.y;
        sum += static_cast<float>(static_cast<int8_t>((v >> 16) & 0xff)) * xv.z;
        sum += static_cast<float>(static_cast<int8_t>(v >> 24)) * xv.w;
      }
    }
  }
  return sum;
}

// x columns must be 16-byte aligned (x_stride a multiple of 4): the host checks.
template <uint32_t kType, int kCols>
__global__ void __launch_bounds__(kWarpsPerBlock * kWarp)
    mmv_kernel(SplitQ w, const float* __restrict__ x, int64_t x_stride, float* __restrict__ y,
               int64_t y_stride) {
  const int lane = threadIdx.x % kWarp;
  const int64_t row = blockIdx.x * int64_t{kWarpsPerBlock} + threadIdx.x / kWarp;
  if (row >= w.rows) return;
  constexpr int kQuantBytes = kType == kQ4_0 ? 16 : 32;
  const int64_t blocks = w.k / kQK;
  const auto* quants = static_cast<const uint8_t*>(w.quants) + row * blocks * kQuantBytes;
  const auto* scales = static_cast<const __half*>(w.scales) + row * blocks;
  float acc[kCols];
#pragma unroll
  for (int c = 0; c < kCols; ++c) acc[c] = 0.0f;
  for (int64_t b = lane; b < blocks; b += kWarp) {
    const float d = __half2float(scales[b]);
    const uint8_t* q = quants + b * kQuantBytes;
#pragma unroll
    for (int c = 0; c < kCols; ++c) acc[c] += d * block_dot<kType>(q, x + c * x_stride + b * kQK);
  }
#pragma unroll
  for (int c = 0; c < kCols; ++c) {
    const float sum = warp_sum(acc[c]);
    if (lane == 0) y[c * y_stride + row] = sum;
  }
}

template <uint32_t kType, int kCols>
void launch(cudaStream_t s, const SplitQ& w, const float* x, int64_t xs, float* y, int64_t ys) {
  const auto blocks = static_cast<unsigned>((w.rows + kWarpsPerBlock - 1) / kWarpsPerBlock);
  mmv_kernel<kType, kCols><<<blocks, kWarpsPerBlock * kWarp, 0, s>>>(w, x, xs, y, ys);
}

template <uint32_t kType>
void launch_type(cudaStream_t s, const SplitQ& w, const float* x, int64_t xs, float* y, int64_t ys,
                 int n) {
  switch (n) {
    case 1: launch<kType, 1>(s, w, x, xs, y, ys); break;
    case 2: launch<kType, 2>(s, w, x, xs, y, ys); break;
    case 3: launch<kType, 3>(s, w, x, xs, y, ys); break;
    case 4: launch<kType, 4>(s, w, x, xs, y, ys); break;
    case 5: launch<kType, 5>(s, w, x, xs, y, ys); break;
    case 6: launch<kType, 6>(s, w, x, xs, y, ys); break;
    case 7: launch<kType, 7>(s, w, x, xs, y, ys); break;
    default: launch<kType, 8>(s, w, x, xs, y, ys); break;
  }
}

}  // namespace

void mul_mat_vec_split(cudaStream_t s, const SplitQ& w, const float* x, int64_t x_stride,
                       float* y, int64_t y_stride, int n_cols) {
  if (w.rows == 0 || n_cols <= 0) return;
  if (w.type == kQ4_0) {
    launch_type<kQ4_0>(s, w, x, x_stride, y, y_stride, n_cols);
  } else {
    launch_type<kQ8_0>(s, w, x, x_stride, y, y_stride, n_cols);
  }
}

}  // namespace tessera::cuda::k
