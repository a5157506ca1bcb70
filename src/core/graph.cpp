#include "tessera/core/graph.h"

#include "tessera/core/error.h"

namespace tessera {

Tensor* Graph::new_tensor(DType type, std::initializer_list<int64_t> ne, std::string_view name) {
  return new_tensor(type, std::span<const int64_t>(ne.begin(), ne.size()), name);
}

Tensor* Graph::new_tensor(DType type, std::span<const int64_t> ne, std::string_view name) {
  if (ne.empty() || ne.size() > kMaxDims) {
    fail(ErrorCategory::kInvalidArgument, "[tensor '{}'] found {} dims, expected 1 to {}", name,
         ne.size(), kMaxDims);
  }
  std::array<int64_t, kMaxDims> shape{1, 1, 1, 1};
  for (size_t d = 0; d < ne.size(); ++d) {
    if (ne[d] < 0) {
      fail(ErrorCategory::kInvalidArgument, "[tensor '{}'] dim {} is {}, expected >= 0", name, d,
           ne[d]);
    }
    shape[d] = ne[d];
  }
  const DTypeInfo& info = dtype_info(type);
  if (shape[0] % info.block_size != 0) {
    fail(ErrorCategory::kInvalidArgument,
         "[tensor '{}'] row of {} elements, expected a multiple of the {} block size {}", name,
         shape[0], info.name, info.block_size);
  }
  Tensor& t = arena_.emplace_back();
  t.type = type;
  t.ne = shape;
  t.nb = contiguous_strides(type, shape);
  t.name = name;
  return &t;
}

Tensor* Graph::new_node(Op op, DType type, const std::array<int64_t, kMaxDims>& ne,
                        std::initializer_list<Tensor*> sources) {
  TESSERA_CHECK(sources.size() <= kMaxSources);
  Tensor* t = new_tensor(type, std::span<const int64_t>(ne.data(), ne.size()));
  t->op = op;
  size_t i = 0;
  for (Tensor* s : sources) t->src[i++] = s;
  return t;
}

Tensor* Graph::new_view(Op op, Tensor* src, DType type, const std::array<int64_t, kMaxDims>& ne,
                        const std::array<size_t, kMaxDims>& nb, size_t offset) {
  Tensor* t = new_node(op, type, ne, {src});
  t->nb = nb;
  // A view of a view reads the original bytes directly.
  t->view_src = src->view_src != nullptr ? src->view_src : src;
  t->view_offset = offset + (src->view_src != nullptr ? src->view_offset : 0);
  if (src->data != nullptr) {
    t->buffer = src->buffer;
    t->data = static_cast<uint8_t*>(src->data) + offset;
  }
  return t;
}

void Graph::expand(Tensor* out) {
  TESSERA_CHECK(out != nullptr);
  visit(out);
}

void Graph::visit(Tensor* t) {
  if (!visited_.insert(t).second) return;
  // Iterative post-order would avoid deep recursion; graphs here are a few
  // thousand nodes deep at most, well within the stack.
  for (Tensor* s : t->src) {
    if (s != nullptr) visit(s);
  }
  if (t->view_src != nullptr) visit(t->view_src);
  if (t->op == Op::kNone) {
    leafs_.push_back(t);
  } else {
    nodes_.push_back(t);
  }
}

}  // namespace tessera
