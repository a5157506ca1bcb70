// Stream: an in-order queue of work on one device. Event: a point in a
// stream's queue that other streams or the host can wait for.
#pragma once

#include <cstddef>
#include <memory>
#include <span>

#include "tessera/core/tensor.h"

namespace tessera {

class Device;
class Graph;

class Event {
 public:
  virtual ~Event() = default;
  virtual Device& device() const = 0;
  // Blocks the host until the work recorded before this event is done.
  virtual void synchronize() = 0;
};

// A stream's handle for a list of nodes it will run many times (a replayed
// plan): a GPU backend may capture them once (CUDA graphs) and launch the
// capture after. The nodes' addresses do not change while a handle lives.
class StreamGraph {
 public:
  virtual ~StreamGraph() = default;
};

class Stream {
 public:
  virtual ~Stream() = default;

  virtual Device& device() const = 0;

  // Copies that may return before they finish (devices with caps().async);
  // the source memory must stay untouched until synchronize(). The defaults
  // copy synchronously through the tensor's buffer.
  virtual void set_tensor_async(Tensor& t, const void* src, size_t offset, size_t size);
  virtual void get_tensor_async(const Tensor& t, void* dst, size_t offset, size_t size);
  // Device-to-device copy queued on this stream (dst on this device); false
  // when not possible, and the caller copies synchronously.
  virtual bool copy_tensor_async(const Tensor& /*src*/, Tensor& /*dst*/) { return false; }

  // Waits until all queued work is done.
  virtual void synchronize() = 0;

  // Queues the computation of `nodes` in order. Every node must be
  // supported by this stream's device and its tensors allocated.
  virtual void compute(std::span<Tensor* const> nodes) = 0;
  void compute(const Graph& graph);
  // For nodes that will be computed again and again: a handle to pass to
  // compute(handle, nodes), or nullptr (the default) when the stream has
  // nothing to prepare and plain compute(nodes) is as fast.
  virtual std::unique_ptr<StreamGraph> prepare(std::span<Tensor* const> /*nodes*/) {
    return nullptr;
  }
  virtual void compute(StreamGraph& /*handle*/, std::span<Tensor* const> nodes) { compute(nodes); }

  virtual void record(Event& event) = 0;  // event completes after the work queued so far
  virtual void wait(Event& event) = 0;    // later work waits for the event
};

}  // namespace tessera
