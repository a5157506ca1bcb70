#include "cuda/ops/ops.h"

#include <cmath>
#include <cstdint>
#include <numbers>

#include "cuda/buffers.h"
#include "cuda/common.h"
#include "cuda/cublas_lib.h"
#include "cuda/ops/launch.h"
#include "cuda/repack.h"
#include "tessera/core/error.h"
#include "tessera/core/op_params.h"

namespace tessera::cuda {
namespace {

constexpr int64_t kQK = 32;
constexpr int64_t kCublasMaxDim = int64_t{1} << 31;

bool is_float(DType t) { return t == DType::kF32 || t == DType::kF16 || t == DType::kBF16; }

size_t elem_size(DType t) { return dtype_info(t).block_bytes; }

// Bytes from the start of t's storage (buffers align it to 128) to element 0.
size_t offset_in_storage(const Tensor& t) {
  size_t off = 0;
  for (const Tensor* v = &t; v->view_src != nullptr; v = v->view_src) off += v->view_offset;
  return off;
}

// Element 0 and every stride fall on whole elements: typed loads (and
// cuBLAS) fault on misaligned addresses, where the CPU copies bytes.
bool aligned_strides(const Tensor& t) {
  const size_t e = elem_size(t.type);
  for (size_t s : t.nb) {
    if (s % e != 0) return false;
  }
  const size_t start = t.data != nullptr ? reinterpret_cast<uintptr_t>(t.data) : offset_in_storage(t);
  return start % e == 0;
}

bool plain_float(const Tensor& t) { return is_float(t.type) && aligned_strides(t); }

bool is_kquant(DType t) {
  return t == DType::kQ2_K || t == DType::kQ3_K || t == DType::kQ4_K || t == DType::kQ5_K ||
         t == DType::kQ6_K || t == DType::kIQ4_NL || t == DType::kIQ4_XS || t == DType::kQ4_1 ||
         t == DType::kQ5_0 || t == DType::kQ5_1 || t == DType::kMXFP4;
}

// Q4_0 / Q8_0 / K-quants / IQ4 / MXFP4 in plain GGUF blocks (not split):
// whole blocks along dim 0, rows at even byte strides (each block's f16
// scales 2-byte aligned; the K-quant kernels load bytes).
bool plain_blocks(const Tensor& t) {
  if (!(t.type == DType::kQ4_0 || t.type == DType::kQ8_0 || is_kquant(t.type)) || is_split(t) ||
      is_view_of_split(t)) {
    return false;
  }
  const size_t bb = dtype_info(t.type).block_bytes;
  const int64_t qk = dtype_info(t.type).block_size;
  const size_t start = t.data != nullptr ? reinterpret_cast<uintptr_t>(t.data) : offset_in_storage(t);
  if (t.nb[0] != bb || t.ne[0] % qk != 0) return false;
  // MXFP4's 17-byte blocks hold no f16: any byte will do.
  return t.type == DType::kMXFP4 ||
         (t.nb[1] % 2 == 0 && t.nb[2] % 2 == 0 && t.nb[3] % 2 == 0 && start % 2 == 0);
}

// Decode on K-quant weights reads them in place (mul_mat.cu); other
// quantized weights in plain blocks, and larger batches, go to cuBLAS.
bool kquant_mmv(const Tensor& w, const Tensor& x) {
  return is_kquant(w.type) && plain_blocks(w) && x.n_rows() <= k::kMaxMmvColumns &&
         w.ne[2] * w.ne[3] == 1;
}

k::Arr arr(const Tensor& t) {
  k::Arr a;
  a.data = t.data;
  a.type = static_cast<uint32_t>(t.type);
  for (int i = 0; i < kMaxDims; ++i) {
    a.ne[i] = t.ne[static_cast<size_t>(i)];
    a.nb[i] = static_cast<int64_t>(t.nb[static_cast<size_t>(i)]);
  }
  return a;
}

k::Arr none() { return k::Arr{}; }

k::SplitQ split_of(const Tensor& t) {
  const BlockSplit s = block_split(t.type, static_cast<size_t>(t.n_elements() / kQK));
  k::SplitQ q;
  q.quants = t.data;
  q.scales = static_cast<const uint8_t*>(t.data) + s.scales_offset();
  q.type = static_cast<uint32_t>(t.type);
  q.k = t.ne[0];
  q.rows = t.n_rows();
  return q;
}

k::Alibi alibi(float max_bias, int64_t n_head) {
  k::Alibi a;
  a.max_bias = max_bias;
  if (max_bias <= 0.0f) return a;
  a.n2 = 1 << static_cast<int>(std::floor(std::log2(static_cast<double>(n_head))));
  a.m0 = std::pow(2.0f, -max_bias / static_cast<float>(a.n2));
  a.m1 = std::pow(2.0f, -(max_bias / 2.0f) / static_cast<float>(a.n2));
  return a;
}

// Pool memory for one node's scratch, handed back in reverse order.
class Scratch {
 public:
  Scratch(Pool& pool, size_t bytes) : pool_(pool), block_(pool.alloc(bytes)) {}
  ~Scratch() { pool_.free(block_); }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  void* get() const { return block_.ptr; }

