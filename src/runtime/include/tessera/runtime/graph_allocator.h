// GraphAllocator: places a graph's intermediate tensors in one compute buffer
// per buffer type, reusing memory once a tensor's last reader has run, and
// letting elementwise ops write over an input nobody reads afterwards.
#pragma once

#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <vector>

#include "tessera/core/tensor.h"
#include "tessera/runtime/buffer.h"

namespace tessera {

class GraphAllocator {
 public:
  // Which buffer type a tensor's memory comes from (its device's compute type).
  using TypeOf = std::function<BufferType&(const Tensor&)>;

  struct Stats {
    size_t tensors = 0;    // tensors given memory (views and in-place reuse excluded)
    size_t in_place = 0;   // nodes that reused an input's memory
    size_t peak = 0;       // bytes of the largest compute buffer this call needed
    size_t naive = 0;      // bytes without any reuse, for comparison
  };

  // Where a tensor was given memory: replayed by place() when a plan made
  // earlier runs after the buffers were replaced by larger ones.
  struct Placement {
    Tensor* tensor;
    const BufferType* type;  // nullptr: a view, placed at its source's address
    size_t offset;
  };

  GraphAllocator() = default;
  GraphAllocator(const GraphAllocator&) = delete;
  GraphAllocator& operator=(const GraphAllocator&) = delete;

  // Gives memory to every tensor of `nodes` (in execution order) that has
  // none, and to the unallocated leafs they read (graph inputs). Tensors that
  // already have memory (weights) are left alone; outputs (kFlagOutput) and
  // inputs are never overwritten. Buffers are kept and reused by later calls
  // while big enough.
  Stats allocate(std::span<Tensor* const> nodes, const TypeOf& type_of,
                 std::vector<Placement>* placed = nullptr);
  // Places again, in the current buffers, what allocate() recorded (tensors
  // placed before are moved). The buffers only grow, so an earlier plan fits.
  void place(std::span<const Placement> placed);
  // Bumped whenever a buffer is replaced: plans placed before must place again.
  uint64_t generation() const { return generation_; }
  // A buffer that grows gets factor x what was asked (>= 1), so that plans of
  // slightly larger shapes do not grow it again.
  void set_growth(double factor) { growth_ = factor < 1.0 ? 1.0 : factor; }

  // Current compute buffer of `type`, or nullptr.
  Buffer* buffer(const BufferType& type) const;

 private:
  std::map<const BufferType*, std::unique_ptr<Buffer>> buffers_;
  uint64_t generation_ = 0;
  double growth_ = 1.0;
};

// True when `node` may write its result over src[0]'s memory: elementwise
// ops whose result has src[0]'s type and layout.
bool can_run_in_place(const Tensor& node);

}  // namespace tessera
