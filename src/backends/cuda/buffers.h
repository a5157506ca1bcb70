// CUDA buffer types: device memory (intermediates, and weights, with Q4_0 /
// Q8_0 split into quants and scales on upload: repack.h) and pinned host
// memory (fast, asynchronous transfers).
#pragma once

#include <memory>
#include <string>

#include "tessera/runtime/buffer.h"

namespace tessera::cuda {

class CudaDevice;

// ggml's MATRIX_ROW_PADDING: quantized tensors get this many elements of
// extra row bytes at their end, zeroed, so kernels may read whole tiles.
inline constexpr int64_t kRowPadding = 512;

class CudaBufferType final : public BufferType {
 public:
  static constexpr size_t kAlignment = 128;

  // `split`: Q4_0 / Q8_0 tensors stored split (the weights buffer type).
  CudaBufferType(CudaDevice& device, std::string name, bool split);
  std::string_view name() const override { return name_; }
  Device& device() const override;
  size_t alignment() const override { return kAlignment; }
  size_t max_size() const override;
  size_t alloc_size(const Tensor& t) const override;
  // Device memory is not host memory; split tensors are not even in GGUF layout.
  bool is_host() const override { return false; }
  std::unique_ptr<Buffer> allocate(size_t bytes) override;
  bool splits() const { return split_; }

 private:
  CudaDevice& device_;
  std::string name_;
  bool split_;
};

// Pinned (page-locked) host memory: the CPU reads it in place, and copies
// between it and the GPU run asynchronously at full speed.
class CudaHostBufferType final : public BufferType {
 public:
  static constexpr size_t kAlignment = 64;

  CudaHostBufferType(CudaDevice& device, std::string name);
  std::string_view name() const override { return name_; }
  Device& device() const override;
  size_t alignment() const override { return kAlignment; }
  bool is_host() const override { return true; }
  std::unique_ptr<Buffer> allocate(size_t bytes) override;

 private:
  CudaDevice& device_;
  std::string name_;
};

// The device (index) whose memory `t` lives in; -1 when t is not in a CUDA
// device buffer.
int cuda_device_of(const Tensor& t);
// True when t itself (not a view) is stored split.
bool is_split(const Tensor& t);
// True when t is a view of a split tensor: its data pointer is meaningless.
bool is_view_of_split(const Tensor& t);

}  // namespace tessera::cuda
