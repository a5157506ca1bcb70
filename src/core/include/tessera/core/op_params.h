// Typed op parameters: one struct per op that has any, the only code that
// knows where each value sits in Tensor::params. Builders (tessera/ops.h)
// write a node's params with X{...}.set(node); backends and tests read them
// with X::get(node). The slot layout is ggml's op_params layout for the op of
// the same name (unused slots stay 0), so a node converts to a ggml graph slot
// for slot. get() only decodes: a node made by hand past the builders may hold
// any values, and each backend's supports check judges them.
#pragma once

#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>

#include "tessera/core/tensor.h"

namespace tessera {

namespace op_params_detail {

inline int32_t slot_i32(const Tensor& node, size_t i) {
  return node.params[i];
}
inline float slot_f32(const Tensor& node, size_t i) {
  return std::bit_cast<float>(node.params[i]);
}
inline void set_slot_i32(Tensor& node, size_t i, int32_t v) {
  node.params[i] = v;
}
inline void set_slot_f32(Tensor& node, size_t i, float v) {
  node.params[i] = std::bit_cast<int32_t>(v);
}

}  // namespace op_params_detail

// ---- elementwise ---------------------------------------------------------------------

// SCALE: s * a + bias. Slots: f32 0 s, 1 bias.
struct ScaleParams {
  float s = 1.0f;
  float bias = 0.0f;

  void set(Tensor& node) const {
    op_params_detail::set_slot_f32(node, 0, s);
    op_params_detail::set_slot_f32(node, 1, bias);
  }
  static ScaleParams get(const Tensor& node) {
    return {op_params_detail::slot_f32(node, 0), op_params_detail::slot_f32(node, 1)};
  }
};

// CLAMP: min(max(a, min), max). Slots: f32 0 min, 1 max.
// SWIGLU_OAI: slot 0 alpha (the sigmoid's slope), slot 1 limit (the clamp).
struct SwigluOaiParams {
  float alpha = 1.702f;
  float limit = 7.0f;

  void set(Tensor& node) const {
    op_params_detail::set_slot_f32(node, 0, alpha);
    op_params_detail::set_slot_f32(node, 1, limit);
  }
  static SwigluOaiParams get(const Tensor& node) {
    return {op_params_detail::slot_f32(node, 0), op_params_detail::slot_f32(node, 1)};
  }
};

struct ClampParams {
  float min = 0.0f;
  float max = 0.0f;

  void set(Tensor& node) const {
    op_params_detail::set_slot_f32(node, 0, min);
    op_params_detail::set_slot_f32(node, 1, max);
  }
  static ClampParams get(const Tensor& node) {
    return {op_params_detail::slot_f32(node, 0), op_params_detail::slot_f32(node, 1)};
  }
};

// UNARY: the function op applied to each element. Slots: i32 0 op, f32 1 param
// (LEAKY_RELU's negative slope; the other functions ignore it).
struct UnaryParams {
  UnaryOp op = UnaryOp::kGelu;
  float param = 0.0f;

  void set(Tensor& node) const {
    op_params_detail::set_slot_i32(node, 0, static_cast<int32_t>(op));
    op_params_detail::set_slot_f32(node, 1, param);
  }
  static UnaryParams get(const Tensor& node) {
    return {static_cast<UnaryOp>(op_params_detail::slot_i32(node, 0)),
            op_params_detail::slot_f32(node, 1)};
  }
};

// ---- normalization ---------------------------------------------------------------------

// NORM and RMS_NORM: eps added to the variance (mean square). Slots: f32 0 eps.
struct NormParams {
  float eps = 0.0f;

  void set(Tensor& node) const { op_params_detail::set_slot_f32(node, 0, eps); }
  static NormParams get(const Tensor& node) { return {op_params_detail::slot_f32(node, 0)}; }
};

// GROUP_NORM: channels split into n_groups groups. Slots: i32 0 n_groups, f32 1 eps.
struct GroupNormParams {
  int32_t n_groups = 0;
  float eps = 0.0f;

