// FLASH_ATTN_EXT with online softmax (docs/cuda.md, "Tiled flash attention").
//
// Head dims up to 128 (tile_kernel): a block takes 16 rows that share one KV
// head (the query heads of a GQA group, then the next query positions) and
// walks the keys 32 at a time. Each tile of K and V is converted to f32 in
// shared memory once and read by all 16 rows, so K/V traffic falls by the
// rows a block holds; a tile whose mask is -inf for every row is skipped
// before it is loaded (the causal half of a prompt). Warp w owns rows
// 4w..4w+3: lane j scores key j of the tile for its four rows, the row's max
// and sum are warp shuffles, and for P·V the lane accumulates value dims
// j, j+32, j+64, j+96 of its rows.
//
// Larger head dims (row_kernel): one block of four warps per row; a warp
// scores one key at a time and each lane accumulates its 1/32 of the value
// dims.
//
// With more than one share of the keys ("split KV", for decode: few rows,
// long caches) each block writes its unnormalized (max, sum, accumulator) per
// row and combine_kernel joins them.
//
// With sinks (gpt-oss: one learned logit per query head) the sink joins each
// row's softmax denominator where the row is divided: sum + e^(sink - max).
#include <algorithm>

#include "cuda/ops/device.cuh"

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

// 1 / (sum + e^(sink - m)) for head h's row of running max m (0 when nothing
// is left: every key masked and no sink, or a sink past float range), as the CPU.
__device__ __forceinline__ float denominator_inverse(float m, float sum, const Attention& p, int64_t h) {
  const float den = p.sinks != nullptr ? sum + expf(p.sinks[h] - m) : sum;
  return den == 0.0f || isinf(den) ? 0.0f : 1.0f / den;
}

__global__ void __launch_bounds__(kWarps * kWarp)
    row_kernel(Arr q, Arr k, Arr v, Arr mask, Arr d, Attention p, int splits, float* partial) {
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
    const float inv = denominator_inverse(mx, total, p, o.h);  // every key masked: zeros
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

// ---- tile_kernel ------------------------------------------------------------------------
constexpr int kTileRows = 16;  // rows per block: 4 per warp
constexpr int kTileKeys = 32;  // keys per tile: one per lane
constexpr int kTileDim = 128;  // largest head dim (K and V)
constexpr int kRowsPerWarp = kTileRows / kWarps;

// f16 rows that can be read 16 bytes at a time: contiguous along dim 0, a
// multiple of 8 elements, every stride and the start 16-byte aligned.
__device__ __forceinline__ bool f16_rows(const Arr& a) {
  return a.type == kF16 && a.nb[0] == 2 && a.ne[0] % 8 == 0 && a.nb[1] % 16 == 0 &&
         a.nb[2] % 16 == 0 && a.nb[3] % 16 == 0 && reinterpret_cast<uintptr_t>(a.data) % 16 == 0;
}

// Elements i..i+7 of row (j, h, b) of f16 rows, raw (zeros when !in).
__device__ __forceinline__ uint4 load8(const Arr& a, int64_t i, int64_t j, int64_t h, int64_t b, bool in) {
  return in ? *reinterpret_cast<const uint4*>(at(a, i, j, h, b)) : make_uint4(0, 0, 0, 0);
}

__device__ __forceinline__ void halves_to_floats(uint4 raw, float* x) {
  const uint32_t words[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
  for (int u = 0; u < 4; ++u) {
    const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&words[u]));
    x[2 * u] = f.x;
    x[2 * u + 1] = f.y;
  }
}

bool tile_fits(const Arr& q, const Arr& v) { return q.ne[0] <= kTileDim && v.ne[0] <= kTileDim && q.ne[0] % 4 == 0; }

