// Scheduler: splits one graph across devices by what each supports and where
// the weights live, copies tensors between devices, plans the intermediate
// memory, and runs the pieces in order (docs/runtime.md, "Scheduler").
//
// Use: allocate(graph), then write the inputs (tensors flagged kFlagInput,
// placed in host memory), then compute(), then read the outputs. Or, for a
// graph run many times (one per shape in the engine): p = plan(graph) once,
// then for each run place(*p), write the inputs, compute(*p). Plans share the
// compute buffers; place() moves a plan made before a buffer grew into the
// current ones, so it must come before the inputs are written.
#pragma once

#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "tessera/core/graph.h"
#include "tessera/runtime/device.h"
#include "tessera/runtime/graph_allocator.h"
#include "tessera/runtime/stream.h"

namespace tessera {

class Scheduler {
 public:
  // Devices in priority order (lower index preferred); the last must be a CPU.
  explicit Scheduler(std::vector<Device*> devices);
  ~Scheduler();
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // Pins a node of the next graph to a device before allocate(); never overridden.
  void pin(Tensor* node, Device& device);

  // Assigns every node to a device, splits the graph into runs per device,
  // inserts copies where a device cannot read a tensor where it lives, and
  // gives intermediates memory. Throws Error(kUnsupported) naming the op and
  // its types when no device supports a node. The graph must outlive compute().
  void allocate(Graph& graph);
  // Runs the splits in order, copying inputs between devices, and waits.
  void compute();

  struct Split {
    Device* device;
    std::vector<Tensor*> nodes;   // in order
    std::vector<Tensor*> copies;  // input copies made at the split's start (src[0] = original)
    // Resolved when the plan is made, so that replaying it looks nothing up.
    Stream* stream = nullptr;
    Event* event = nullptr;                // recorded after the split (devices with events)
    Event* copy_event = nullptr;           // recorded after its async copies
    std::vector<Stream*> copy_from_stream; // stream of each copy's source device (nullptr: none)
    // Per copy, the event of the last earlier split on the source's device
    // when both sides can copy asynchronously, else nullptr (copied synchronously).
    std::vector<Event*> copy_producer;
    std::vector<uint8_t> copied_async;     // per copy, during compute: queued on the stream
    std::unique_ptr<StreamGraph> prepared;  // the stream's handle for these nodes
  };

  // A graph assigned, split and allocated: replayed by compute(Plan&) as
  // often as needed, with no allocation or lookup. The graph must outlive it.
  struct Plan {
    Graph* graph = nullptr;
    std::vector<Split> splits;
    std::vector<Tensor*> order;  // copies and nodes in execution order
    std::vector<GraphAllocator::Placement> placements;
    uint64_t generation = 0;  // of the allocator's buffers when placed
    GraphAllocator::Stats stats;
  };
  std::unique_ptr<Plan> plan(Graph& graph);
  // Gives the plan's tensors (inputs included) their addresses in the current
  // compute buffers; nothing to do unless a later plan grew them.
  void place(Plan& plan);
  void compute(Plan& plan);  // place()s first when needed
  // Plans made so far (allocate() counts as one): for tests of plan reuse.
  uint64_t plans_made() const { return plans_made_; }
  // Headroom when a compute buffer grows (1.0: exactly the peak).
  void set_growth(double factor) { allocator_.set_growth(factor); }

  // Of the graph of the last allocate() (which must have come first).
  const std::vector<Split>& splits() const { return current().splits; }
  const GraphAllocator::Stats& memory_stats() const { return current().stats; }
  // One line per split: device, node count, ops, copied inputs.
  std::string describe() const { return describe(current()); }
  // The device a tensor of the most recently planned graph was given.
  Device* device_of(const Tensor* t) const;
  std::string describe(const Plan& plan) const;

 private:
  void assign(Graph& graph);
  void split(Graph& graph, Plan& plan);
  void resolve(Plan& plan);
  const Plan& current() const;
  void compute_splits(Plan& plan);
  bool can_read(const Device& d, const Tensor& t) const;
  BufferType& compute_type(const Tensor& t) const;
  Stream& stream_for(Device& d);
  Event& event_for(std::unordered_map<Device*, std::unique_ptr<Event>>& events, Device& d);

  std::vector<Device*> devices_;
  std::unordered_map<const Tensor*, Device*> assigned_;  // while planning
  std::unordered_map<const Tensor*, Device*> pinned_;
  std::unordered_map<Device*, std::unique_ptr<Stream>> streams_;
  std::unordered_map<Device*, std::unique_ptr<Event>> events_;       // after each split
  std::unordered_map<Device*, std::unique_ptr<Event>> copy_events_;  // after async copies
  GraphAllocator allocator_;
  std::unique_ptr<Plan> current_;  // of allocate()
  uint64_t plans_made_ = 0;
  bool debug_ = false;
};

}  // namespace tessera
