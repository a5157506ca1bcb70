// Scheduler: splits one graph across devices by what each supports and where
// the weights live, copies tensors between devices, plans the intermediate
// memory, and runs the pieces in order (SPEC.md §1).
//
// Use: allocate(graph), then write the inputs (tensors flagged kFlagInput,
// placed in host memory), then compute(), then read the outputs.
#pragma once

#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "tessera/device.h"
#include "tessera/graph.h"
#include "tessera/graph_allocator.h"
#include "tessera/stream.h"

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
  // allocate + compute, for graphs whose inputs are already set.
  void run(Graph& graph);

  struct Split {
    Device* device;
    std::vector<Tensor*> nodes;   // in order
    std::vector<Tensor*> copies;  // input copies made at the split's start (src[0] = original)
  };
  const std::vector<Split>& splits() const { return splits_; }
  Device* device_of(const Tensor* t) const;
  const GraphAllocator::Stats& memory_stats() const { return stats_; }
  // One line per split: device, node count, ops, copied inputs.
  std::string describe() const;

 private:
  void assign(Graph& graph);
  void split(Graph& graph);
  void compute_splits();
  bool can_read(const Device& d, const Tensor& t) const;
  BufferType& compute_type(const Tensor& t) const;
  Stream& stream_for(Device& d);

  std::vector<Device*> devices_;
  std::unordered_map<const Tensor*, Device*> assigned_;
  std::unordered_map<const Tensor*, Device*> pinned_;
  std::vector<Split> splits_;
  std::unordered_map<Device*, std::unique_ptr<Stream>> streams_;
  std::unordered_map<Device*, std::unique_ptr<Event>> events_;       // after each split
  std::unordered_map<Device*, std::unique_ptr<Event>> copy_events_;  // after async copies
  GraphAllocator allocator_;
  GraphAllocator::Stats stats_;
  Graph* graph_ = nullptr;
};

}  // namespace tessera
