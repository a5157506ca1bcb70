// FLASH_ATTN_EXT with online softmax (kernels.md §3.4): one block of four
// warps per (query head, query, batch) row and share of the keys. A warp
// scores one key at a time (lanes split the head dim, a shuffle sum joins
// them) and each lane accumulates its 1/32 of the value dims. With more than
// one share ("split KV", for decode: few rows, long caches) each block writes
// its unnormalized (max, sum, accumulator) and a second kernel combines them.
#include <algorithm>

#include "backends/cuda/ops/device.cuh"

namespace tessera::cuda::k {
namespace {

constexpr int kWarps = 4;
constexpr int kAcc = kMaxHeadDim / kWarp;  // value dims per lane
constexpr int kMinKeysPerSplit = 128;

struct Row {
  int64_t h, iq, b;
};

// Grid x: row = h + H * (iq + n_q * b), the output's row order.
__device__ __forceinline__ Row row_of(int64_t r, int64_t n_head, int64_t n_q) {
  Row o;
  o.h = r % n_head;
  r /= n_head;
  o.iq = r % n_q;
  o.b = r / n_q;
  return o;
}

__global__ void __launch_bounds__(kWarps * kWarp)
    attention_kernel(Arr q, Arr k, Arr v, Arr mask, Arr d, Attention p, int splits, float* partial) {
  __shared__ float q_s[kMaxHeadDim];
  __shared__ float m_s[kWarps], l_s[kWarps];
  __shared__ float acc_s[kWarps][kMaxHeadDim];
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  const int64_t n_head = q.ne[2], n_q = q.ne[1], dk = q.ne[0], dv = v.ne[0], n_kv = k.ne[1];
  const Row o = row_of(blockIdx.x, n_head, n_q);
  const int64_t hk = o.h / (n_head / k.ne[2]);
  const int64_t bk = o.b / (q.ne[3] / k.ne[3]);
  const int split = blockIdx.y;
  const int64_t chunk = (n_kv + splits - 1) / splits;
  const int64_t k_begin = split * chunk;
  const int64_t k_end = min(n_kv, k_begin + chunk);

  for (int64_t i = threadIdx.x; i < dk; i += blockDim.x) q_s[i] = load(at(q, i, o.iq, o.h, o.b), q.type);
  __syncthreads();

  const bool capped = p.softcap > 0.0f;
  const float scale = capped ? p.scale / p.softcap : p.scale;
  const float slope = alibi_slope(p.alibi, o.h);
  float m = -INFINITY, l = 0.0f;
  float acc[kAcc];
#pragma unroll
  for (int t = 0; t < kAcc; ++t) acc[t] = 0.0f;

  for (int64_t j = k_begin + warp; j < k_end; j += kWarps) {
    float bias = 0.0f;
    if (mask.data != nullptr) {
      bias = slope * load(at(mask, j, o.iq, o.h % mask.ne[2], o.b % mask.ne[3]), mask.type);
      if (bias == -INFINITY) continue;  // the whole warp reads the same mask value
    }
    float dot = 0.0f;
    for (int64_t i = lane; i < dk; i += kWarp) dot += q_s[i] * load_elem(k, i, j, hk, bk);
    float s = warp_sum(dot) * scale;
    if (capped) s = p.softcap * tanhf(s);
    s += bias;
    float weight = 1.0f;
    if (s > m) {
      const float shrink = expf(m - s);  // 0 while m is -inf
#pragma unroll
      for (int t = 0; t < kAcc; ++t) acc[t] *= shrink;
      l *= shrink;
      m = s;
    } else {
      weight = expf(s - m);
    }
#pragma unroll
    for (int t = 0; t < kAcc; ++t) {
      const int64_t i = lane + int64_t{kWarp} * t;
      if (i < dv) acc[t] += weight * load_elem(v, i, j, hk, bk);
    }
    l += weight;
  }

  // Join the four warps: rescale each to the largest max.
  if (lane == 0) {
    m_s[warp] = m;
    l_s[warp] = l;
  }
#pragma unroll
  for (int t = 0; t < kAcc; ++t) {
    const int64_t i = lane + int64_t{kWarp} * t;
    if (i < dv) acc_s[warp][i] = acc[t];
  }
  __syncthreads();
  float mx = -INFINITY;
  for (int w = 0; w < kWarps; ++w) mx = fmaxf(mx, m_s[w]);
  float factor[kWarps];
  float total = 0.0f;
  for (int w = 0; w < kWarps; ++w) {
    factor[w] = m_s[w] == -INFINITY ? 0.0f : expf(m_s[w] - mx);
    total += l_s[w] * factor[w];
  }
  if (splits == 1) {
    const float inv = total == 0.0f ? 0.0f : 1.0f / total;  // every key masked: zeros
    for (int64_t i = threadIdx.x; i < dv; i += blockDim.x) {
      float sum = 0.0f;
      for (int w = 0; w < kWarps; ++w) sum += acc_s[w][i] * factor[w];
      store(at(d, i, o.h, o.iq, o.b), d.type, sum * inv);
    }
    return;
  }
  float* out = partial + (static_cast<int64_t>(blockIdx.x) * splits + split) * (dv + 2);
  if (threadIdx.x == 0) {
    out[0] = mx;
    out[1] = total;
  }
  for (int64_t i = threadIdx.x; i < dv; i += blockDim.x) {
    float sum = 0.0f;
    for (int w = 0; w < kWarps; ++w) sum += acc_s[w][i] * factor[w];
    out[2 + i] = sum;
  }
}

__global__ void combine_kernel(const float* partial, Arr d, int64_t n_head, int64_t n_q, int64_t dv,
                               int splits) {
  const Row o = row_of(blockIdx.x, n_head, n_q);
  const float* in = partial + static_cast<int64_t>(blockIdx.x) * splits * (dv + 2);
  float mx = -INFINITY;
  for (int s = 0; s < splits; ++s) mx = fmaxf(mx, in[s * (dv + 2)]);
  float total = 0.0f;
  for (int s = 0; s < splits; ++s) {
    const float m = in[s * (dv + 2)];
    if (m != -INFINITY) total += in[s * (dv + 2) + 1] * expf(m - mx);
  }
  const float inv = total == 0.0f ? 0.0f : 1.0f / total;
  for (int64_t i = threadIdx.x; i < dv; i += blockDim.x) {
    float sum = 0.0f;
    for (int s = 0; s < splits; ++s) {
      const float m = in[s * (dv + 2)];
      if (m != -INFINITY) sum += in[s * (dv + 2) + 2 + i] * expf(m - mx);
    }
    store(at(d, i, o.h, o.iq, o.b), d.type, sum * inv);
  }
}

int64_t rows_of(const Arr& q) { return q.ne[1] * q.ne[2] * q.ne[3]; }

}  // namespace

int attention_splits(const Arr& q, const Arr& k, int sm_count) {
  // Enough blocks for two waves over the SMs, each share at least
  // kMinKeysPerSplit keys.
  const int64_t rows = rows_of(q);
  const int64_t want = (2 * int64_t{sm_count} + rows - 1) / rows;
  const int64_t most = (k.ne[1] + kMinKeysPerSplit - 1) / kMinKeysPerSplit;
  return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>({want, most, 64})));
}

int64_t attention_scratch_floats(const Arr& q, const Arr& v, int splits) {
  return splits > 1 ? rows_of(q) * splits * (v.ne[0] + 2) : 0;
}

void flash_attn(cudaStream_t s, const Arr& q, const Arr& k, const Arr& v, const Arr& mask,
                const Arr& d, const Attention& p, int splits, float* partial) {
  const int64_t rows = rows_of(q);
  if (rows == 0) return;
  const dim3 grid(static_cast<unsigned>(rows), static_cast<unsigned>(splits));
  attention_kernel<<<grid, kWarps * kWarp, 0, s>>>(q, k, v, mask, d, p, splits, partial);
  if (splits > 1) {
    combine_kernel<<<static_cast<unsigned>(rows), 128, 0, s>>>(partial, d, q.ne[2], q.ne[1], v.ne[0],
                                                               splits);
  }
}

}  // namespace tessera::cuda::k
