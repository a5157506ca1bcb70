#include "tessera/runtime/graph_allocator.h"

#include <algorithm>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "tessera/core/error.h"

namespace tessera {
namespace {

// Offsets inside one future buffer: best fit over freed ranges, else the end.
class OffsetPlanner {
 public:
  explicit OffsetPlanner(size_t alignment) : alignment_(alignment) {}

  size_t alloc(size_t bytes) {
    const size_t size = round(bytes);
    auto best = free_.end();
    for (auto it = free_.begin(); it != free_.end(); ++it) {
      if (it->size >= size && (best == free_.end() || it->size < best->size)) best = it;
    }
    if (best != free_.end()) {
      const size_t offset = best->offset;
      best->offset += size;
      best->size -= size;
      if (best->size == 0) free_.erase(best);
      return offset;
    }
    // A free range ending at the top grows in place.
    size_t offset = end_;
    if (!free_.empty() && free_.back().offset + free_.back().size == end_) {
      offset = free_.back().offset;
      free_.pop_back();
    }
    end_ = offset + size;
    peak_ = std::max(peak_, end_);
    return offset;
  }

  void release(size_t offset, size_t bytes) {
    const size_t size = round(bytes);
    auto it = std::lower_bound(free_.begin(), free_.end(), offset,
                               [](const Range& r, size_t o) { return r.offset < o; });
    it = free_.insert(it, Range{offset, size});
    // Merge with the neighbours.
    if (it + 1 != free_.end() && it->offset + it->size == (it + 1)->offset) {
      it->size += (it + 1)->size;
      free_.erase(it + 1);
    }
    if (it != free_.begin() && (it - 1)->offset + (it - 1)->size == it->offset) {
      (it - 1)->size += it->size;
      it = free_.erase(it) - 1;
    }
    if (it->offset + it->size == end_) {
      end_ = it->offset;
      free_.erase(it);
    }
  }

  size_t peak() const { return peak_; }
  size_t round(size_t bytes) const {
    const size_t b = bytes == 0 ? alignment_ : bytes;
    return (b + alignment_ - 1) / alignment_ * alignment_;
  }