 private:
  Pool& pool_;
  PoolBlock block_;
};

// ---- supports ---------------------------------------------------------------------------

bool same_desc(const Tensor& a, const Tensor& b) {
  return a.type == b.type && a.ne == b.ne && a.nb == b.nb;
}

bool supports_get_rows(const Tensor& node) {
  const Tensor& a = *node.src[0];
  const Tensor& ids = *node.src[1];
  const bool shape = ids.type == DType::kI32 && ids.ne[3] == 1 && node.ne[0] == a.ne[0] &&
                     node.ne[1] == ids.ne[0] && node.ne[2] == ids.ne[1] &&
                     node.ne[3] == ids.ne[2] && ids.ne[1] == a.ne[2] && ids.ne[2] == a.ne[3] &&
                     aligned_strides(ids);
  if (!shape || !plain_float(node)) return false;
  return plain_float(a) || is_split(a) || plain_blocks(a);
}

bool supports_set_rows(const Tensor& node) {
  const Tensor* values = node.src[0];
  const Tensor* ids = node.src[1];
  const Tensor* dst = node.src[2];
  if (values == nullptr || ids == nullptr || dst == nullptr) return false;
  // A quantized cache (Q4_0 / Q8_0 rows): whole blocks from contiguous f32 values.
  const bool cache_blocks = (node.type == DType::kQ4_0 || node.type == DType::kQ8_0) &&
                            plain_blocks(node) && values->nb[0] == sizeof(float);
  return same_desc(node, *dst) && (plain_float(node) || cache_blocks) && values->type == DType::kF32 &&
         aligned_strides(*values) && values->ne[0] == node.ne[0] &&
         values->ne[2] == node.ne[2] && values->ne[3] == node.ne[3] &&
         (ids->type == DType::kI32 || ids->type == DType::kI64) && aligned_strides(*ids) &&
         ids->ne[3] == 1 && ids->ne[0] == values->ne[1] && ids->ne[1] >= 1 && ids->ne[2] >= 1 &&
         node.ne[2] % ids->ne[1] == 0 && node.ne[3] % ids->ne[2] == 0;
}

bool supports_copy(const Tensor& node) {
  const Tensor& a = *node.src[0];
  if (a.n_elements() != node.n_elements()) return false;
  if (node.op == Op::kCpy && (node.src[1] == nullptr || node.ne != node.src[1]->ne)) return false;
  if (plain_float(a) && plain_float(node)) return true;
  // f32 into a quantized cache's blocks (the K shift's write-back).
  if ((node.type == DType::kQ4_0 || node.type == DType::kQ8_0) && plain_blocks(node)) {
    return a.type == DType::kF32 && a.nb[0] == sizeof(float) && aligned_strides(a) && a.ne == node.ne;
  }
  return a.type == DType::kI32 && node.type == DType::kI32 && aligned_strides(a) &&
         aligned_strides(node);
}

bool supports_rope(const Tensor& node) {
  const Tensor& a = *node.src[0];
  const Tensor& pos = *node.src[1];
  const Tensor* ff = node.src[2];
  const RopeParams p = RopeParams::get(node);
  const bool mode = p.mode == RopeMode::kNormal || p.mode == RopeMode::kNeox;
  return plain_float(node) && plain_float(a) && same_shape(node, a) && mode &&
         pos.type == DType::kI32 && aligned_strides(pos) && pos.ne[0] == a.ne[2] &&
         pos.ne[1] == 1 && pos.ne[2] == 1 && pos.ne[3] == 1 && p.n_dims > 0 &&
         p.n_dims % 2 == 0 && p.n_dims <= a.ne[0] &&
         (ff == nullptr || (ff->type == DType::kF32 && aligned_strides(*ff) && ff->ne[0] >= p.n_dims / 2));
}

bool supports_soft_max(const Tensor& node) {
  const Tensor& a = *node.src[0];
  if (!(plain_float(node) && plain_float(a) && same_shape(node, a))) return false;
  const Tensor* mask = node.src[1];
  if (mask == nullptr) return true;
  return plain_float(*mask) && mask->ne[0] == a.ne[0] && mask->ne[1] >= a.ne[1] &&
         mask->ne[2] >= 1 && mask->ne[3] >= 1 && a.ne[2] % mask->ne[2] == 0 &&
         a.ne[3] % mask->ne[3] == 0;
}

bool supports_attention(const Tensor& node) {
  const Tensor& q = *node.src[0];
  const Tensor& k = *node.src[1];
  const Tensor& v = *node.src[2];
  const Tensor* mask = node.src[3];
  // K and V as floats, or Q4_0 / Q8_0 rows of a quantized cache.
  const auto kv_ok = [](const Tensor& t) {
    return plain_float(t) || ((t.type == DType::kQ4_0 || t.type == DType::kQ8_0) && plain_blocks(t));
  };
  const bool types = plain_float(node) && plain_float(q) && kv_ok(k) && kv_ok(v);
  const bool shapes = k.ne[0] == q.ne[0] && v.ne[1] == k.ne[1] && v.ne[2] == k.ne[2] &&
                      v.ne[3] == k.ne[3] && k.ne[2] >= 1 && k.ne[3] >= 1 &&
                      q.ne[2] % k.ne[2] == 0 && q.ne[3] % k.ne[3] == 0 && node.ne[0] == v.ne[0] &&
                      node.ne[1] == q.ne[2] && node.ne[2] == q.ne[1] && node.ne[3] == q.ne[3] &&
                      q.ne[0] <= k::kMaxHeadDim && v.ne[0] <= k::kMaxHeadDim;
  const bool mask_ok =
      mask == nullptr || (plain_float(*mask) && mask->ne[0] == k.ne[1] && mask->ne[1] >= q.ne[1] &&
                          mask->ne[2] >= 1 && mask->ne[3] >= 1 && q.ne[2] % mask->ne[2] == 0 &&
                          q.ne[3] % mask->ne[3] == 0);
  // Sinks (gpt-oss): one f32 logit per query head, contiguous.
  const Tensor* sinks = node.src[4];
  const bool sinks_ok = sinks == nullptr || (sinks->type == DType::kF32 && sinks->ne[0] == q.ne[2] &&
                                             sinks->n_elements() == q.ne[2] && sinks->is_contiguous());
  return types && shapes && mask_ok && sinks_ok && FlashAttnExtParams::get(node).softcap >= 0.0f;
}

bool fits_cublas(const Tensor& t) {
  for (int64_t n : t.ne) {
    if (n >= kCublasMaxDim) return false;
  }
  return static_cast<int64_t>(t.nb[1] / elem_size(t.type)) < kCublasMaxDim;
}

// cuBLAS could be opened (once; a failure is remembered).
bool have_cublas() {
  static const bool ok = [] {
    try {
      (void)cublas();
      return true;
    } catch (const Error&) {
      return false;
    }
  }();
  return ok;
}

bool uses_cublas(const Tensor& w, const Tensor& x) {
  if (kquant_mmv(w, x)) return false;
  return !is_split(w) || x.n_rows() > k::kMaxMmvColumns || w.ne[2] * w.ne[3] > 1;
}

bool supports_mul_mat(const Tensor& node) {
  const Tensor& w = *node.src[0];
  const Tensor& x = *node.src[1];
  const bool shape = w.ne[0] == x.ne[0] && x.ne[2] % w.ne[2] == 0 && x.ne[3] % w.ne[3] == 0 &&
                     node.ne[0] == w.ne[1] && node.ne[1] == x.ne[1] && node.ne[2] == x.ne[2] &&
                     node.ne[3] == x.ne[3];
  if (!shape || node.type != DType::kF32 || !node.is_contiguous() || !plain_float(x) ||
      !fits_cublas(node) || !fits_cublas(x)) {
    return false;
  }
  if (uses_cublas(w, x) && !have_cublas()) return false;
  if (is_split(w) || plain_blocks(w)) return true;
  // cuBLAS reads w as a column-major k x m matrix: contiguous rows, no overlap.
  return plain_float(w) && w.nb[0] == elem_size(w.type) && w.nb[1] >= w.nb[0] * static_cast<size_t>(w.ne[0]) &&
         fits_cublas(w);
}

// MUL_MAT_ID (mul_mat.cu): experts [k, m, n_expert] split, in GGUF blocks
// the matrix-vector kernels read in place, or float; x f32 [k, n_x, n_tokens]
// (staged when not contiguous); ids i32 / i64 [n_used, n_tokens].
bool supports_mul_mat_id(const Tensor& node) {
  const Tensor& w = *node.src[0];
  const Tensor& x = *node.src[1];
  const Tensor& ids = *node.src[2];
  const bool shape = w.ne[3] == 1 && x.ne[3] == 1 && ids.ne[2] == 1 && ids.ne[3] == 1 &&
                     w.ne[0] == x.ne[0] && x.ne[2] == ids.ne[1] && node.ne[0] == w.ne[1] &&
                     node.ne[1] == ids.ne[0] && node.ne[2] == ids.ne[1] && node.ne[3] == 1;
  if (!shape || node.type != DType::kF32 || !node.is_contiguous() || x.type != DType::kF32 ||
      !aligned_strides(x) || (ids.type != DType::kI32 && ids.type != DType::kI64) ||
      !aligned_strides(ids)) {
    return false;
  }
  if (is_split(w)) return true;
  if (is_kquant(w.type)) return plain_blocks(w);
  return plain_float(w);
}

// ---- compute ------------------------------------------------------------------------------

// f32 x as a contiguous array of `type` (f32, f16 or bf16), in scratch.
k::Arr staged(const OpContext& ctx, const Tensor& x, DType type, Scratch& scratch) {
  k::Arr out = arr(x);
  out.data = scratch.get();
  out.type = static_cast<uint32_t>(type);
  const auto nb = contiguous_strides(type, x.ne);
  for (int i = 0; i < kMaxDims; ++i) out.nb[i] = static_cast<int64_t>(nb[static_cast<size_t>(i)]);
  k::copy(ctx.stream, arr(x), out);
  return out;
}

cudaDataType_t cuda_type(DType t) {
  switch (t) {
    case DType::kF16: return CUDA_R_16F;
    case DType::kBF16: return CUDA_R_16BF;
    default: return CUDA_R_32F;
  }
}

// node = w^T x per (i2, i3), w broadcast over dims 2 and 3 (by division, as the CPU).
void gemm(const OpContext& ctx, const Tensor& node, const void* w, DType w_type, int64_t w_ld,
          int64_t w_nb2, int64_t w_nb3, int64_t w_ne2, int64_t w_ne3, const k::Arr& x) {
  const Cublas& lib = cublas();
  const float alpha = 1.0f, beta = 0.0f;
  const auto m = static_cast<int>(node.ne[0]);
  const auto n = static_cast<int>(node.ne[1]);
  const auto kdim = static_cast<int>(x.ne[0]);
  const size_t xe = elem_size(static_cast<DType>(x.type));
  const int r2 = static_cast<int>(node.ne[2] / w_ne2), r3 = static_cast<int>(node.ne[3] / w_ne3);
  for (int64_t i3 = 0; i3 < node.ne[3]; ++i3) {
    for (int64_t i2 = 0; i2 < node.ne[2]; ++i2) {
      const auto* wp = static_cast<const uint8_t*>(w) + (i2 / r2) * w_nb2 + (i3 / r3) * w_nb3;
      const auto* xp = static_cast<const uint8_t*>(x.data) + i2 * x.nb[2] + i3 * x.nb[3];
      auto* yp = static_cast<uint8_t*>(node.data) + i2 * node.nb[2] + i3 * node.nb[3];
      check_cublas(lib.gemm_ex(ctx.cublas, CUBLAS_OP_T, CUBLAS_OP_N, m, n, kdim, &alpha, wp,
                               cuda_type(w_type), static_cast<int>(w_ld), xp,
                               cuda_type(static_cast<DType>(x.type)),
                               static_cast<int>(x.nb[1] / static_cast<int64_t>(xe)), &beta, yp,
                               CUDA_R_32F, m, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                   ctx.device, "cublasGemmEx");
    }
  }
}

// Decode: x made contiguous f32 if it is not, then `launch(x, n, scratch)`
// with mul_mat_vec_scratch bytes for the quantized columns.
template <class Launch>
void mat_vec(const OpContext& ctx, const Tensor& x, Launch launch) {
  const auto n = static_cast<int>(x.n_rows());
  const bool direct = x.type == DType::kF32 && x.is_contiguous();
  Scratch xs(*ctx.pool, direct ? 0 : static_cast<size_t>(x.n_elements()) * sizeof(float));
  const void* xf = direct ? x.data : staged(ctx, x, DType::kF32, xs).data;
  Scratch qs(*ctx.pool, k::mul_mat_vec_scratch(x.ne[0], n));
  launch(static_cast<const float*>(xf), n, qs.get());
}

void mul_mat(const OpContext& ctx, const Tensor& node) {
  const Tensor& w = *node.src[0];
  const Tensor& x = *node.src[1];
  if (x.ne[0] == 0) {  // empty sums
    TESSERA_CUDA_CHECK(cudaMemsetAsync(node.data, 0, node.n_bytes(), ctx.stream), ctx.device);
    return;
  }
  if (is_split(w)) {
    const k::SplitQ q = split_of(w);
    const int64_t cols = x.n_rows();
    if (cols <= k::kMaxMmvColumns && w.ne[2] == 1 && w.ne[3] == 1) {
      // Decode: the weights read once for every column.
      mat_vec(ctx, x, [&](const float* xf, int n, void* qs) {
        k::mul_mat_vec_split(ctx.stream, q, xf, x.ne[0], static_cast<float*>(node.data),
                             node.ne[0], n, qs);
      });
      return;
    }
    // Prefill: the weights dequantized to f16 once per node, then cuBLAS.
    Scratch xs(*ctx.pool, static_cast<size_t>(x.n_elements()) * 2);
    const k::Arr xh = staged(ctx, x, DType::kF16, xs);
    Scratch ws(*ctx.pool, static_cast<size_t>(w.n_elements()) * 2);
    k::dequantize_split(ctx.stream, q, ws.get());
    const int64_t matrix = w.ne[0] * w.ne[1] * 2;
    gemm(ctx, node, ws.get(), DType::kF16, w.ne[0], matrix, matrix * w.ne[2], w.ne[2], w.ne[3], xh);
    return;
  }
  if (kquant_mmv(w, x)) {
    // Decode on K-quant weights: read in place, the columns quantized once.
    mat_vec(ctx, x, [&](const float* xf, int n, void* qs) {
      k::mul_mat_vec_kquant(ctx.stream, arr(w), xf, x.ne[0], static_cast<float*>(node.data),
                            node.ne[0], n, qs);
    });
    return;
  }
  if (plain_blocks(w)) {
    // Weights in GGUF blocks (an op offloaded from host memory, a quantized
    // intermediate, K-quant weights past decode): every matrix dequantized
    // to f16, then cuBLAS.
    Scratch xs(*ctx.pool, static_cast<size_t>(x.n_elements()) * 2);
    const k::Arr xh = staged(ctx, x, DType::kF16, xs);
    Scratch ws(*ctx.pool, static_cast<size_t>(w.n_elements()) * 2);
    k::dequantize_blocks(ctx.stream, arr(w), ws.get());
    const int64_t matrix = w.ne[0] * w.ne[1] * 2;
    gemm(ctx, node, ws.get(), DType::kF16, w.ne[0], matrix, matrix * w.ne[2], w.ne[2], w.ne[3], xh);
    return;
  }
  const int64_t w_ld = static_cast<int64_t>(w.nb[1] / elem_size(w.type));
  const auto nb2 = static_cast<int64_t>(w.nb[2]), nb3 = static_cast<int64_t>(w.nb[3]);
  const bool x_direct = x.type == w.type && x.nb[0] == elem_size(x.type) &&
                        x.nb[1] >= x.nb[0] * static_cast<size_t>(x.ne[0]);
  if (x_direct) {
    gemm(ctx, node, w.data, w.type, w_ld, nb2, nb3, w.ne[2], w.ne[3], arr(x));
    return;
  }
  Scratch xs(*ctx.pool, static_cast<size_t>(x.n_elements()) * elem_size(w.type));
  const k::Arr xc = staged(ctx, x, w.type, xs);
  gemm(ctx, node, w.data, w.type, w_ld, nb2, nb3, w.ne[2], w.ne[3], xc);
}

void mul_mat_id(const OpContext& ctx, const Tensor& node) {
  const Tensor& w = *node.src[0];
  const Tensor& x = *node.src[1];
  const Tensor& ids = *node.src[2];
  k::ExpertPairs e;
  e.ids = arr(ids);
  e.n_used = ids.ne[0];
  e.n_tokens = ids.ne[1];
  e.n_expert = w.ne[2];
  e.m = w.ne[1];
  e.n_x = x.ne[1];
  auto* y = static_cast<float*>(node.data);
  if (x.ne[0] == 0) {  // empty sums: zeros, the ids still checked
    k::mul_mat_id_float(ctx.stream, arr(w), e, nullptr, y, ctx.bad_row_id);
    return;
  }
  const bool direct = x.is_contiguous();
  Scratch xs(*ctx.pool, direct ? 0 : static_cast<size_t>(x.n_elements()) * sizeof(float));
  const auto* xf = static_cast<const float*>(direct ? x.data : staged(ctx, x, DType::kF32, xs).data);
  if (is_split(w) || is_kquant(w.type)) {
    Scratch qs(*ctx.pool, k::mul_mat_vec_scratch(x.ne[0], x.ne[1] * x.ne[2]));
    if (is_split(w)) {
      k::mul_mat_id_split(ctx.stream, split_of(w), e, xf, y, qs.get(), ctx.bad_row_id);
    } else {
      k::mul_mat_id_kquant(ctx.stream, arr(w), e, xf, y, qs.get(), ctx.bad_row_id);
    }
    return;
  }
  k::mul_mat_id_float(ctx.stream, arr(w), e, xf, y, ctx.bad_row_id);
}

void flash_attn(const OpContext& ctx, const Tensor& node) {
  const Tensor& q = *node.src[0];
  const Tensor& kk = *node.src[1];
  const Tensor& v = *node.src[2];
  const FlashAttnExtParams fp = FlashAttnExtParams::get(node);
  k::Attention p;
  p.scale = fp.scale;
  p.softcap = fp.softcap;
  p.alibi = alibi(fp.max_bias, q.ne[2]);
  if (node.src[4] != nullptr) p.sinks = static_cast<const float*>(node.src[4]->data);
  const k::Arr qa = arr(q), ka = arr(kk), va = arr(v);
  const k::Arr mask = node.src[3] ? arr(*node.src[3]) : none();
  const int splits = k::attention_splits(qa, ka, va, ctx.sm_count);
  const int64_t floats = k::attention_scratch_floats(qa, va, splits);
  if (floats == 0) {
    k::flash_attn(ctx.stream, qa, ka, va, mask, arr(node), p, 1, nullptr);
    return;
  }
  Scratch partial(*ctx.pool, static_cast<size_t>(floats) * sizeof(float));
  k::flash_attn(ctx.stream, qa, ka, va, mask, arr(node), p, splits,
                static_cast<float*>(partial.get()));
}

void rope(const OpContext& ctx, const Tensor& node) {
  const RopeParams rp = RopeParams::get(node);
  k::Rope p;
  p.n_dims = rp.n_dims;
  p.neox = rp.mode == RopeMode::kNeox;
  p.freq_base = rp.freq_base;
  p.freq_scale = rp.freq_scale;
  p.ext_factor = rp.ext_factor;
  p.attn_factor = rp.attn_factor;
  p.theta_scale = std::pow(rp.freq_base, -2.0f / static_cast<float>(rp.n_dims));  // as the CPU
  // YaRN's ramp, as the CPU computes it (backends/cpu/ops/rope.cpp).
  const auto corr_dim = [&](float n_rot) {
    return static_cast<float>(rp.n_dims) *
           std::log(static_cast<float>(rp.n_ctx_orig) / (n_rot * 2.0f * std::numbers::pi_v<float>)) /
           (2.0f * std::log(rp.freq_base));
  };
  p.yarn_low = std::max(0.0f, std::floor(corr_dim(rp.beta_fast)));
  p.yarn_high = std::min(static_cast<float>(rp.n_dims - 1), std::ceil(corr_dim(rp.beta_slow)));
  k::rope(ctx.stream, arr(*node.src[0]), arr(*node.src[1]),
          node.src[2] ? arr(*node.src[2]) : none(), arr(node), p);
}

}  // namespace

bool supports(const Tensor& node) {
  if (node.op == Op::kNone) return true;
  // A view of split weights has no meaningful address: nothing may read it.
  if (is_view_op(node.op)) return !is_view_of_split(node);
  // Split weights are read only by MUL_MAT and GET_ROWS, as themselves.
  for (int i = 0; i < kMaxSources; ++i) {
    const Tensor* s = node.src[static_cast<size_t>(i)];
    if (s == nullptr) continue;
    if (is_view_of_split(*s)) return false;
    if (is_split(*s) &&
        !(i == 0 && (node.op == Op::kMulMat || node.op == Op::kMulMatId || node.op == Op::kGetRows))) {
      return false;
    }
  }
  const Tensor* a = node.src[0];
  switch (node.op) {
    case Op::kGetRows:
      return supports_get_rows(node);
    case Op::kSetRows:
      return supports_set_rows(node);
    case Op::kCpy:
    case Op::kDup:
    case Op::kCont:
      return supports_copy(node);
    case Op::kAdd:
    case Op::kSub:
    case Op::kMul:
    case Op::kDiv:
      return plain_float(node) && plain_float(*a) && plain_float(*node.src[1]) &&
             same_shape(node, *a) && can_repeat(*node.src[1], *a);
    case Op::kScale:
    case Op::kClamp:
      return plain_float(node) && plain_float(*a) && same_shape(node, *a);
    case Op::kUnary: {
      const auto u = static_cast<int32_t>(UnaryParams::get(node).op);
      return plain_float(node) && plain_float(*a) && same_shape(node, *a) && u >= 0 &&
             u < static_cast<int32_t>(UnaryOp::kCount);
    }
    case Op::kSwiglu:
    case Op::kGeglu:
    case Op::kSwigluOai:
      return plain_float(node) && plain_float(*a) && plain_float(*node.src[1]) &&
             same_shape(node, *a) && same_shape(node, *node.src[1]);
    case Op::kAddId: {
      const Tensor& b = *node.src[1];
      const Tensor& ids = *node.src[2];
      return plain_float(node) && plain_float(*a) && plain_float(b) && same_shape(node, *a) &&
             b.ne[0] == a->ne[0] && ids.type == DType::kI32 && aligned_strides(ids) &&
             ids.ne[0] == a->ne[1] && ids.ne[1] == a->ne[2] && a->ne[3] == 1;
    }
    case Op::kSumRows:
      return plain_float(node) && plain_float(*a) && node.ne[0] == 1 && node.ne[1] == a->ne[1] &&
             node.ne[2] == a->ne[2] && node.ne[3] == a->ne[3] && node.n_rows() < (int64_t{1} << 31);
    case Op::kArgsort: {
      const SortOrder order = ArgsortParams::get(node).order;
      return node.type == DType::kI32 && aligned_strides(node) && plain_float(*a) &&
             same_shape(node, *a) && node.ne[0] <= k::kMaxArgsortRow &&
             node.n_rows() < (int64_t{1} << 31) &&
             (order == SortOrder::kAscending || order == SortOrder::kDescending);
    }
    case Op::kRmsNorm:
    case Op::kNorm:
      return plain_float(node) && plain_float(*a) && same_shape(node, *a) && node.n_rows() < (int64_t{1} << 31);
    case Op::kSoftMax:
      return supports_soft_max(node) && node.n_rows() < (int64_t{1} << 31);
    case Op::kRope:
      return supports_rope(node) && node.n_rows() < (int64_t{1} << 31);
    case Op::kFlashAttnExt:
      return supports_attention(node) && node.n_rows() < (int64_t{1} << 31);
    case Op::kMulMat:
      return supports_mul_mat(node);
    case Op::kMulMatId:
      return supports_mul_mat_id(node);
    default:
      return false;
  }
}

bool needs_cublas(const Tensor& node) {
  if (node.op != Op::kMulMat) return false;
  return uses_cublas(*node.src[0], *node.src[1]);
}

void compute(const OpContext& ctx, const Tensor& node) {
  if (node.n_elements() == 0) return;
  const Tensor* a = node.src[0];
  const cudaStream_t s = ctx.stream;
  switch (node.op) {
    case Op::kGetRows:
      if (is_split(*a)) {
        k::get_rows_split(s, split_of(*a), arr(*node.src[1]), arr(node), ctx.bad_row_id);
      } else if (plain_blocks(*a)) {
        k::get_rows_blocks(s, arr(*a), arr(*node.src[1]), arr(node), ctx.bad_row_id);
      } else {
        k::get_rows(s, arr(*a), arr(*node.src[1]), arr(node), ctx.bad_row_id);
      }
      return;
    case Op::kSetRows:
      k::set_rows(s, arr(*a), arr(*node.src[1]), arr(node), ctx.bad_row_id);
      return;
    case Op::kCpy:
    case Op::kDup:
    case Op::kCont:
      if (node.type == DType::kQ4_0 || node.type == DType::kQ8_0) {
        k::copy_to_blocks(s, arr(*a), arr(node));
      } else {
        k::copy(s, arr(*a), arr(node));
      }
      return;
    case Op::kAdd:
    case Op::kSub:
    case Op::kMul:
    case Op::kDiv: {
      const k::Binary op = node.op == Op::kAdd   ? k::Binary::kAdd
                           : node.op == Op::kSub ? k::Binary::kSub
                           : node.op == Op::kMul ? k::Binary::kMul
                                                 : k::Binary::kDiv;
      k::binary(s, op, arr(*a), arr(*node.src[1]), arr(node));
      return;
    }
    case Op::kScale: {
      const ScaleParams p = ScaleParams::get(node);
      k::scale(s, arr(*a), arr(node), p.s, p.bias);
      return;
    }
    case Op::kClamp: {
      const ClampParams p = ClampParams::get(node);
      k::clamp(s, arr(*a), arr(node), p.min, p.max);
      return;
    }
    case Op::kUnary: {
      const UnaryParams p = UnaryParams::get(node);
      k::unary(s, static_cast<k::Unary>(p.op), p.param, arr(*a), arr(node));
      return;
    }
    case Op::kSwiglu:
    case Op::kGeglu:
      k::glu(s, node.op == Op::kSwiglu ? k::Glu::kSwiglu : k::Glu::kGeglu, arr(*a),
             arr(*node.src[1]), arr(node));
      return;
    case Op::kSwigluOai: {
      const SwigluOaiParams p = SwigluOaiParams::get(node);
      k::swiglu_oai(s, arr(*a), arr(*node.src[1]), arr(node), p.alpha, p.limit);
      return;
    }
    case Op::kAddId:
      k::add_id(s, arr(*a), arr(*node.src[1]), arr(*node.src[2]), arr(node), ctx.bad_row_id);
      return;
    case Op::kSumRows:
      k::sum_rows(s, arr(*a), arr(node));
      return;
    case Op::kArgsort:
      k::argsort(s, arr(*a), arr(node), ArgsortParams::get(node).order == SortOrder::kDescending);
      return;
    case Op::kRmsNorm:
      k::rms_norm(s, arr(*a), arr(node), NormParams::get(node).eps);
      return;
    case Op::kNorm:
      k::norm(s, arr(*a), arr(node), NormParams::get(node).eps);
      return;
    case Op::kSoftMax: {
      const SoftMaxParams p = SoftMaxParams::get(node);
      k::soft_max(s, arr(*a), node.src[1] ? arr(*node.src[1]) : none(), arr(node), p.scale,
                  alibi(p.max_bias, a->ne[2]));
      return;
    }
    case Op::kRope:
      rope(ctx, node);
      return;
    case Op::kFlashAttnExt:
      flash_attn(ctx, node);
      return;
    case Op::kMulMat:
      mul_mat(ctx, node);
      return;
    case Op::kMulMatId:
      mul_mat_id(ctx, node);
      return;
    default:
      fail(ErrorCategory::kUnsupported, "[CUDA{}] cannot compute {} on {}", ctx.device,
           op_name(node.op), node.describe());
  }
}

}  // namespace tessera::cuda