  void set(Tensor& node) const {
    op_params_detail::set_slot_i32(node, 0, n_groups);
    op_params_detail::set_slot_f32(node, 1, eps);
  }
  static GroupNormParams get(const Tensor& node) {
    return {op_params_detail::slot_i32(node, 0), op_params_detail::slot_f32(node, 1)};
  }
};

// ---- attention -------------------------------------------------------------------------

enum class RopeMode : int32_t { kNormal = 0, kNeox = 2 };  // ggml's GGML_ROPE_TYPE_* values

// ROPE. Slots as ggml's: i32 1 n_dims, 2 mode, 4 n_ctx_orig; f32 5..10
// freq_base, freq_scale, ext_factor, attn_factor, beta_fast, beta_slow. Slots
// 0 and 3 are ggml's legacy ones (n_past, n_ctx), never written here.
struct RopeParams {
  int32_t n_dims = 0;  // rotated dims (<= head dim; the rest pass through)
  RopeMode mode = RopeMode::kNormal;
  int32_t n_ctx_orig = 0;  // training context, for YaRN
  float freq_base = 10000.0f;
  float freq_scale = 1.0f;  // 1 / linear scaling factor
  float ext_factor = 0.0f;  // YaRN extrapolation mix (0: off)
  float attn_factor = 1.0f;
  float beta_fast = 32.0f;
  float beta_slow = 1.0f;

  void set(Tensor& node) const {
    op_params_detail::set_slot_i32(node, 1, n_dims);
    op_params_detail::set_slot_i32(node, 2, static_cast<int32_t>(mode));
    op_params_detail::set_slot_i32(node, 4, n_ctx_orig);
    op_params_detail::set_slot_f32(node, 5, freq_base);
    op_params_detail::set_slot_f32(node, 6, freq_scale);
    op_params_detail::set_slot_f32(node, 7, ext_factor);
    op_params_detail::set_slot_f32(node, 8, attn_factor);
    op_params_detail::set_slot_f32(node, 9, beta_fast);
    op_params_detail::set_slot_f32(node, 10, beta_slow);
  }
  static RopeParams get(const Tensor& node) {
    RopeParams p;
    p.n_dims = op_params_detail::slot_i32(node, 1);
    p.mode = static_cast<RopeMode>(op_params_detail::slot_i32(node, 2));
    p.n_ctx_orig = op_params_detail::slot_i32(node, 4);
    p.freq_base = op_params_detail::slot_f32(node, 5);
    p.freq_scale = op_params_detail::slot_f32(node, 6);
    p.ext_factor = op_params_detail::slot_f32(node, 7);
    p.attn_factor = op_params_detail::slot_f32(node, 8);
    p.beta_fast = op_params_detail::slot_f32(node, 9);
    p.beta_slow = op_params_detail::slot_f32(node, 10);
    return p;
  }
};

// SOFT_MAX: softmax(a * scale + slope * mask), slope from ALiBi when max_bias > 0.
// Slots: f32 0 scale, 1 max_bias.
struct SoftMaxParams {
  float scale = 1.0f;
  float max_bias = 0.0f;

  void set(Tensor& node) const {
    op_params_detail::set_slot_f32(node, 0, scale);
    op_params_detail::set_slot_f32(node, 1, max_bias);
  }
  static SoftMaxParams get(const Tensor& node) {
    return {op_params_detail::slot_f32(node, 0), op_params_detail::slot_f32(node, 1)};
  }
};

// DIAG_MASK_INF: -inf where i > n_past + j. Slots: i32 0 n_past.
struct DiagMaskInfParams {
  int32_t n_past = 0;

