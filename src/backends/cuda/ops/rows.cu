// Row movement: GET_ROWS (plain and split-quantized sources), SET_ROWS, and
// split weights dequantized to f16 for cuBLAS.
#include "cuda/ops/device.cuh"
#include "cuda/ops/kquants.cuh"

namespace tessera::cuda::k {
namespace {

constexpr int kBlock = 256;
constexpr int kQK = 32;  // elements per Q4_0 / Q8_0 block

#define TESSERA_GRID_LOOP(i, n) \
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < (n); i += int64_t{gridDim.x} * blockDim.x)

// Element j of block b of split weights, as a float.
__device__ __forceinline__ float split_value(const SplitQ& w, int64_t b, int j) {
  const float d = __half2float(static_cast<const __half*>(w.scales)[b]);
  const auto* q = static_cast<const uint8_t*>(w.quants);
  if (w.type == kQ4_0) {
    const uint8_t byte = q[b * 16 + (j % 16)];
    const int nibble = j < 16 ? (byte & 0x0f) : (byte >> 4);
    return static_cast<float>(nibble - 8) * d;
  }
  return static_cast<float>(static_cast<int8_t>(q[b * kQK + j])) * d;
}

// Elements per GGUF block: 32, or a K-quant's (IQ4_XS's) 256.
__device__ __forceinline__ int block_elems(uint32_t type) { return kq::is_kquant(type) ? kq::block_elems(type) : kQK; }

// Element j of the GGUF block at `block` (Q4_0: f16 d, 16 nibble bytes; Q8_0:
// f16 d, 32 int8; K-quants: kquants.cuh), as a float.
__device__ __forceinline__ float block_value(const char* block, uint32_t type, int j) {
  if (kq::is_kquant(type)) return kq::value(reinterpret_cast<const uint8_t*>(block), type, j);
  return qb::value(reinterpret_cast<const uint8_t*>(block), type, j);
}

__device__ __forceinline__ int64_t load_id(const Arr& ids, int64_t i0, int64_t i1, int64_t i2) {
  const char* p = at(ids, i0, i1, i2, 0);
  return ids.type == kI64 ? *reinterpret_cast<const int64_t*>(p)
                          : *reinterpret_cast<const int32_t*>(p);
}

__device__ __forceinline__ bool in_range(int64_t row, int64_t rows, int* bad) {
  if (row >= 0 && row < rows) return true;
  *bad = 1;  // the stream reports it; the row reads as zeros or is not written
  return false;
}

__global__ void get_rows_kernel(Arr a, Arr ids, Arr d, int* bad) {
  TESSERA_GRID_LOOP(i, d.n()) {
    const Index x = unflatten(i, d.ne);
    const int64_t row = load_id(ids, x.i1, x.i2, x.i3);
    const bool ok = in_range(row, a.ne[1], bad);
    store(at(d, x.i0, x.i1, x.i2, x.i3), d.type,
          ok ? load(at(a, x.i0, row, x.i2, x.i3), a.type) : 0.0f);
  }
}

// a is contiguous [k, ne1, ne2, ne3] in the split layout; ne1 given separately.
__global__ void get_rows_split_kernel(SplitQ a, int64_t ne1, int64_t ne2, Arr ids, Arr d, int* bad) {
  TESSERA_GRID_LOOP(i, d.n()) {
    const Index x = unflatten(i, d.ne);
    const int64_t row = load_id(ids, x.i1, x.i2, x.i3);
    float v = 0.0f;
    if (in_range(row, ne1, bad)) {
      const int64_t flat_row = row + ne1 * (x.i2 + ne2 * x.i3);
      v = split_value(a, flat_row * (a.k / kQK) + x.i0 / kQK, static_cast<int>(x.i0 % kQK));
    }
    store(at(d, x.i0, x.i1, x.i2, x.i3), d.type, v);
  }
}

__global__ void set_rows_kernel(Arr values, Arr ids, Arr dst, int* bad) {
  TESSERA_GRID_LOOP(i, values.n()) {
    const Index x = unflatten(i, values.ne);
    const int64_t row = load_id(ids, x.i1, x.i2 % ids.ne[1], x.i3 % ids.ne[2]);
    if (!in_range(row, dst.ne[1], bad)) continue;
    store(at(dst, x.i0, row, x.i2, x.i3), dst.type, load(at(values, x.i0, x.i1, x.i2, x.i3), values.type));
  }
}

// Block b of row (i1, i2, i3) of f32 `src` (contiguous along dim 0) quantized
// into `out`, a Q4_0 or Q8_0 block, as the CPU quantizes.
__device__ __forceinline__ void quantize_block(const Arr& src, int64_t b, int64_t i1, int64_t i2,
                                               int64_t i3, uint32_t type, char* out) {
  float x[kQK];
  const auto* p = reinterpret_cast<const float*>(at(src, b * kQK, i1, i2, i3));
#pragma unroll
  for (int j = 0; j < kQK; ++j) x[j] = p[j];
  if (type == kQ8_0) {
    qb::quantize_q8_0(x, reinterpret_cast<uint8_t*>(out));
  } else {
    qb::quantize_q4_0(x, reinterpret_cast<uint8_t*>(out));
  }
}

// Rows of f32 values into Q4_0 / Q8_0 rows of dst (a quantized KV cache):
// one thread per destination block.
__global__ void set_rows_blocks_kernel(Arr values, Arr ids, Arr dst, int* bad) {
  const int64_t blocks[4] = {values.ne[0] / kQK, values.ne[1], values.ne[2], values.ne[3]};
  TESSERA_GRID_LOOP(i, values.n() / kQK) {
    const Index x = unflatten(i, blocks);
    const int64_t row = load_id(ids, x.i1, x.i2 % ids.ne[1], x.i3 % ids.ne[2]);
    if (!in_range(row, dst.ne[1], bad)) continue;
    quantize_block(values, x.i0, x.i1, x.i2, x.i3, dst.type, at(dst, x.i0, row, x.i2, x.i3));
  }
}

// f32 a into the Q4_0 / Q8_0 blocks of d, same shape.
__global__ void copy_to_blocks_kernel(Arr a, Arr d) {
  const int64_t blocks[4] = {d.ne[0] / kQK, d.ne[1], d.ne[2], d.ne[3]};
  TESSERA_GRID_LOOP(i, d.n() / kQK) {
    const Index x = unflatten(i, blocks);
    quantize_block(a, x.i0, x.i1, x.i2, x.i3, d.type, at(d, x.i0, x.i1, x.i2, x.i3));
  }
}

__global__ void get_rows_blocks_kernel(Arr a, Arr ids, Arr d, int* bad) {
  TESSERA_GRID_LOOP(i, d.n()) {
    const Index x = unflatten(i, d.ne);
    const int64_t row = load_id(ids, x.i1, x.i2, x.i3);
    float v = 0.0f;
    if (in_range(row, a.ne[1], bad)) {
      const int qk = block_elems(a.type);
      v = block_value(at(a, x.i0 / qk, row, x.i2, x.i3), a.type, static_cast<int>(x.i0 % qk));
    }
    store(at(d, x.i0, x.i1, x.i2, x.i3), d.type, v);
  }
}

// Every element of a (quantized rows at a's strides) as f16, row-major.
__global__ void dequantize_blocks_kernel(Arr a, __half* out) {
  TESSERA_GRID_LOOP(i, a.n()) {
    const Index x = unflatten(i, a.ne);
    const int qk = block_elems(a.type);
    out[i] = __float2half_rn(block_value(at(a, x.i0 / qk, x.i1, x.i2, x.i3), a.type,
                                         static_cast<int>(x.i0 % qk)));
  }
}

__global__ void dequantize_split_kernel(SplitQ a, __half* out) {
  TESSERA_GRID_LOOP(i, a.rows * a.k) {
    out[i] = __float2half_rn(split_value(a, i / kQK, static_cast<int>(i % kQK)));
  }
}

}  // namespace

