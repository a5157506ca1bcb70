// Device: one piece of hardware. Backend: one plug-in that lists devices.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/core/tensor.h"

namespace tessera {

class Backend;
class BufferType;
class Event;
class Stream;

enum class DeviceType { kCpu, kGpu, kAccelerator };
std::string_view device_type_name(DeviceType type);  // "CPU", "GPU", "ACCEL"

struct DeviceCaps {
  bool async = false;                 // streams run copies and compute asynchronously
  bool host_buffer = false;           // offers a pinned host buffer type
  bool buffer_from_host_ptr = false;  // can wrap caller memory as a buffer
  bool events = false;                // make_event() works
};

struct MemoryInfo {
  size_t free = 0;
  size_t total = 0;
};

class Device {
 public:
  virtual ~Device() = default;

  virtual std::string_view name() const = 0;         // "CPU0", "CUDA1"
  virtual std::string_view description() const = 0;  // the chip's own name
  virtual DeviceType type() const = 0;
  virtual MemoryInfo memory() const = 0;  // live figures
  virtual DeviceCaps caps() const = 0;
  virtual Backend& backend() const = 0;
  // What a user should know about this device before relying on it, one
  // sentence each (a library it could not open, and what then runs
  // elsewhere). `tessera devices` lists them; loading a model onto the
  // device prints them as warnings. Default: none.
  virtual std::vector<std::string> notes() const { return {}; }

  virtual std::unique_ptr<Stream> make_stream() = 0;
  virtual BufferType& buffer_type() = 0;  // default: device memory, for intermediates
  // Where model weights go for this device's kernels to read them fastest
  // (may repack or convert them on upload). Default: buffer_type().
  virtual BufferType& weights_buffer_type() { return buffer_type(); }
  // The buffer type for one weight: weights_buffer_type() unless this device
  // gains nothing from it for that tensor's type, in which case a type other
  // devices can also read (host memory on a CPU) is better. Default:
  // weights_buffer_type().
  virtual BufferType& weights_buffer_type(const Tensor& /*weight*/) { return weights_buffer_type(); }
  virtual BufferType* host_buffer_type() { return nullptr; }  // pinned host memory, if any

  // Exact: true only if this device computes `node` correctly (op, types,
  // shapes, params). The scheduler and the tests rely on it.
  virtual bool supports_op(const Tensor& node) const = 0;
  // Can ops on this device read tensors in buffers of `type`?
  virtual bool supports_buffer_type(const BufferType& type) const = 0;
  // Worth running `node` here although its weights live in host memory?
  // Default: batch (ne[1] of the activations) >= offload_min_batch(), not GET_ROWS.
  virtual bool offload_op(const Tensor& node) const;

  // Throws Error(kUnsupported) when caps().events is false.
  virtual std::unique_ptr<Event> make_event();
};

// Extension any backend may offer through proc_address: why it has no
// devices (no driver, no GPU), or "" when it has some.
using NoDevicesReasonFn = const char* (*)(Backend& backend);
inline constexpr const char* kNoDevicesReasonProc = "no_devices_reason";
// The backend's reason, or "" when it offers none.
std::string no_devices_reason(Backend& backend);

// The batch from which offload_op says yes: TESSERA_OFFLOAD_MIN_BATCH, else 32.
int64_t offload_min_batch();

class Backend {
 public:
  virtual ~Backend() = default;

  virtual std::string_view name() const = 0;  // "CPU", "BLAS", "CUDA"
  virtual size_t device_count() const = 0;
  // Throws Error(kInvalidArgument) when i >= device_count().
  Device& device(size_t i);
  // Optional backend-specific extension functions by name; nullptr if absent.
  virtual void* proc_address(std::string_view /*name*/) { return nullptr; }

 protected:
  virtual Device& device_at(size_t i) = 0;
};

}  // namespace tessera
