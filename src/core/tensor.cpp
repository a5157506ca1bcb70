#include "tessera/core/tensor.h"

#include <fmt/format.h>

#include "tessera/core/error.h"

namespace tessera {

std::string_view op_name(Op op) {
  switch (op) {
    case Op::kNone: return "NONE";
    case Op::kReshape: return "RESHAPE";
    case Op::kView: return "VIEW";
    case Op::kPermute: return "PERMUTE";
    case Op::kTranspose: return "TRANSPOSE";
    case Op::kGetRows: return "GET_ROWS";
    case Op::kCpy: return "CPY";
    case Op::kSetRows: return "SET_ROWS";
    case Op::kDup: return "DUP";
    case Op::kCont: return "CONT";
    case Op::kConcat: return "CONCAT";
    case Op::kRepeat: return "REPEAT";
    case Op::kAcc: return "ACC";
    case Op::kPad: return "PAD";
    case Op::kArange: return "ARANGE";
    case Op::kAdd: return "ADD";
    case Op::kSub: return "SUB";
    case Op::kMul: return "MUL";
    case Op::kDiv: return "DIV";
    case Op::kScale: return "SCALE";
    case Op::kSqr: return "SQR";
    case Op::kSqrt: return "SQRT";
    case Op::kClamp: return "CLAMP";
    case Op::kUnary: return "UNARY";
    case Op::kSwiglu: return "SWIGLU";
    case Op::kGeglu: return "GEGLU";
    case Op::kSwigluOai: return "SWIGLU_OAI";
    case Op::kSumRows: return "SUM_ROWS";
    case Op::kNorm: return "NORM";
    case Op::kRmsNorm: return "RMS_NORM";
    case Op::kGroupNorm: return "GROUP_NORM";
    case Op::kSoftMax: return "SOFT_MAX";
    case Op::kDiagMaskInf: return "DIAG_MASK_INF";
    case Op::kArgsort: return "ARGSORT";
    case Op::kMulMat: return "MUL_MAT";
    case Op::kMulMatId: return "MUL_MAT_ID";
    case Op::kAddId: return "ADD_ID";
    case Op::kFlashAttnExt: return "FLASH_ATTN_EXT";
    case Op::kRope: return "ROPE";
    case Op::kIm2Col: return "IM2COL";
    case Op::kPool2d: return "POOL_2D";
    case Op::kUpscale: return "UPSCALE";
    case Op::kTimestepEmbedding: return "TIMESTEP_EMBEDDING";
    case Op::kCount: break;
  }
  return "?";
}

std::string_view unary_op_name(UnaryOp op) {
  switch (op) {
    case UnaryOp::kGelu: return "GELU";
    case UnaryOp::kGeluQuick: return "GELU_QUICK";
    case UnaryOp::kSilu: return "SILU";
    case UnaryOp::kRelu: return "RELU";
    case UnaryOp::kLeakyRelu: return "LEAKY_RELU";
    case UnaryOp::kHardSigmoid: return "HARDSIGMOID";
    case UnaryOp::kHardSwish: return "HARDSWISH";
    case UnaryOp::kTanh: return "TANH";
    case UnaryOp::kSigmoid: return "SIGMOID";
    case UnaryOp::kCount: break;
  }
  return "?";
}

size_t Tensor::row_size() const {
  const std::optional<size_t> bytes = row_bytes(type, ne[0]);
  TESSERA_CHECK(bytes.has_value(), "{}: row of {} elements is not whole {} blocks", name, ne[0],
                dtype_name(type));
  return *bytes;
}

size_t Tensor::n_bytes() const {
  if (ne[0] == 0 || ne[1] == 0 || ne[2] == 0 || ne[3] == 0) return 0;
  const DTypeInfo& info = dtype_info(type);
  // First row's bytes plus the furthest reach of every outer dim.
  size_t bytes = static_cast<size_t>(ne[0] / info.block_size) * nb[0];
  if (info.block_size == 1) bytes = info.block_bytes + static_cast<size_t>(ne[0] - 1) * nb[0];
  for (int d = 1; d < kMaxDims; ++d) bytes += static_cast<size_t>(ne[d] - 1) * nb[d];
  return bytes;
}

int Tensor::n_dims() const {
  for (int d = kMaxDims - 1; d > 0; --d) {
    if (ne[d] > 1) return d + 1;
  }
  return 1;
}

bool Tensor::is_contiguous() const { return nb == contiguous_strides(type, ne); }

bool Tensor::is_permuted() const {
  for (int d = 1; d < kMaxDims; ++d) {
    if (nb[d - 1] > nb[d]) return true;
  }
  return false;
}

std::string Tensor::describe() const {
  return fmt::format("'{}' {} [{}, {}, {}, {}]", name, dtype_name(type), ne[0], ne[1], ne[2],
                     ne[3]);
}

std::array<size_t, kMaxDims> contiguous_strides(DType type,
                                                const std::array<int64_t, kMaxDims>& ne) {
  const DTypeInfo& info = dtype_info(type);
  std::array<size_t, kMaxDims> nb{};
  nb[0] = info.block_bytes;
  nb[1] = nb[0] * static_cast<size_t>(ne[0] / info.block_size);
  for (int d = 2; d < kMaxDims; ++d) nb[d] = nb[d - 1] * static_cast<size_t>(ne[d - 1]);
  return nb;
}

bool same_shape(const Tensor& a, const Tensor& b) { return a.ne == b.ne; }

bool can_repeat(const Tensor& b, const Tensor& a) {
  for (int d = 0; d < kMaxDims; ++d) {
    if (b.ne[d] == 0 || a.ne[d] % b.ne[d] != 0) return false;
  }
  return true;
}

}  // namespace tessera