void get_rows(cudaStream_t s, const Arr& a, const Arr& ids, const Arr& d, int* bad) {
  get_rows_kernel<<<grid_for(d.n(), kBlock), kBlock, 0, s>>>(a, ids, d, bad);
}

void get_rows_split(cudaStream_t s, const SplitQ& a, const Arr& ids, const Arr& d, int* bad) {
  const int64_t ne2 = ids.ne[1];
  const int64_t ne1 = a.rows / (ne2 * ids.ne[2]);
  get_rows_split_kernel<<<grid_for(d.n(), kBlock), kBlock, 0, s>>>(a, ne1, ne2, ids, d, bad);
}

void set_rows(cudaStream_t s, const Arr& values, const Arr& ids, const Arr& dst, int* bad) {
  if (qb::is_q4_0_or_q8_0(dst.type)) {
    set_rows_blocks_kernel<<<grid_for(values.n() / kQK, kBlock), kBlock, 0, s>>>(values, ids, dst, bad);
    return;
  }
  set_rows_kernel<<<grid_for(values.n(), kBlock), kBlock, 0, s>>>(values, ids, dst, bad);
}

void dequantize_split(cudaStream_t s, const SplitQ& a, void* out) {
  dequantize_split_kernel<<<grid_for(a.rows * a.k, kBlock), kBlock, 0, s>>>(
      a, static_cast<__half*>(out));
}

void copy_to_blocks(cudaStream_t s, const Arr& a, const Arr& d) {
  copy_to_blocks_kernel<<<grid_for(d.n() / kQK, kBlock), kBlock, 0, s>>>(a, d);
}

void get_rows_blocks(cudaStream_t s, const Arr& a, const Arr& ids, const Arr& d, int* bad) {
  get_rows_blocks_kernel<<<grid_for(d.n(), kBlock), kBlock, 0, s>>>(a, ids, d, bad);
}

void dequantize_blocks(cudaStream_t s, const Arr& a, void* out) {
  dequantize_blocks_kernel<<<grid_for(a.n(), kBlock), kBlock, 0, s>>>(a, static_cast<__half*>(out));
}

}  // namespace tessera::cuda::k
