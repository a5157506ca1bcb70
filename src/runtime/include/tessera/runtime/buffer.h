// BufferType and Buffer: how memory of one kind is allocated and laid out,
// and one allocation holding tensors.
//
// A buffer type may store tensors in its own layout (weights repacked for a
// kernel); then get_tensor returns exactly the bytes set_tensor received.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/core/tensor.h"

namespace tessera {

class Buffer;
class Device;

enum class BufferUsage {
  kAny,
  kWeights,  // model parameters: the scheduler runs ops next to them
  kCompute,  // intermediates planned by the graph allocator
};

std::string_view buffer_usage_name(BufferUsage usage);

class BufferType {
 public:
  virtual ~BufferType() = default;

  virtual std::string_view name() const = 0;
  virtual Device& device() const = 0;
  virtual size_t alignment() const = 0;
  virtual size_t max_size() const { return std::numeric_limits<size_t>::max(); }
  // Bytes `t` takes in a buffer of this type (may pad, e.g. quantized rows).
  virtual size_t alloc_size(const Tensor& t) const { return t.n_bytes(); }
  // Host memory: the CPU can read and write it directly at tensor.data.
  virtual bool is_host() const = 0;

  // Allocates `bytes` (0 is allowed). Throws Error(kOutOfMemory) naming the
  // device, the bytes asked and the bytes free.
  virtual std::unique_ptr<Buffer> allocate(size_t bytes) = 0;
  // A buffer of this type over `bytes` of host memory at `base` that the
  // caller provides (aligned to alignment(), e.g. a file mapped into memory),
  // read and written in this type's layout; `keep` is held as long as the
  // buffer and frees that memory. nullptr: this type's memory is not host
  // memory (a device's), and it cannot.
  virtual std::unique_ptr<Buffer> wrap(void* /*base*/, size_t /*bytes*/,
                                       std::shared_ptr<void> /*keep*/) {
    return nullptr;
  }
};

class Buffer {
 public:
  Buffer(BufferType& type, void* base, size_t size) : type_(type), base_(base), size_(size) {}
  virtual ~Buffer() = default;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  BufferType& type() const { return type_; }
  Device& device() const { return type_.device(); }
  void* base() const { return base_; }
  size_t size() const { return size_; }
  BufferUsage usage() const { return usage_; }
  void set_usage(BufferUsage usage) { usage_ = usage; }
  bool is_host() const { return type_.is_host(); }

  // Places `t` at byte `offset` of this buffer (offset aligned, fits
  // alloc_size) and lets the buffer prepare it (init_tensor). Views are
  // placed at their source's address.
  void place(Tensor& t, size_t offset);

  // Copies `size` bytes into/out of `t`, starting `offset` bytes into the
  // tensor. Checks that `t` lives here and the range lies inside it.
  void set_tensor(Tensor& t, const void* src, size_t offset, size_t size);
  void get_tensor(const Tensor& t, void* dst, size_t offset, size_t size) const;
  void set_tensor(Tensor& t, const void* src) { set_tensor(t, src, 0, t.n_bytes()); }
  void get_tensor(const Tensor& t, void* dst) const { get_tensor(t, dst, 0, t.n_bytes()); }

  // Copies src (in any buffer) into dst (in this buffer) without the host;
  // false when this buffer cannot, and the caller stages through the host.
  virtual bool copy_tensor(const Tensor& src, Tensor& dst);
  // Sets every byte of the buffer to `value`.
  virtual void clear(uint8_t value) = 0;

 protected:
  // Called by place(): e.g. zero padding bytes past n_bytes.
  virtual void init_tensor(Tensor& t);
  // Raw transfers; ranges are already checked.
  virtual void write(Tensor& t, const void* src, size_t offset, size_t size) = 0;
  virtual void read(const Tensor& t, void* dst, size_t offset, size_t size) const = 0;

 private:
  void check_range(const Tensor& t, size_t offset, size_t size, const char* what) const;

  BufferType& type_;
  void* base_;
  size_t size_;
  BufferUsage usage_ = BufferUsage::kAny;
};

// Copies src into dst across any two buffers: dst.copy_tensor when it can,
// else through host memory. Type, shape and strides must match.
void copy_tensor(const Tensor& src, Tensor& dst);

// Packs tensors into buffers: one buffer per buffer type (in order of first
// use), each tensor at the next offset aligned to its type, in the order
// given, and placed there. `fill`, when set, is written to every byte
// before the tensors are placed. Weights and KV caches are packed this way.
struct TensorPlacement {
  Tensor* tensor;
  BufferType* type;
};
std::vector<std::unique_ptr<Buffer>> pack_tensors(std::span<const TensorPlacement> tensors,
                                                  BufferUsage usage,
                                                  std::optional<uint8_t> fill = std::nullopt);

// pack_tensors in two steps, for a caller that provides the memory itself
// (BufferType::wrap): the buffers' types, sizes and tensor offsets, then
// placing a plan's tensors in a buffer of at least its size.
struct BufferPlan {
  BufferType* type = nullptr;
  size_t size = 0;
  std::vector<std::pair<Tensor*, size_t>> tensors;  // (tensor, offset), in order
};
std::vector<BufferPlan> plan_buffers(std::span<const TensorPlacement> tensors);
void place_tensors(Buffer& buffer, const BufferPlan& plan);

}  // namespace tessera