// Grid: x = tile of rows within (KV head, batch), y = share of the keys,
// z = KV head + n_head_kv * batch. Row rr of a (KV head, batch) is query
// head hk * G + rr % G at query position rr / G (G = n_head / n_head_kv).
__global__ void __launch_bounds__(kWarps * kWarp, 2)
    tile_kernel(Arr q, Arr k, Arr v, Arr mask, Arr d, Attention p, int splits, float* partial) {
  __shared__ __align__(16) float q_s[kTileRows][kTileDim];
  __shared__ float k_s[kTileDim][kTileKeys + 1];  // transposed: k_s[i][key]
  __shared__ float v_s[kTileKeys][kTileDim];
  __shared__ float p_s[kTileRows][kTileKeys];
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  const int64_t n_head = q.ne[2], n_q = q.ne[1], dk = q.ne[0], dv = v.ne[0], n_kv = k.ne[1];
  const int64_t n_head_kv = k.ne[2], group = n_head / n_head_kv;
  const int64_t hk = blockIdx.z % n_head_kv, b = blockIdx.z / n_head_kv;
  const int64_t bk = b / (q.ne[3] / k.ne[3]);
  const int64_t rows = group * n_q;
  const int64_t row0 = int64_t{blockIdx.x} * kTileRows;
  const int split = blockIdx.y;
  const int64_t chunk = (n_kv + splits - 1) / splits;
  const int64_t k_begin = split * chunk;
  const int64_t k_end = min(n_kv, k_begin + chunk);

  // This lane's rows: head, query position, and whether the row exists.
  int head[kRowsPerWarp], pos[kRowsPerWarp];  // below 2^31 (supports() asks fewer rows)
  bool live[kRowsPerWarp];
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    const int64_t rr = row0 + warp * kRowsPerWarp + r;
    live[r] = rr < rows;
    head[r] = static_cast<int>(hk * group + (live[r] ? rr % group : 0));
    pos[r] = static_cast<int>(live[r] ? rr / group : 0);
  }
  for (int r = warp; r < kTileRows; r += kWarps) {
    const int64_t rr = row0 + r;
    for (int i = lane; i < dk; i += kWarp) {
      q_s[r][i] = rr < rows ? load(at(q, i, rr / group, hk * group + rr % group, b), q.type) : 0.0f;
    }
  }

  const bool vec_k = f16_rows(k), vec_v = f16_rows(v);
  const bool capped = p.softcap > 0.0f;
  const float scale = capped ? p.scale / p.softcap : p.scale;
  float slope[kRowsPerWarp];
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) slope[r] = alibi_slope(p.alibi, head[r]);
  float m[kRowsPerWarp], l[kRowsPerWarp], acc[kRowsPerWarp][kTileDim / kWarp];
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    m[r] = -INFINITY;
    l[r] = 0.0f;
