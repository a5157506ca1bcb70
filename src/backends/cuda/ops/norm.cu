// Per-row reductions: RMS_NORM, NORM, SOFT_MAX, SUM_ROWS and ARGSORT, one
// block per row, any float types and strides.
#include "cuda/ops/device.cuh"

namespace tessera::cuda::k {
namespace {

constexpr int kBlock = 256;

__device__ __forceinline__ Index row_of(int64_t row, const int64_t* ne) {
  Index r;
  r.i0 = 0;
  r.i1 = row % ne[1];
  row /= ne[1];
  r.i2 = row % ne[2];
  r.i3 = row / ne[2];
  return r;
}

template <bool kRms>
__global__ void norm_kernel(Arr a, Arr d, float eps) {
  __shared__ float shared[kBlock / kWarp];
  const Index r = row_of(blockIdx.x, d.ne);
  const int64_t n = d.ne[0];
  float mean = 0.0f;
  if (!kRms) {
    float sum = 0.0f;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) sum += load(at(a, i, r.i1, r.i2, r.i3), a.type);
    mean = block_reduce<false>(sum, shared) / static_cast<float>(n);
  }
  float sq = 0.0f;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    const float x = load(at(a, i, r.i1, r.i2, r.i3), a.type) - mean;
    sq += x * x;
  }
  const float inv = rsqrtf(block_reduce<false>(sq, shared) / static_cast<float>(n) + eps);
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    store(at(d, i, r.i1, r.i2, r.i3), d.type, (load(at(a, i, r.i1, r.i2, r.i3), a.type) - mean) * inv);
  }
}

__global__ void soft_max_kernel(Arr a, Arr mask, Arr d, float scale, Alibi alibi) {
  __shared__ float shared[kBlock / kWarp];
  const Index r = row_of(blockIdx.x, d.ne);
  const int64_t n = d.ne[0];
  const float slope = alibi_slope(alibi, r.i2);
  const bool has_mask = mask.data != nullptr;
  auto value = [&](int64_t i) {
    float w = load(at(a, i, r.i1, r.i2, r.i3), a.type) * scale;
    if (has_mask) w += slope * load(at(mask, i, r.i1, r.i2 % mask.ne[2], r.i3 % mask.ne[3]), mask.type);
    return w;
  };
  float mx = -INFINITY;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) mx = fmaxf(mx, value(i));
  mx = block_reduce<true>(mx, shared);
  float sum = 0.0f;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) sum += expf(value(i) - mx);
  const float inv = 1.0f / block_reduce<false>(sum, shared);
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    store(at(d, i, r.i1, r.i2, r.i3), d.type, expf(value(i) - mx) * inv);
  }
}

// SUM_ROWS: d[0, i1, i2, i3] = the row's sum, in f32 (the CPU sums in double).
__global__ void sum_rows_kernel(Arr a, Arr d) {
  __shared__ float shared[kBlock / kWarp];
  const Index r = row_of(blockIdx.x, d.ne);
  float sum = 0.0f;
  for (int64_t i = threadIdx.x; i < a.ne[0]; i += blockDim.x) sum += load(at(a, i, r.i1, r.i2, r.i3), a.type);
  sum = block_reduce<false>(sum, shared);
  if (threadIdx.x == 0) store(at(d, 0, r.i1, r.i2, r.i3), d.type, sum);
}

// Whether element j (value u) goes before element i (value v): the order,
// ties in index order (stable, as the CPU's sort), and NaN after every
// number, so the places always form a permutation.
__device__ __forceinline__ bool sorts_before(float u, int j, float v, int i, bool descending) {
  const bool nan_u = isnan(u), nan_v = isnan(v);
  if (nan_u || nan_v) return nan_u == nan_v ? j < i : nan_v;
  return (descending ? u > v : u < v) || (u == v && j < i);
}

// ARGSORT: element i goes to the place counted by the elements sorted before
// it. Rows of up to kMaxArgsortRow (an MoE router's experts, not a vocabulary).
__global__ void argsort_kernel(Arr a, Arr d, bool descending) {
  __shared__ float vals[kMaxArgsortRow];
  const Index r = row_of(blockIdx.x, d.ne);
  const auto n = static_cast<int>(d.ne[0]);
  for (int i = threadIdx.x; i < n; i += blockDim.x) vals[i] = load(at(a, i, r.i1, r.i2, r.i3), a.type);
  __syncthreads();
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    const float v = vals[i];
    int place = 0;
    for (int j = 0; j < n; ++j) {
      place += sorts_before(vals[j], j, v, i, descending) ? 1 : 0;
    }
    *reinterpret_cast<int32_t*>(at(d, place, r.i1, r.i2, r.i3)) = i;
  }
}

unsigned rows(const Arr& d) { return static_cast<unsigned>(d.ne[1] * d.ne[2] * d.ne[3]); }

}  // namespace

void rms_norm(cudaStream_t s, const Arr& a, const Arr& d, float eps) {
  if (rows(d) > 0) norm_kernel<true><<<rows(d), kBlock, 0, s>>>(a, d, eps);
}

void norm(cudaStream_t s, const Arr& a, const Arr& d, float eps) {
  if (rows(d) > 0) norm_kernel<false><<<rows(d), kBlock, 0, s>>>(a, d, eps);
}

void soft_max(cudaStream_t s, const Arr& a, const Arr& mask, const Arr& d, float scale,
              const Alibi& alibi) {
  if (rows(d) > 0) soft_max_kernel<<<rows(d), kBlock, 0, s>>>(a, mask, d, scale, alibi);
}

void sum_rows(cudaStream_t s, const Arr& a, const Arr& d) {
  if (rows(d) > 0) sum_rows_kernel<<<rows(d), kBlock, 0, s>>>(a, d);
}

void argsort(cudaStream_t s, const Arr& a, const Arr& d, bool descending) {
  if (rows(d) > 0 && d.ne[0] > 0) argsort_kernel<<<rows(d), kBlock, 0, s>>>(a, d, descending);
}

}  // namespace tessera::cuda::k
