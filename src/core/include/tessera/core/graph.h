// Graph: an arena of tensors built per forward pass, and the nodes to compute
// in order. Tensors made by a Graph live exactly as long as it; pointers to
// them stay valid (the arena never moves a tensor).
#pragma once

#include <cstdint>
#include <deque>
#include <initializer_list>
#include <span>
#include <string_view>
#include <unordered_set>
#include <vector>

#include "tessera/core/tensor.h"

namespace tessera {

class Graph {
 public:
  Graph() = default;
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;
  Graph(Graph&&) = default;
  Graph& operator=(Graph&&) = default;

  // A new contiguous leaf tensor (no op, no memory yet). Shape: ne[0] first;
  // 1 to 4 dims, each >= 1 (0 is allowed for empty tensors).
  Tensor* new_tensor(DType type, std::initializer_list<int64_t> ne, std::string_view name = {});
  Tensor* new_tensor(DType type, std::span<const int64_t> ne, std::string_view name = {});
  // A node: fills in op, sources and shape; strides contiguous unless changed.
  Tensor* new_node(Op op, DType type, const std::array<int64_t, kMaxDims>& ne,
                   std::initializer_list<Tensor*> sources);
  // A view of `src`'s bytes with its own shape and strides, at a byte offset.
  Tensor* new_view(Op op, Tensor* src, DType type, const std::array<int64_t, kMaxDims>& ne,
                   const std::array<size_t, kMaxDims>& nb, size_t offset);

  // Appends `out` and every tensor it depends on (sources first) to the graph:
  // op tensors to nodes(), op-less ones to leafs(). Idempotent.
  void expand(Tensor* out);

  std::span<Tensor* const> nodes() const { return nodes_; }
  std::span<Tensor* const> leafs() const { return leafs_; }

 private:
  void visit(Tensor* t);

  std::deque<Tensor> arena_;
  std::vector<Tensor*> nodes_;
  std::vector<Tensor*> leafs_;
  std::unordered_set<const Tensor*> visited_;
};

}  // namespace tessera