#pragma unroll
    for (int c = 0; c < kTileDim / kWarp; ++c) acc[r][c] = 0.0f;
  }

  for (int64_t t0 = k_begin; t0 < k_end; t0 += kTileKeys) {
    const int64_t j = t0 + lane;  // this lane's key
    float bias[kRowsPerWarp];
    bool any = false;
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) {
      bias[r] = j < k_end && live[r] ? 0.0f : -INFINITY;
      if (mask.data != nullptr && bias[r] == 0.0f) {
        bias[r] = slope[r] * load(at(mask, j, pos[r], head[r] % mask.ne[2], b % mask.ne[3]), mask.type);
      }
      any = any || bias[r] != -INFINITY;
    }
    // Every row masked off for every key of the tile: nothing to load.
    if (!__syncthreads_or(any)) continue;
    // Lanes along the head dim (coalesced reads); k_s's padded rows keep the
    // transposed writes off one bank. f16 rows (the usual cache) go 8 halves
    // (16 bytes) a load, every load of the tile issued before the first
    // store: one trip to memory a tile, not one per load.
    if (vec_k && vec_v) {
      constexpr int kLoads = kTileKeys * kTileDim / 8 / (kWarps * kWarp);
      const int per_k = static_cast<int>(dk / 8), per_v = static_cast<int>(dv / 8);
      uint4 kr[kLoads], vr[kLoads];
#pragma unroll
      for (int u = 0; u < kLoads; ++u) {
        const int e = threadIdx.x + u * kWarps * kWarp;
        const int key_k = e / per_k, key_v = e / per_v;
        kr[u] = load8(k, (e % per_k) * 8, t0 + key_k, hk, bk, key_k < kTileKeys && t0 + key_k < k_end);
        vr[u] = load8(v, (e % per_v) * 8, t0 + key_v, hk, bk, key_v < kTileKeys && t0 + key_v < k_end);
      }
#pragma unroll
      for (int u = 0; u < kLoads; ++u) {
        const int e = threadIdx.x + u * kWarps * kWarp;
        float x[8];
        if (e < kTileKeys * per_k) {
          const int key = e / per_k, i = (e % per_k) * 8;
          halves_to_floats(kr[u], x);
#pragma unroll
          for (int w = 0; w < 8; ++w) k_s[i + w][key] = x[w];
        }
        if (e < kTileKeys * per_v) {
          const int key = e / per_v, i = (e % per_v) * 8;
          halves_to_floats(vr[u], x);
          *reinterpret_cast<float4*>(&v_s[key][i]) = make_float4(x[0], x[1], x[2], x[3]);
          *reinterpret_cast<float4*>(&v_s[key][i + 4]) = make_float4(x[4], x[5], x[6], x[7]);
        }
      }
    } else {
      for (int key = warp; key < kTileKeys; key += kWarps) {
        const bool in = t0 + key < k_end;
        for (int i = lane; i < dk; i += kWarp) k_s[i][key] = in ? load_elem(k, i, t0 + key, hk, bk) : 0.0f;
        for (int i = lane; i < dv; i += kWarp) v_s[key][i] = in ? load_elem(v, i, t0 + key, hk, bk) : 0.0f;
      }
    }
    __syncthreads();
    // A warp whose rows are all past the end (decode: a GQA group of fewer
    // than 16 heads) only keeps the barriers. Live rows come first.
    if (!live[0]) {
      __syncthreads();
      continue;
    }

    // Scores of this lane's key for the warp's four rows.
    float s[kRowsPerWarp];
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) s[r] = 0.0f;
    for (int64_t i = 0; i < dk; i += 4) {
      const float k0 = k_s[i][lane], k1 = k_s[i + 1][lane], k2 = k_s[i + 2][lane], k3 = k_s[i + 3][lane];
#pragma unroll
      for (int r = 0; r < kRowsPerWarp; ++r) {
        const float4 qv = *reinterpret_cast<const float4*>(&q_s[warp * kRowsPerWarp + r][i]);
        s[r] += qv.x * k0 + qv.y * k1 + qv.z * k2 + qv.w * k3;
      }
    }
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) {
      float x = s[r] * scale;
      if (capped) x = p.softcap * tanhf(x);
      x = bias[r] == -INFINITY ? -INFINITY : x + bias[r];
      const float m_new = fmaxf(m[r], warp_max(x));
      // A row with no unmasked key yet keeps m = -inf, weights 0.
      const float w = m_new == -INFINITY ? 0.0f : expf(x - m_new);
      const float alpha = m_new == -INFINITY ? 1.0f : expf(m[r] - m_new);
      l[r] = l[r] * alpha + warp_sum(w);
      m[r] = m_new;
#pragma unroll
      for (int c = 0; c < kTileDim / kWarp; ++c) acc[r][c] *= alpha;
      p_s[warp * kRowsPerWarp + r][lane] = w;
    }
    __syncwarp();
    // P.V for the warp's rows: value dims lane + 32c.
#pragma unroll 4
    for (int key = 0; key < kTileKeys; ++key) {
      float vv[kTileDim / kWarp];
#pragma unroll
      for (int c = 0; c < kTileDim / kWarp; ++c) vv[c] = lane + kWarp * c < dv ? v_s[key][lane + kWarp * c] : 0.0f;
#pragma unroll
      for (int r = 0; r < kRowsPerWarp; ++r) {
        const float w = p_s[warp * kRowsPerWarp + r][key];
#pragma unroll
        for (int c = 0; c < kTileDim / kWarp; ++c) acc[r][c] += w * vv[c];
      }
    }
    __syncthreads();  // k_s, v_s and p_s are rewritten by the next tile
  }

