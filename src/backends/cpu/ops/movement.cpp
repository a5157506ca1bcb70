// Data movement on plain (not quantized) types, copied as raw elements:
// CONCAT, REPEAT (tile), PAD (zeros before/after each dim, ggml's pad_ext
// params); and ACC (f32: a copy of a with b added into a view of it).
// Split over destination rows; any strides.
#include <cstring>

#include "cpu/ops/rows.h"
#include "tessera/core/op_params.h"

namespace tessera::cpu {
namespace {

using Index = std::array<int64_t, kMaxDims>;

bool plain_same_type(const Tensor& node, const Tensor& a) {
  return node.type == a.type && dtype_info(a.type).block_size == 1;
}

// Fills the destination element by element: src_of(dst index, &src index)
// names the tensor to copy from (nullptr: zero) and its index.
template <class SrcOf>
void fill(Tensor& node, const OpContext& ctx, SrcOf src_of) {
  const size_t width = dtype_info(node.type).block_bytes;
  const Range r = split_rows(node.n_rows(), ctx.ith, ctx.nth);
  for (int64_t row = r.begin; row < r.end; ++row) {
    const RowIndex ri = row_index(node, row);
    for (int64_t i0 = 0; i0 < node.ne[0]; ++i0) {
      const Index i{i0, ri.i1, ri.i2, ri.i3};
      Index s{};
      const Tensor* src = src_of(i, s);
      uint8_t* d = element_ptr(node, i[0], i[1], i[2], i[3]);
      if (src == nullptr) {
        std::memset(d, 0, width);
      } else {
        std::memcpy(d, element_ptr(*src, s[0], s[1], s[2], s[3]), width);
      }
    }
  }
}

bool concat_supports(const Tensor& node) {
  const Tensor& a = *node.src[0];
  const Tensor& b = *node.src[1];
  const int dim = ConcatParams::get(node).dim;
  if (!plain_same_type(node, a) || b.type != a.type || dim < 0 || dim >= kMaxDims) return false;
  for (int d = 0; d < kMaxDims; ++d) {
    const size_t u = static_cast<size_t>(d);
    const bool ok =
        d == dim ? node.ne[u] == a.ne[u] + b.ne[u] : node.ne[u] == a.ne[u] && b.ne[u] == a.ne[u];
    if (!ok) return false;
  }
  return true;
}

void concat_compute(Tensor& node, const OpContext& ctx) {
  const Tensor& a = *node.src[0];
  const Tensor& b = *node.src[1];
  const auto dim = static_cast<size_t>(ConcatParams::get(node).dim);
  fill(node, ctx, [&](const Index& i, Index& s) {
    s = i;
    if (i[dim] < a.ne[dim]) return &a;
    s[dim] -= a.ne[dim];
    return &b;
  });
}

bool repeat_supports(const Tensor& node) {
  return plain_same_type(node, *node.src[0]) && can_repeat(*node.src[0], node);
}

void repeat_compute(Tensor& node, const OpContext& ctx) {
  const Tensor& a = *node.src[0];
  fill(node, ctx, [&](const Index& i, Index& s) {
    for (size_t d = 0; d < kMaxDims; ++d) s[d] = i[d] % a.ne[d];
    return &a;
  });
}

bool pad_supports(const Tensor& node) {
  const Tensor& a = *node.src[0];
  if (!plain_same_type(node, a)) return false;
  const PadParams p = PadParams::get(node);
  for (size_t d = 0; d < kMaxDims; ++d) {
    const int64_t lp = p.before[d], rp = p.after[d];
    if (lp < 0 || rp < 0 || node.ne[d] != a.ne[d] + lp + rp) return false;
  }
  return true;
}

void pad_compute(Tensor& node, const OpContext& ctx) {
  const Tensor& a = *node.src[0];
  const PadParams p = PadParams::get(node);
  fill(node, ctx, [&](const Index& i, Index& s) -> const Tensor* {
    for (size_t d = 0; d < kMaxDims; ++d) {
      s[d] = i[d] - p.before[d];
      if (s[d] < 0 || s[d] >= a.ne[d]) return nullptr;
    }
    return &a;
  });
}

// ACC params (AccParams) widened: byte strides of b's view in a, dim 0 included.
struct AccView {
  std::array<int64_t, kMaxDims> nb;
  int64_t offset;
};
AccView acc_view(const Tensor& node) {
  const AccParams p = AccParams::get(node);
  return {{static_cast<int64_t>(sizeof(float)), p.nb1, p.nb2, p.nb3}, p.offset};
}

bool acc_supports(const Tensor& node) {
  const Tensor& a = *node.src[0];
  const Tensor& b = *node.src[1];
  if (!(node.type == DType::kF32 && a.type == DType::kF32 && b.type == DType::kF32 &&
        same_shape(node, a) && a.is_contiguous() && node.is_contiguous())) {
    return false;
  }
  // The view lies inside a, f32-aligned, rows not overlapping (threads add rows in parallel).
  const AccView v = acc_view(node);
  constexpr int64_t kF = sizeof(float);
  int64_t span = kF * b.ne[0];  // bytes the dims so far cover
  bool ok = v.offset >= 0 && v.offset % kF == 0 && b.n_elements() > 0;
  for (size_t d = 1; d < kMaxDims; ++d) {
    ok = ok && v.nb[d] >= 0 && v.nb[d] % kF == 0;
    if (b.ne[d] > 1) {
      ok = ok && v.nb[d] >= span;
      span += v.nb[d] * (b.ne[d] - 1);
    }
  }
  return ok && v.offset + span <= static_cast<int64_t>(node.n_bytes());
}

size_t acc_work_size(const Tensor& node, int nth) {
  return row_work_size(nth, 1, node.src[1]->ne[0]);
}

void acc_compute(Tensor& node, const OpContext& ctx) {
  const Tensor& a = *node.src[0];
  const Tensor& b = *node.src[1];
  // Both contiguous: copy a's bytes, each slot a slice (phase 0); then add b's rows.
  if (ctx.phase == 0) {
    const size_t bytes = node.n_bytes();
    const Range c = split_rows(static_cast<int64_t>(bytes / sizeof(float)), ctx.ith, ctx.nth);
    std::memcpy(static_cast<float*>(node.data) + c.begin,
                static_cast<const float*>(a.data) + c.begin,
                static_cast<size_t>(c.end - c.begin) * sizeof(float));
    return;
  }
  const AccView v = acc_view(node);
  float* scratch = thread_row(ctx, 1, 0, b.ne[0]);
  const Range r = split_rows(b.n_rows(), ctx.ith, ctx.nth);
  for (int64_t row = r.begin; row < r.end; ++row) {
    const RowIndex i = row_index(b, row);
    const float* x = read_row(b, i, scratch);
    auto* d = reinterpret_cast<float*>(static_cast<uint8_t*>(node.data) + v.offset +
                                       i.i1 * v.nb[1] + i.i2 * v.nb[2] + i.i3 * v.nb[3]);
    for (int64_t k = 0; k < b.ne[0]; ++k) d[k] += x[k];
  }
}

int acc_phases(const Tensor&, int, const Kernels*) { return 2; }

}  // namespace

extern const OpImpl kConcatOp{concat_supports, nullptr, concat_compute};
extern const OpImpl kRepeatOp{repeat_supports, nullptr, repeat_compute};
extern const OpImpl kPadOp{pad_supports, nullptr, pad_compute};
extern const OpImpl kAccOp{acc_supports, acc_work_size, acc_compute, acc_phases};

}  // namespace tessera::cpu
