#include "tessera/runtime/scheduler.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "tessera/core/error.h"
#include "tessera/runtime/buffer.h"

namespace tessera {
namespace {

const Tensor* root_of(const Tensor* t) { return t->view_src != nullptr ? t->view_src : t; }

bool in_weights(const Tensor* t) {
  const Tensor* r = root_of(t);
  return r->buffer != nullptr && r->buffer->usage() == BufferUsage::kWeights;
}

std::string types_of(const Tensor& node) {
  std::string s = fmt::format("{} -> {}", node.describe(), dtype_name(node.type));
  for (const Tensor* src : node.src) {
    if (src != nullptr) s += fmt::format(", src {}", src->describe());
  }
  return s;
}

bool debug_enabled() {
  const char* v = std::getenv("TESSERA_SCHED_DEBUG");
  return v != nullptr && std::strcmp(v, "0") != 0 && *v != '\0';
}

}  // namespace

Scheduler::Scheduler(std::vector<Device*> devices)
    : devices_(std::move(devices)), debug_(debug_enabled()) {
  if (devices_.empty() || devices_.back()->type() != DeviceType::kCpu) {
    fail(ErrorCategory::kInvalidArgument,
         "[scheduler] found {} devices, expected a list ending with a CPU device",
         devices_.size());
  }
}

Scheduler::~Scheduler() = default;

void Scheduler::pin(Tensor* node, Device& device) { pinned_[node] = &device; }

Device* Scheduler::device_of(const Tensor* t) const {
  auto it = assigned_.find(t);
  return it == assigned_.end() ? nullptr : it->second;
}

BufferType& Scheduler::compute_type(const Tensor& t) const {
  Device* d = device_of(root_of(&t));
  if (d == nullptr) d = device_of(&t);
  TESSERA_CHECK(d != nullptr, "tensor {} has no device", t.describe());
  return d->buffer_type();
}

bool Scheduler::can_read(const Device& d, const Tensor& t) const {
  const Tensor* r = root_of(&t);
  if (r->buffer != nullptr) return d.supports_buffer_type(r->buffer->type());
  const Device* owner = device_of(r);
  if (owner == nullptr) return false;
  return owner == &d || d.supports_buffer_type(const_cast<Device*>(owner)->buffer_type());
}

void Scheduler::assign(Graph& graph) {
  assigned_ = pinned_;
  Device* cpu = devices_.back();
  auto first_supporting = [&](const Tensor& node, auto&& also) -> Device* {
    for (Device* d : devices_) {
      if (d->supports_op(node) && also(*d)) return d;
    }
    return nullptr;
  };

  // Leafs: where their memory is; inputs without memory start on the CPU.
  for (Tensor* leaf : graph.leafs()) {
    if (assigned_.contains(leaf)) continue;
    assigned_[leaf] = leaf->buffer != nullptr ? &leaf->buffer->device() : cpu;
  }

  // Nodes with memory of their own (writes into a cache), and nodes reading
  // weights: next to the weights, unless a better device wants host weights.
  for (Tensor* node : graph.nodes()) {
    if (assigned_.contains(node) || is_view_op(node->op)) continue;
    if (node->data != nullptr && node->buffer != nullptr) {
      // It writes into memory it already has (a cache): only a device that
      // can reach that memory may run it.
      const BufferType& type = node->buffer->type();
      Device* d = first_supporting(*node, [&](Device& x) { return x.supports_buffer_type(type); });
      if (d == nullptr) {
        fail(ErrorCategory::kUnsupported,
             "[scheduler] no device that can write {} buffers supports {} ({})", type.name(),
             op_name(node->op), types_of(*node));
      }
      assigned_[node] = d;
      continue;
    }
    for (Tensor* src : node->src) {
      if (src == nullptr || !in_weights(src)) continue;
      const Buffer& wbuf = *root_of(src)->buffer;
      Device* home = &wbuf.device();
      if (std::find(devices_.begin(), devices_.end(), home) == devices_.end()) continue;
      if (!home->supports_op(*node)) continue;
      if (home->type() == DeviceType::kCpu) {
        for (Device* d : devices_) {
          if (d == home || d->type() == DeviceType::kCpu) continue;
          if (d->supports_op(*node) && d->offload_op(*node) &&
              d->supports_buffer_type(wbuf.type())) {
            home = d;
            break;
          }
        }
      }
      assigned_[node] = home;
      break;
    }
  }

  // Spread assignments to unassigned neighbours that the same device runs and
  // whose weights it reads in place: accelerators first, then any device.
  auto weights_readable = [&](const Device& d, const Tensor& node) {
    for (const Tensor* s : node.src) {
      if (s != nullptr && root_of(s)->buffer != nullptr &&
          !d.supports_buffer_type(root_of(s)->buffer->type())) {
        return false;
      }
    }
    return true;
  };
  std::span<Tensor* const> nodes = graph.nodes();
  for (bool include_cpu : {false, true}) {
    for (int direction : {+1, -1}) {
      Device* current = nullptr;
      const auto n = static_cast<ptrdiff_t>(nodes.size());
      for (ptrdiff_t k = 0; k < n; ++k) {
        Tensor* node = nodes[static_cast<size_t>(direction > 0 ? k : n - 1 - k)];
        if (is_view_op(node->op)) continue;
        auto it = assigned_.find(node);
        if (it != assigned_.end()) {
          current = (!include_cpu && it->second->type() == DeviceType::kCpu) ? nullptr : it->second;
        } else if (current != nullptr && current->supports_op(*node) &&
                   weights_readable(*current, *node)) {
          assigned_[node] = current;
        }
      }
    }
  }

  // Whatever is left: the first device that supports it.
  for (Tensor* node : nodes) {
    if (is_view_op(node->op) || assigned_.contains(node)) continue;
    Device* d = first_supporting(*node, [](Device&) { return true; });
    if (d == nullptr) {
      fail(ErrorCategory::kUnsupported, "[scheduler] no device supports {} ({})",
           op_name(node->op), types_of(*node));
    }
    assigned_[node] = d;
  }
  // Views live where their source does.
  for (Tensor* node : nodes) {
    if (!is_view_op(node->op)) continue;
    Device* d = device_of(root_of(node));
    assigned_[node] = d != nullptr ? d : cpu;
  }
}

void Scheduler::split(Graph& graph, Plan& plan) {
  std::vector<Split>& splits = plan.splits;
  splits.clear();
  for (Tensor* node : graph.nodes()) {
    Device* d = device_of(node);
    if (is_view_op(node->op)) {
      // No work: it rides along with whatever split is open.
      if (splits.empty()) splits.push_back(Split{d, {}, {}});
      splits.back().nodes.push_back(node);
      continue;
    }
    if (splits.empty() || splits.back().device != d) splits.push_back(Split{d, {}, {}});
    Split& s = splits.back();
    for (Tensor*& src : node->src) {
      if (src == nullptr || can_read(*d, *src)) continue;
      // One copy per source per split, with the source's own layout.
      auto found = std::find_if(s.copies.begin(), s.copies.end(),
                                [&](Tensor* c) { return c->src[0] == src; });
      Tensor* copy = nullptr;
      if (found != s.copies.end()) {
        copy = *found;
      } else {
        copy = graph.new_node(Op::kDup, src->type, src->ne, {src});
        copy->nb = src->nb;
        copy->name = fmt::format("{}#{}", src->name, d->name());
        assigned_[copy] = d;
        s.copies.push_back(copy);
      }
      src = copy;
    }
    s.nodes.push_back(node);
  }
}

Stream& Scheduler::stream_for(Device& d) {
  auto& s = streams_[&d];
  if (s == nullptr) s = d.make_stream();
  return *s;
}

Event& Scheduler::event_for(std::unordered_map<Device*, std::unique_ptr<Event>>& events,
                            Device& d) {
  auto& ev = events[&d];
  if (ev == nullptr) ev = d.make_event();
  return *ev;
}

// Streams, events and copy sources looked up once, so that compute(Plan&)
// follows pointers only.
void Scheduler::resolve(Plan& plan) {
  for (Split& s : plan.splits) {
    s.stream = &stream_for(*s.device);
    s.event = s.device->caps().events ? &event_for(events_, *s.device) : nullptr;
  }
  // Producers' streams and events exist once every split has its own.
  for (size_t k = 0; k < plan.splits.size(); ++k) {
    Split& s = plan.splits[k];
    s.copy_from_stream.clear();
    s.copy_producer.clear();
    s.copied_async.assign(s.copies.size(), 0);
    for (Tensor* copy : s.copies) {
      Device* from = device_of(root_of(copy->src[0]));
      auto it = from != nullptr ? streams_.find(from) : streams_.end();
      s.copy_from_stream.push_back(it == streams_.end() ? nullptr : it->second.get());
      Event* produced = nullptr;
      if (from != nullptr && from != s.device && s.device->caps().async && from->caps().async &&
          from->caps().events) {
        for (size_t e = 0; e < k; ++e) {
          if (plan.splits[e].device == from) produced = plan.splits[e].event;
        }
      }
      s.copy_producer.push_back(produced);
    }
    const bool any_async = std::any_of(s.copy_producer.begin(), s.copy_producer.end(),
                                       [](Event* e) { return e != nullptr; });
    s.copy_event = any_async ? &event_for(copy_events_, *s.device) : nullptr;
    s.prepared = s.stream->prepare(s.nodes);
  }
}

std::unique_ptr<Scheduler::Plan> Scheduler::plan(Graph& graph) {
  auto p = std::make_unique<Plan>();
  p->graph = &graph;
  assign(graph);
  pinned_.clear();  // pins are for this graph only
  split(graph, *p);
  for (const Split& s : p->splits) {
    p->order.insert(p->order.end(), s.copies.begin(), s.copies.end());
    p->order.insert(p->order.end(), s.nodes.begin(), s.nodes.end());
  }
  p->stats = allocator_.allocate(
      p->order, [this](const Tensor& t) -> BufferType& { return compute_type(t); },
      &p->placements);
  p->generation = allocator_.generation();
  resolve(*p);
  plans_made_ += 1;
  if (debug_) std::fputs(describe(*p).c_str(), stderr);
  return p;
}

void Scheduler::allocate(Graph& graph) { current_ = plan(graph); }

const Scheduler::Plan& Scheduler::current() const {
  TESSERA_CHECK(current_ != nullptr, "the scheduler was asked about its plan before allocate()");
  return *current_;
}

void Scheduler::place(Plan& plan) {
  if (plan.generation == allocator_.generation()) return;
  // A later plan grew the buffers: same offsets, new addresses.
  allocator_.place(plan.placements);
  plan.generation = allocator_.generation();
  for (Split& s : plan.splits) s.prepared = s.stream->prepare(s.nodes);
}

void Scheduler::compute() {
  TESSERA_CHECK(current_ != nullptr, "compute() before allocate()");
  compute(*current_);
}

void Scheduler::compute(Plan& plan) {
  place(plan);
  try {
    compute_splits(plan);
  } catch (...) {
    // Queued work still points into this graph: let it finish before the
    // caller unwinds and frees it.
    for (auto& [device, stream] : streams_) {
      try {
        stream->synchronize();
      } catch (...) {
      }
    }
    throw;
  }
}

void Scheduler::compute_splits(Plan& plan) {
  for (Split& s : plan.splits) {
    Stream& stream = *s.stream;
    bool read_async = false;
    for (size_t i = 0; i < s.copies.size(); ++i) {
      Tensor* copy = s.copies[i];
      const Tensor& src = *copy->src[0];
      Stream* from_stream = s.copy_from_stream[i];
      // Device to device, both asynchronous with events: queue the copy
      // behind the producer's last recorded work, without the host waiting.
      Event* produced = s.copy_producer[i];
      s.copied_async[i] = 0;
      if (produced != nullptr) {
        stream.wait(*produced);
        if (stream.copy_tensor_async(src, *copy)) {
          read_async = true;
          s.copied_async[i] = 1;
          continue;
        }
      }
      if (from_stream != nullptr) from_stream->synchronize();
      stream.synchronize();
      copy_tensor(src, *copy);
    }
    // The producers must not reuse the memory these copies read before they ran.
    if (read_async) {
      stream.record(*s.copy_event);
      for (size_t i = 0; i < s.copies.size(); ++i) {
        if (s.copied_async[i] != 0) s.copy_from_stream[i]->wait(*s.copy_event);
      }
    }
    if (s.prepared != nullptr) {
      stream.compute(*s.prepared, s.nodes);
    } else {
      stream.compute(s.nodes);
    }
    if (s.event != nullptr) stream.record(*s.event);
  }
  for (const Split& s : plan.splits) s.stream->synchronize();
}

std::string Scheduler::describe(const Plan& plan) const {
  const GraphAllocator::Stats& stats = plan.stats;
  std::string out = fmt::format("scheduler: {} splits, compute peak {} bytes ({} tensors, {} in "
                                "place, {} bytes without reuse)\n",
                                plan.splits.size(), stats.peak, stats.tensors, stats.in_place,
                                stats.naive);
  for (size_t i = 0; i < plan.splits.size(); ++i) {
    const Split& s = plan.splits[i];
    std::string ops;
    for (const Tensor* n : s.nodes) {
      if (is_view_op(n->op)) continue;
      ops += fmt::format("{}{}", ops.empty() ? "" : " ", op_name(n->op));
    }
    std::string copies;
    for (const Tensor* c : s.copies) {
      copies += fmt::format("{}{}", copies.empty() ? "" : ", ", c->src[0]->name);
    }
    out += fmt::format("  split {}: {} ({} nodes): {}{}{}\n", i, s.device->name(),
                       s.nodes.size(), ops, copies.empty() ? "" : "; copies in: ", copies);
  }
  return out;
}

}  // namespace tessera