#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    if (!live[r]) continue;
    const int64_t out_row = head[r] + n_head * (pos[r] + n_q * b);  // the output's row order
    if (splits == 1) {
      const float inv = denominator_inverse(m[r], l[r], p, head[r]);  // every key masked: zeros
#pragma unroll
      for (int c = 0; c < kTileDim / kWarp; ++c) {
        const int64_t i = lane + int64_t{kWarp} * c;
        if (i < dv) store(at(d, i, head[r], pos[r], b), d.type, acc[r][c] * inv);
      }
      continue;
    }
    float* out = partial + (out_row * splits + split) * (dv + 2);
    if (lane == 0) {
      out[0] = m[r];
      out[1] = l[r];
    }
#pragma unroll
    for (int c = 0; c < kTileDim / kWarp; ++c) {
      const int64_t i = lane + int64_t{kWarp} * c;
      if (i < dv) out[2 + i] = acc[r][c];
    }
  }
}

__global__ void combine_kernel(const float* partial, Arr d, int64_t n_head, int64_t n_q, int64_t dv,
                               int splits, Attention p) {
  const Row o = row_of(blockIdx.x, n_head, n_q);
  const float* in = partial + static_cast<int64_t>(blockIdx.x) * splits * (dv + 2);
  float mx = -INFINITY;
  for (int s = 0; s < splits; ++s) mx = fmaxf(mx, in[s * (dv + 2)]);
  float total = 0.0f;
  for (int s = 0; s < splits; ++s) {
    const float m = in[s * (dv + 2)];
    if (m != -INFINITY) total += in[s * (dv + 2) + 1] * expf(m - mx);
  }
  const float inv = denominator_inverse(mx, total, p, o.h);
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

// tile_kernel's blocks of kTileRows rows per (KV head, batch): a GQA group's
// heads times the query positions.
int64_t row_tiles(const Arr& q, const Arr& k) {
  return (q.ne[2] / k.ne[2] * q.ne[1] + kTileRows - 1) / kTileRows;
}

}  // namespace

int attention_splits(const Arr& q, const Arr& k, const Arr& v, int sm_count) {
  // Enough blocks for four waves over the SMs, each share at least one tile
  // (tile_kernel), or two waves and kMinKeysPerSplit keys (row_kernel).
  const bool tiles = tile_fits(q, v);
  const int64_t blocks = tiles ? row_tiles(q, k) * k.ne[2] * q.ne[3]
                               : rows_of(q);
  const int64_t min_keys = tiles ? kTileKeys : kMinKeysPerSplit;
  const int64_t want = ((tiles ? 4 : 2) * int64_t{sm_count} + blocks - 1) / blocks;
  const int64_t most = (k.ne[1] + min_keys - 1) / min_keys;
  return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>({want, most, 64})));
}

int64_t attention_scratch_floats(const Arr& q, const Arr& v, int splits) {
  return splits > 1 ? rows_of(q) * splits * (v.ne[0] + 2) : 0;
}

void flash_attn(cudaStream_t s, const Arr& q, const Arr& k, const Arr& v, const Arr& mask,
                const Arr& d, const Attention& p, int splits, float* partial) {
  const int64_t rows = rows_of(q);
  if (rows == 0) return;
  if (tile_fits(q, v)) {
    const int64_t tiles = row_tiles(q, k);
    const dim3 grid(static_cast<unsigned>(tiles), static_cast<unsigned>(splits),
                    static_cast<unsigned>(k.ne[2] * q.ne[3]));
    tile_kernel<<<grid, kWarps * kWarp, 0, s>>>(q, k, v, mask, d, p, splits, partial);
  } else {
    const dim3 grid(static_cast<unsigned>(rows), static_cast<unsigned>(splits));
    row_kernel<<<grid, kWarps * kWarp, 0, s>>>(q, k, v, mask, d, p, splits, partial);
  }
  if (splits > 1) {
    combine_kernel<<<static_cast<unsigned>(rows), 128, 0, s>>>(partial, d, q.ne[2], q.ne[1], v.ne[0],
                                                               splits, p);
  }
}

}  // namespace tessera::cuda::k