  void set(Tensor& node) const { op_params_detail::set_slot_i32(node, 0, n_past); }
  static DiagMaskInfParams get(const Tensor& node) { return {op_params_detail::slot_i32(node, 0)}; }
};

// FLASH_ATTN_EXT: scores q.k * scale, softcap * tanh(s / softcap) when
// softcap > 0, plus the ALiBi slope (from max_bias) times the mask.
// Slots: f32 0 scale, 1 max_bias, 2 softcap.
struct FlashAttnExtParams {
  float scale = 1.0f;
  float max_bias = 0.0f;
  float softcap = 0.0f;

  void set(Tensor& node) const {
    op_params_detail::set_slot_f32(node, 0, scale);
    op_params_detail::set_slot_f32(node, 1, max_bias);
    op_params_detail::set_slot_f32(node, 2, softcap);
  }
  static FlashAttnExtParams get(const Tensor& node) {
    return {op_params_detail::slot_f32(node, 0), op_params_detail::slot_f32(node, 1),
            op_params_detail::slot_f32(node, 2)};
  }
};

// ---- data movement -----------------------------------------------------------------------

// CONCAT: a and b joined along dim. Slots: i32 0 dim.
struct ConcatParams {
  int32_t dim = 0;

  void set(Tensor& node) const { op_params_detail::set_slot_i32(node, 0, dim); }
  static ConcatParams get(const Tensor& node) { return {op_params_detail::slot_i32(node, 0)}; }
};

// ACC: b added into the view of a with byte strides nb1..nb3 at byte offset
// `offset` (dim 0 is contiguous f32). Slots: i32 0..3 nb1, nb2, nb3, offset.
// ggml keeps a fifth slot (inplace); the in-place form is not built here.
struct AccParams {
  int32_t nb1 = 0;
  int32_t nb2 = 0;
  int32_t nb3 = 0;
  int32_t offset = 0;

  void set(Tensor& node) const {
    op_params_detail::set_slot_i32(node, 0, nb1);
    op_params_detail::set_slot_i32(node, 1, nb2);
    op_params_detail::set_slot_i32(node, 2, nb3);
    op_params_detail::set_slot_i32(node, 3, offset);
  }
  static AccParams get(const Tensor& node) {
    return {op_params_detail::slot_i32(node, 0), op_params_detail::slot_i32(node, 1),
            op_params_detail::slot_i32(node, 2), op_params_detail::slot_i32(node, 3)};
  }
};

// PAD: zeros before and after each dim. Slots as ggml's pad_ext: i32 2d
// before[d], 2d + 1 after[d], for d = 0..3. ops::pad writes before = 0.
struct PadParams {
  std::array<int32_t, kMaxDims> before{};
  std::array<int32_t, kMaxDims> after{};

  void set(Tensor& node) const {
    for (size_t d = 0; d < kMaxDims; ++d) {
      op_params_detail::set_slot_i32(node, 2 * d, before[d]);
      op_params_detail::set_slot_i32(node, 2 * d + 1, after[d]);
    }
  }
  static PadParams get(const Tensor& node) {
    PadParams p;
    for (size_t d = 0; d < kMaxDims; ++d) {
      p.before[d] = op_params_detail::slot_i32(node, 2 * d);
      p.after[d] = op_params_detail::slot_i32(node, 2 * d + 1);
    }
    return p;
  }
};

// ---- generators --------------------------------------------------------------------------

// ARANGE: start + i * step for i < ceil((stop - start) / step).
// Slots: f32 0 start, 1 stop, 2 step.
struct ArangeParams {
  float start = 0.0f;
  float stop = 0.0f;
  float step = 1.0f;

  void set(Tensor& node) const {
    op_params_detail::set_slot_f32(node, 0, start);
    op_params_detail::set_slot_f32(node, 1, stop);
    op_params_detail::set_slot_f32(node, 2, step);
  }
  static ArangeParams get(const Tensor& node) {
    return {op_params_detail::slot_f32(node, 0), op_params_detail::slot_f32(node, 1),
            op_params_detail::slot_f32(node, 2)};
  }
};

// TIMESTEP_EMBEDDING: dim columns of cos then sin, frequencies from max_period.
// Slots: i32 0 dim, 1 max_period.
struct TimestepEmbeddingParams {
  int32_t dim = 0;
  int32_t max_period = 10000;

