// The BLAS backend: MUL_MAT on OpenBLAS's sgemm, for large batches. It reads
// host buffers directly and has its own weights buffer type that stores F16
// weights converted to F32 once, on upload.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "tessera/runtime/buffer.h"
#include "tessera/runtime/device.h"
#include "tessera/runtime/host_buffer.h"
#include "tessera/runtime/stream.h"

namespace tessera::blas {

class BlasBackend;

// Weights for sgemm: F16 tensors are kept as F32 (twice the bytes); get_tensor
// converts back, which is exact. Not host memory: its layout differs.
class BlasBufferType final : public BufferType {
 public:
  explicit BlasBufferType(Device& device) : device_(device) {}
  std::string_view name() const override { return "BLAS"; }
  Device& device() const override { return device_; }
  size_t alignment() const override { return 64; }
  size_t alloc_size(const Tensor& t) const override;
  bool is_host() const override { return false; }
  std::unique_ptr<Buffer> allocate(size_t bytes) override;

 private:
  Device& device_;
};

class BlasDevice final : public Device {
 public:
  explicit BlasDevice(BlasBackend& backend);

  std::string_view name() const override { return "BLAS0"; }
  std::string_view description() const override { return description_; }
  DeviceType type() const override { return DeviceType::kAccelerator; }
  MemoryInfo memory() const override;
  DeviceCaps caps() const override { return {}; }
  Backend& backend() const override;

  std::unique_ptr<Stream> make_stream() override;
  // Intermediates live in plain host memory, which the CPU reads too.
  BufferType& buffer_type() override { return host_type_; }
  BufferType& weights_buffer_type() override { return weights_type_; }
  bool supports_op(const Tensor& node) const override;
  bool supports_buffer_type(const BufferType& type) const override;
  // Large batches of large matrices (>= 2^24 multiply-adds per call), except
  // F16 weights read from host memory. Small matrices cost more in the call
  // and OpenBLAS's thread hand-off than they save (stories260K's 64x172
  // matrices at a 256-token prompt: 0.06x the CPU's speed); F16 weights
  // converted on every call made sgemm slower than the CPU's own F16 kernels
  // (0.85x on a 100M-parameter model's 502-token prompt). Zen 3, 2 threads.
  bool offload_op(const Tensor& node) const override;

 private:
  BlasBackend& backend_;
  std::string description_;
  host::HostBufferType host_type_;
  BlasBufferType weights_type_;
};

class BlasBackend final : public Backend {
 public:
  BlasBackend();
  std::string_view name() const override { return "BLAS"; }
  size_t device_count() const override { return 1; }
  // kSetThreadsProc: OpenBLAS's own thread count, set to the CPU pool's so
  // the two do not fight over the cores.
  void* proc_address(std::string_view name) override;

 protected:
  Device& device_at(size_t) override { return device_; }

 private:
  BlasDevice device_;
};

using SetThreadsFn = void (*)(Device& device, int n_threads);
inline constexpr const char* kSetThreadsProc = "blas_set_threads";

// True when `t` lives in a BLAS weights buffer as F32 although typed F16.
bool stored_as_f32(const Tensor& t);

}  // namespace tessera::blas