 private:
  struct Range {
    size_t offset, size;
  };
  size_t alignment_;
  std::vector<Range> free_;  // sorted by offset, never touching end_
  size_t end_ = 0;
  size_t peak_ = 0;
};

struct Block {
  BufferType* type;
  size_t offset;
  size_t size;
};

const Tensor* root_of(const Tensor* t) { return t->view_src != nullptr ? t->view_src : t; }

}  // namespace

bool can_run_in_place(const Tensor& node) {
  switch (node.op) {
    case Op::kAdd:
    case Op::kSub:
    case Op::kMul:
    case Op::kDiv:
    case Op::kScale:
    case Op::kSqr:
    case Op::kSqrt:
    case Op::kClamp:
    case Op::kUnary:
    case Op::kSwiglu:
    case Op::kGeglu:
    case Op::kSwigluOai:
    case Op::kNorm:
    case Op::kRmsNorm:
      break;
    default:
      return false;
  }
  const Tensor* a = node.src[0];
  return a != nullptr && a->type == node.type && a->ne == node.ne && a->nb == node.nb;
}

GraphAllocator::Stats GraphAllocator::allocate(std::span<Tensor* const> nodes,
                                               const TypeOf& type_of,
                                               std::vector<Placement>* placed) {
  Stats stats;
  std::unordered_map<const Tensor*, int> readers;  // pending reads, by memory root
  std::unordered_map<const Tensor*, Block> blocks;  // planned memory, by owner
  std::map<BufferType*, OffsetPlanner> planners;
  std::vector<std::pair<Tensor*, Block>> placements;  // every tensor given memory, in order

  auto needs_memory = [](const Tensor* t) { return t->data == nullptr && t->view_src == nullptr; };
  auto planner_for = [&](BufferType& type) -> OffsetPlanner& {
    return planners.try_emplace(&type, type.alignment()).first->second;
  };
  auto plan = [&](Tensor* t) {
    BufferType& type = type_of(*t);
    const size_t size = type.alloc_size(*t);
    const size_t offset = planner_for(type).alloc(size);
    blocks.emplace(t, Block{&type, offset, size});
    placements.emplace_back(t, Block{&type, offset, size});
    stats.tensors += 1;
    stats.naive += planner_for(type).round(size);
  };

  // Memory that outputs live in, views of an output's source included: never reused.
  std::unordered_set<const Tensor*> kept;
  for (Tensor* node : nodes) {
    for (const Tensor* t : node->src) {
      if (t != nullptr && t->has_flag(kFlagOutput)) kept.insert(root_of(t));
    }
    if (node->has_flag(kFlagOutput)) kept.insert(root_of(node));
  }

  // Count reads per memory root (once per reading node).
  for (Tensor* node : nodes) {
    std::unordered_set<const Tensor*> seen;
    for (Tensor* s : node->src) {
      if (s != nullptr && seen.insert(root_of(s)).second) readers[root_of(s)] += 1;
    }
  }

  // Inputs first: alive for the whole graph, set by the caller before compute.
  for (Tensor* node : nodes) {
    for (Tensor* s : node->src) {
      if (s != nullptr && s->op == Op::kNone && needs_memory(s) && !blocks.contains(s)) plan(s);
    }
  }

  for (Tensor* node : nodes) {
    if (needs_memory(node)) {
      Tensor* a = node->src[0];
      // Writing over `a` is safe only if this node reads a's memory through
      // `a` alone: a second input viewing the same bytes (a transpose, a row)
      // would be read after it was overwritten.
      bool aliased = false;
      for (int i = 1; i < kMaxSources; ++i) {
        const Tensor* s = node->src[static_cast<size_t>(i)];
        aliased |= s != nullptr && s != a && root_of(s) == a;
      }
      const bool reuse = can_run_in_place(*node) && a->view_src == nullptr &&
                         a->op != Op::kNone && !kept.contains(a) && !aliased &&
                         blocks.contains(a) && readers[a] == 1 &&
                         blocks.at(a).type == &type_of(*node) &&
                         blocks.at(a).size >= type_of(*node).alloc_size(*node);
      if (reuse) {
        Block b = blocks.at(a);
        blocks.erase(a);
        blocks.emplace(node, b);
        placements.emplace_back(node, b);
        stats.in_place += 1;
        stats.naive += planner_for(*b.type).round(type_of(*node).alloc_size(*node));
      } else {
        plan(node);
      }
    }
    // Free what this node was the last to read.
    std::unordered_set<const Tensor*> seen;
    for (Tensor* s : node->src) {
      if (s == nullptr) continue;
      const Tensor* r = root_of(s);
      if (!seen.insert(r).second) continue;
      if (--readers[r] > 0 || r->op == Op::kNone || kept.contains(r)) continue;
      auto it = blocks.find(r);
      if (it == blocks.end()) continue;  // not ours, or handed on to an in-place node
      planner_for(*it->second.type).release(it->second.offset, it->second.size);
      blocks.erase(it);
    }
  }

  // Grow buffers that are too small, then give each tensor its address.
  for (auto& [type, planner] : planners) {
    auto& buffer = buffers_[type];
    if (buffer == nullptr || buffer->size() < planner.peak()) {
      const size_t want = std::max<size_t>(
          planner.peak(), static_cast<size_t>(static_cast<double>(planner.peak()) * growth_));
      // Free the old one before asking for the larger. Plans placed in it are
      // stale from here on, whether or not the new one comes.
      const size_t old_size = buffer != nullptr ? buffer->size() : 0;
      buffer.reset();
      generation_ += 1;
      try {
        buffer = type->allocate(want);
      } catch (...) {
        // Out of memory: back to a buffer of the old size, so that the plans
        // that fitted before still run (after placing again).
        if (old_size > 0) {
          buffer = type->allocate(old_size);
          buffer->set_usage(BufferUsage::kCompute);
        } else {
          buffers_.erase(type);
        }
        throw;
      }
      buffer->set_usage(BufferUsage::kCompute);
    }
    stats.peak = std::max(stats.peak, planner.peak());
  }
  std::vector<Placement> local;
  std::vector<Placement>& out = placed != nullptr ? *placed : local;
  out.clear();
  for (const auto& [t, b] : placements) out.push_back(Placement{t, b.type, b.offset});
  // Views read their source's memory: placed once the source is.
  for (Tensor* node : nodes) {
    if (node->data == nullptr && node->view_src != nullptr) out.push_back(Placement{node, nullptr, 0});
  }
  place(out);
  return stats;
}

void GraphAllocator::place(std::span<const Placement> placed) {
  for (const Placement& p : placed) {
    if (p.type == nullptr) continue;
    auto it = buffers_.find(p.type);
    TESSERA_CHECK(it != buffers_.end() && it->second != nullptr,
                  "no compute buffer of type {} to place {} in", p.type->name(),
                  p.tensor->describe());
    p.tensor->data = nullptr;
    it->second->place(*p.tensor, p.offset);
  }
  for (const Placement& p : placed) {
    if (p.type != nullptr) continue;
    Tensor* src = p.tensor->view_src;
    TESSERA_CHECK(src->buffer != nullptr, "view {} of unplaced {}", p.tensor->describe(),
                  src->describe());
    p.tensor->data = nullptr;
    src->buffer->place(*p.tensor, 0);
  }
}

Buffer* GraphAllocator::buffer(const BufferType& type) const {
  auto it = buffers_.find(&type);
  return it == buffers_.end() ? nullptr : it->second.get();
}

}  // namespace tessera