  void set(Tensor& node) const {
    op_params_detail::set_slot_i32(node, 0, dim);
    op_params_detail::set_slot_i32(node, 1, max_period);
  }
  static TimestepEmbeddingParams get(const Tensor& node) {
    return {op_params_detail::slot_i32(node, 0), op_params_detail::slot_i32(node, 1)};
  }
};

// ---- reductions ----------------------------------------------------------------------------

enum class SortOrder : int32_t { kAscending = 0, kDescending = 1 };  // ggml's values

// ARGSORT. Slots: i32 0 order.
struct ArgsortParams {
  SortOrder order = SortOrder::kAscending;

  void set(Tensor& node) const {
    op_params_detail::set_slot_i32(node, 0, static_cast<int32_t>(order));
  }
  static ArgsortParams get(const Tensor& node) {
    return {static_cast<SortOrder>(op_params_detail::slot_i32(node, 0))};
  }
};

// ---- image helpers ---------------------------------------------------------------------------

// IM2COL: stride, padding and dilation per spatial dim (s1, p1, d1 unused when
// !is_2d). Slots: i32 0..6 s0, s1, p0, p1, d0, d1, is_2d (0 or 1).
struct Im2ColParams {
  int32_t s0 = 1;
  int32_t s1 = 1;
  int32_t p0 = 0;
  int32_t p1 = 0;
  int32_t d0 = 1;
  int32_t d1 = 1;
  bool is_2d = false;

  void set(Tensor& node) const {
    const std::array<int32_t, 7> v{s0, s1, p0, p1, d0, d1, is_2d ? 1 : 0};
    for (size_t i = 0; i < v.size(); ++i) op_params_detail::set_slot_i32(node, i, v[i]);
  }
  static Im2ColParams get(const Tensor& node) {
    auto at = [&](size_t i) { return op_params_detail::slot_i32(node, i); };
    return {at(0), at(1), at(2), at(3), at(4), at(5), at(6) != 0};
  }
};

enum class PoolOp : int32_t { kMax = 0, kAvg = 1 };  // ggml's values

// POOL_2D: kernel k0 x k1, stride s0, s1, padding p0, p1.
// Slots: i32 0..6 op, k0, k1, s0, s1, p0, p1.
struct Pool2dParams {
  PoolOp op = PoolOp::kMax;
  int32_t k0 = 1;
  int32_t k1 = 1;
  int32_t s0 = 1;
  int32_t s1 = 1;
  int32_t p0 = 0;
  int32_t p1 = 0;

  void set(Tensor& node) const {
    const std::array<int32_t, 7> v{static_cast<int32_t>(op), k0, k1, s0, s1, p0, p1};
    for (size_t i = 0; i < v.size(); ++i) op_params_detail::set_slot_i32(node, i, v[i]);
  }
  static Pool2dParams get(const Tensor& node) {
    auto at = [&](size_t i) { return op_params_detail::slot_i32(node, i); };
    return {static_cast<PoolOp>(at(0)), at(1), at(2), at(3), at(4), at(5), at(6)};
  }
};

// ggml's scale modes; only nearest is built (ggml's 1 is bilinear).
enum class UpscaleMode : int32_t { kNearest = 0 };

// UPSCALE. Slots: i32 0 mode.
struct UpscaleParams {
  UpscaleMode mode = UpscaleMode::kNearest;

  void set(Tensor& node) const {
    op_params_detail::set_slot_i32(node, 0, static_cast<int32_t>(mode));
  }
  static UpscaleParams get(const Tensor& node) {
    return {static_cast<UpscaleMode>(op_params_detail::slot_i32(node, 0))};
  }
};

}  // namespace tessera
