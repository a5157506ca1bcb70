// Plain host memory as a buffer type: what the CPU device computes on, and
// what other backends (BLAS) read directly.
#pragma once

#include <string>

#include "tessera/runtime/buffer.h"

namespace tessera::host {

class HostBufferType final : public BufferType {
 public:
  static constexpr size_t kAlignment = 64;

  HostBufferType(Device& device, std::string name) : device_(device), name_(std::move(name)) {}
  std::string_view name() const override { return name_; }
  Device& device() const override { return device_; }
  size_t alignment() const override { return kAlignment; }
  bool is_host() const override { return true; }
  std::unique_ptr<Buffer> allocate(size_t bytes) override;
  std::unique_ptr<Buffer> wrap(void* base, size_t bytes, std::shared_ptr<void> keep) override;

 private:
  Device& device_;
  std::string name_;
};

// Host memory owned by the buffer (or held by `keep_`, wrap()); tensors are
// read and written in place.
class HostBuffer final : public Buffer {
 public:
  HostBuffer(BufferType& type, size_t size);
  HostBuffer(BufferType& type, void* base, size_t size, std::shared_ptr<void> keep);
  ~HostBuffer() override;

  bool copy_tensor(const Tensor& src, Tensor& dst) override;
  void clear(uint8_t value) override;

 protected:
  void write(Tensor& t, const void* src, size_t offset, size_t size) override;
  void read(const Tensor& t, void* dst, size_t offset, size_t size) const override;

 private:
  std::shared_ptr<void> keep_;  // wrapped memory; null: host_allocate's
};

}  // namespace tessera::host
