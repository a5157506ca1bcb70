// Tensor: a 4-D descriptor (type, shape, byte strides) plus, for graph nodes,
// the op that produces it and its sources. A tensor does not own memory: its
// bytes live in a Buffer (at `data`), or in its view source's bytes.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "tessera/core/dtype.h"

namespace tessera {

class Buffer;

inline constexpr int kMaxDims = 4;
inline constexpr int kMaxSources = 10;
inline constexpr int kMaxOpParams = 16;  // int32 slots

// The op set (docs/ops.md, "The op set"; SET_ROWS: "Ops added for the engine"). kNone marks a leaf
// (weights, inputs, constants).
enum class Op : uint8_t {
  kNone,
  // layout (no compute: share their source's bytes)
  kReshape,
  kView,
  kPermute,
  kTranspose,
  // data movement
  kGetRows,
  kCpy,      // copy src0 into src1's bytes, converting type
  kSetRows,  // src0's rows into the rows of src2 that src1 names (src2's bytes)
  kDup,
  kCont,
  kConcat,
  kRepeat,
  kAcc,
  kPad,
  kArange,
  // elementwise
  kAdd,
  kSub,
  kMul,
  kDiv,
  kScale,
  kSqr,
  kSqrt,
  kClamp,
  kUnary,
  kSwiglu,  // silu(src0) * src1
  kGeglu,   // gelu(src0) * src1 (tanh-approximated GELU)
  kSwigluOai,  // gpt-oss's clamped SwiGLU (SwigluOaiParams)
  // reductions and normalization
  kSumRows,
  kNorm,
  kRmsNorm,
  kGroupNorm,
  kSoftMax,
  kDiagMaskInf,
  kArgsort,
  // matmul and attention
  kMulMat,
  kMulMatId,  // MUL_MAT with one matrix per expert, picked per column by ids
  kAddId,     // a plus the bias row each (i1, i2) picks by id
  kFlashAttnExt,
  kRope,
  // image / diffusion helpers
  kIm2Col,
  kPool2d,
  kUpscale,
  kTimestepEmbedding,
  kCount,
};

enum class UnaryOp : int32_t {
  kGelu,
  kGeluQuick,
  kSilu,
  kRelu,
  kLeakyRelu,
  kHardSigmoid,
  kHardSwish,
  kTanh,
  kSigmoid,
  kCount,
};

std::string_view op_name(Op op);
std::string_view unary_op_name(UnaryOp op);

// True for ops that only reinterpret their source's bytes.
constexpr bool is_view_op(Op op) {
  return op == Op::kReshape || op == Op::kView || op == Op::kPermute || op == Op::kTranspose;
}

enum TensorFlag : uint32_t {
  kFlagInput = 1u << 0,   // set by the caller before each compute
  kFlagOutput = 1u << 1,  // read by the caller after compute: never overwritten
};

struct Tensor {
  DType type = DType::kF32;
  std::array<int64_t, kMaxDims> ne{1, 1, 1, 1};  // elements per dim, ne[0] fastest
  std::array<size_t, kMaxDims> nb{};             // byte stride per dim (nb[0] = block bytes)

  Op op = Op::kNone;
  // Op parameters, raw slots: read and write them through tessera/op_params.h.
  std::array<int32_t, kMaxOpParams> params{};
  std::array<Tensor*, kMaxSources> src{};

  Tensor* view_src = nullptr;  // the tensor whose bytes this one reads (views, in-place ops)
  size_t view_offset = 0;      // byte offset into view_src

  Buffer* buffer = nullptr;  // where the bytes live once allocated
  void* data = nullptr;      // address of element 0 (device address on devices)

  uint32_t flags = 0;
  std::string name;

  int64_t n_elements() const { return ne[0] * ne[1] * ne[2] * ne[3]; }
  int64_t n_rows() const { return ne[1] * ne[2] * ne[3]; }
  size_t row_size() const;  // bytes of one contiguous row of ne[0] elements
  // Bytes spanned from element 0 to the last element (views: not the source's size).
  size_t n_bytes() const;
  int n_dims() const;  // highest dim with ne > 1, plus one (at least 1)

  bool is_contiguous() const;  // rows packed, dims in order, no gaps
  bool is_permuted() const;    // strides not in increasing order
  bool is_transposed() const { return nb[0] > nb[1]; }
  bool is_view() const { return view_src != nullptr; }
  bool is_allocated() const { return data != nullptr; }
  bool has_flag(TensorFlag f) const { return (flags & f) != 0; }

  // "name f32 [64, 8, 1, 1]" for messages.
  std::string describe() const;
};

// Strides of a contiguous tensor of `type` with shape `ne`.
std::array<size_t, kMaxDims> contiguous_strides(DType type, const std::array<int64_t, kMaxDims>& ne);
bool same_shape(const Tensor& a, const Tensor& b);
// b can be broadcast to a: each a.ne[i] is a multiple of b.ne[i].
bool can_repeat(const Tensor& b, const Tensor& a);

}  // namespace tessera
