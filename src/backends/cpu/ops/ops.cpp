#include "cpu/ops/op.h"

#include <cstring>

#include "tessera/core/dtype.h"
#include "tessera/core/error.h"
#include "tessera/core/half.h"

namespace tessera::cpu {

extern const OpImpl kLayoutOp;
extern const OpImpl kGetRowsOp;
extern const OpImpl kCopyOp;
extern const OpImpl kSetRowsOp;
extern const OpImpl kBinaryOp;
extern const OpImpl kMapOp;
extern const OpImpl kSwigluOp;
extern const OpImpl kGegluOp;
extern const OpImpl kSwigluOaiOp;
extern const OpImpl kNormOp;
extern const OpImpl kMulMatOp;
extern const OpImpl kMulMatIdOp;
extern const OpImpl kAddIdOp;
extern const OpImpl kRopeOp;
extern const OpImpl kSoftMaxOp;
extern const OpImpl kDiagMaskInfOp;
extern const OpImpl kFlashAttnExtOp;
extern const OpImpl kConcatOp;
extern const OpImpl kRepeatOp;
extern const OpImpl kPadOp;
extern const OpImpl kAccOp;
extern const OpImpl kSumRowsOp;
extern const OpImpl kArgsortOp;
extern const OpImpl kArangeOp;
extern const OpImpl kTimestepEmbeddingOp;
extern const OpImpl kIm2ColOp;
extern const OpImpl kPool2dOp;
extern const OpImpl kUpscaleOp;

const OpImpl* find_op(Op op) {
  switch (op) {
    case Op::kReshape:
    case Op::kView:
    case Op::kPermute:
    case Op::kTranspose: return &kLayoutOp;
    case Op::kGetRows: return &kGetRowsOp;
    case Op::kCpy:
    case Op::kDup:
    case Op::kCont: return &kCopyOp;
    case Op::kSetRows: return &kSetRowsOp;
    case Op::kAdd:
    case Op::kSub:
    case Op::kMul:
    case Op::kDiv: return &kBinaryOp;
    case Op::kScale:
    case Op::kSqr:
    case Op::kSqrt:
    case Op::kClamp:
    case Op::kUnary: return &kMapOp;
    case Op::kSwiglu: return &kSwigluOp;
    case Op::kGeglu: return &kGegluOp;
    case Op::kSwigluOai: return &kSwigluOaiOp;
    case Op::kNorm:
    case Op::kRmsNorm:
    case Op::kGroupNorm: return &kNormOp;
    case Op::kMulMat: return &kMulMatOp;
    case Op::kMulMatId: return &kMulMatIdOp;
    case Op::kAddId: return &kAddIdOp;
    case Op::kRope: return &kRopeOp;
    case Op::kSoftMax: return &kSoftMaxOp;
    case Op::kDiagMaskInf: return &kDiagMaskInfOp;
    case Op::kFlashAttnExt: return &kFlashAttnExtOp;
    case Op::kConcat: return &kConcatOp;
    case Op::kRepeat: return &kRepeatOp;
    case Op::kPad: return &kPadOp;
    case Op::kAcc: return &kAccOp;
    case Op::kSumRows: return &kSumRowsOp;
    case Op::kArgsort: return &kArgsortOp;
    case Op::kArange: return &kArangeOp;
    case Op::kTimestepEmbedding: return &kTimestepEmbeddingOp;
    case Op::kIm2Col: return &kIm2ColOp;
    case Op::kPool2d: return &kPool2dOp;
    case Op::kUpscale: return &kUpscaleOp;
    case Op::kNone:
    case Op::kCount: return nullptr;
  }
  return nullptr;
}

bool cpu_supports(const Tensor& node) {
  if (node.op == Op::kNone) return true;
  const OpImpl* impl = find_op(node.op);
  return impl != nullptr && impl->supports(node);
}

bool is_float_type(DType type) {
  return type == DType::kF32 || type == DType::kF16 || type == DType::kBF16;
}

float load_float(DType type, const uint8_t* p) {
  switch (type) {
    case DType::kF32: {
      float v;
      std::memcpy(&v, p, sizeof v);
      return v;
    }
    case DType::kF16: {
      uint16_t h;
      std::memcpy(&h, p, sizeof h);
      return fp16_to_fp32(h);
    }
    case DType::kBF16: {
      uint16_t h;
      std::memcpy(&h, p, sizeof h);
      return bf16_to_fp32(h);
    }
    default: TESSERA_CHECK(false, "load_float of {}", dtype_name(type));
  }
  return 0.0f;
}

void store_float(DType type, uint8_t* p, float v) {
  switch (type) {
    case DType::kF32: std::memcpy(p, &v, sizeof v); return;
    case DType::kF16: {
      const uint16_t h = fp32_to_fp16(v);
      std::memcpy(p, &h, sizeof h);
      return;
    }
    case DType::kBF16: {
      const uint16_t h = fp32_to_bf16(v);
      std::memcpy(p, &h, sizeof h);
      return;
    }
    default: TESSERA_CHECK(false, "store_float of {}", dtype_name(type));
  }
}

void row_to_float(DType type, const uint8_t* src, float* dst, int64_t n) {
  if (type == DType::kF32) {
    std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
  } else {
    dequantize_row(type, src, dst, n);
  }
}

// Reshape, view, permute, transpose: no work, any type.
static bool layout_supports(const Tensor&) { return true; }
static void layout_compute(Tensor&, const OpContext&) {}
const OpImpl kLayoutOp{layout_supports, nullptr, layout_compute};

}  // namespace tessera::cpu
