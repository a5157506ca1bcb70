#include "cuda/buffers.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "cuda/common.h"
#include "cuda/cuda_backend.h"
#include "cuda/repack.h"
#include "cuda/vmm.h"
#include "tessera/core/error.h"

namespace tessera::cuda {
namespace {

class CudaBuffer final : public Buffer {
 public:
  CudaBuffer(CudaBufferType& type, CudaDevice& device, void* base, size_t size)
      : Buffer(type, base, size), dev_(device), device_(device.index()), split_(type.splits()) {}
  ~CudaBuffer() override {
    DeviceScope scope(device_, std::nothrow);
    cudaFree(base());
  }

  int cuda_device() const { return device_; }
  bool splits() const { return split_; }

  bool copy_tensor(const Tensor& src, Tensor& dst) override {
    if (is_split(dst) || is_view_of_split(dst) || src.buffer == nullptr) return false;
    const size_t n = src.n_bytes();
    if (src.buffer->is_host()) {
      dev_.copy(dst.data, src.data, n, cudaMemcpyHostToDevice);
      return true;
    }
    const int from = cuda_device_of(src);
    if (from < 0 || is_split(src) || is_view_of_split(src)) return false;
    dev_.copy_from_peer(dst.data, src.data, from, n);
    return true;
  }

  void clear(uint8_t value) override { dev_.fill(base(), value, size()); }

 protected:
  void init_tensor(Tensor& t) override {
    // Quantized tensors' row padding (alloc_size) starts zeroed.
    if (t.view_src != nullptr) return;
    const size_t padded = type().alloc_size(t), n = t.n_bytes();
    if (padded > n) dev_.fill(static_cast<uint8_t*>(t.data) + n, 0, padded - n);
  }

  void write(Tensor& t, const void* src, size_t offset, size_t size) override {
    if (split_ && is_view_of_split(t)) {
      fail(ErrorCategory::kUnsupported, "[{}] {} is a view of split weights: read or write the weights themselves", type().name(), t.describe());
    }
    if (!split_ || !is_split(t)) {
      dev_.copy(static_cast<uint8_t*>(t.data) + offset, src, size, cudaMemcpyHostToDevice);
      return;
    }
    const BlockSplit s = block_split(t.type, t.n_bytes() / dtype_info(t.type).block_bytes);
    // Whole blocks covering the range; partial blocks at its ends are read first.
    const size_t first = offset / s.block_bytes;
    const size_t last = (offset + size + s.block_bytes - 1) / s.block_bytes;
    std::vector<uint8_t> blocks((last - first) * s.block_bytes);
    const size_t lead = offset - first * s.block_bytes;
    if (lead != 0 || (offset + size) % s.block_bytes != 0) {
      read_blocks(t, s, first, last - first, blocks.data());
    }
    std::memcpy(blocks.data() + lead, src, size);
    write_blocks(t, s, first, last - first, blocks.data());
  }

  void read(const Tensor& t, void* dst, size_t offset, size_t size) const override {
    if (split_ && is_view_of_split(t)) {
      fail(ErrorCategory::kUnsupported, "[{}] {} is a view of split weights: read or write the weights themselves", type().name(), t.describe());
    }
    if (!split_ || !is_split(t)) {
      dev_.copy(dst, static_cast<const uint8_t*>(t.data) + offset, size, cudaMemcpyDeviceToHost);
      return;
    }
    const BlockSplit s = block_split(t.type, t.n_bytes() / dtype_info(t.type).block_bytes);
    const size_t first = offset / s.block_bytes;
    const size_t last = (offset + size + s.block_bytes - 1) / s.block_bytes;
    std::vector<uint8_t> blocks((last - first) * s.block_bytes);
    read_blocks(t, s, first, last - first, blocks.data());
    std::memcpy(dst, blocks.data() + (offset - first * s.block_bytes), size);
  }

 private:
  void write_blocks(const Tensor& t, const BlockSplit& s, size_t first, size_t n,
                    const uint8_t* blocks) const {
    std::vector<uint8_t> quants(n * s.quant_bytes), scales(n * 2);
    split_range(s, blocks, n, quants.data(), scales.data());
    auto* base = static_cast<uint8_t*>(t.data);
    dev_.copy(base + first * s.quant_bytes, quants.data(), quants.size(), cudaMemcpyHostToDevice);
    dev_.copy(base + s.scales_offset() + 2 * first, scales.data(), scales.size(),
              cudaMemcpyHostToDevice);
  }

  void read_blocks(const Tensor& t, const BlockSplit& s, size_t first, size_t n,
                   uint8_t* blocks) const {
    std::vector<uint8_t> quants(n * s.quant_bytes), scales(n * 2);
    const auto* base = static_cast<const uint8_t*>(t.data);
    dev_.copy(quants.data(), base + first * s.quant_bytes, quants.size(), cudaMemcpyDeviceToHost);
    dev_.copy(scales.data(), base + s.scales_offset() + 2 * first, scales.size(),
              cudaMemcpyDeviceToHost);
    join_range(s, quants.data(), scales.data(), n, blocks);
  }

  CudaDevice& dev_;
  int device_;
  bool split_;
};

class CudaHostBuffer final : public Buffer {
 public:
  CudaHostBuffer(BufferType& type, void* base, size_t size) : Buffer(type, base, size) {}
  ~CudaHostBuffer() override { cudaFreeHost(base()); }  // no device needed: never throws

  bool copy_tensor(const Tensor& src, Tensor& dst) override {
    if (src.buffer == nullptr || !src.buffer->is_host()) return false;
    std::memmove(dst.data, src.data, src.n_bytes());
    return true;
  }
  void clear(uint8_t value) override { std::memset(base(), value, size()); }

 protected:
  void write(Tensor& t, const void* src, size_t offset, size_t size) override {
    std::memcpy(static_cast<uint8_t*>(t.data) + offset, src, size);
  }
  void read(const Tensor& t, void* dst, size_t offset, size_t size) const override {
    std::memcpy(dst, static_cast<const uint8_t*>(t.data) + offset, size);
  }
};

}  // namespace

// ---- CudaBufferType ------------------------------------------------------------------------

CudaBufferType::CudaBufferType(CudaDevice& device, std::string name, bool split)
    : device_(device), name_(std::move(name)), split_(split) {}

Device& CudaBufferType::device() const { return device_; }

size_t CudaBufferType::max_size() const { return device_.total_memory(); }

size_t CudaBufferType::alloc_size(const Tensor& t) const {
  size_t size = t.n_bytes();
  const DTypeInfo& info = dtype_info(t.type);
  if (info.quantized && t.view_src == nullptr && t.ne[0] % kRowPadding != 0) {
    size += *row_bytes(t.type, kRowPadding - t.ne[0] % kRowPadding);
  }
  return size;
}

std::unique_ptr<Buffer> CudaBufferType::allocate(size_t bytes) {
  const int dev = device_.index();
  DeviceScope scope(dev);
  void* p = nullptr;
  const cudaError_t err = cudaMalloc(&p, std::max<size_t>(bytes, 1));
  if (err != cudaSuccess) {
    cudaGetLastError();
    fail(ErrorCategory::kOutOfMemory, "[{}] allocation of {} bytes failed ({}), {} bytes free",
         device_.name(), bytes, cudaGetErrorString(err), device_free_bytes(dev));
  }
  return std::make_unique<CudaBuffer>(*this, device_, p, bytes);
}

// ---- CudaHostBufferType ----------------------------------------------------------------------

CudaHostBufferType::CudaHostBufferType(CudaDevice& device, std::string name)
    : device_(device), name_(std::move(name)) {}

Device& CudaHostBufferType::device() const { return device_; }

std::unique_ptr<Buffer> CudaHostBufferType::allocate(size_t bytes) {
  DeviceScope scope(device_.index());
  void* p = nullptr;
  const cudaError_t err = cudaMallocHost(&p, std::max<size_t>(bytes, 1));
  if (err != cudaSuccess) {
    cudaGetLastError();
    fail(ErrorCategory::kOutOfMemory, "[{}] pinned host allocation of {} bytes failed ({})",
         name_, bytes, cudaGetErrorString(err));
  }
  return std::make_unique<CudaHostBuffer>(*this, p, bytes);
}

// ---- tensor queries --------------------------------------------------------------------------

int cuda_device_of(const Tensor& t) {
  if (t.buffer == nullptr) return -1;
  const auto* b = dynamic_cast<const CudaBuffer*>(t.buffer);
  return b != nullptr ? b->cuda_device() : -1;
}

bool is_split(const Tensor& t) {
  if (t.view_src != nullptr || t.buffer == nullptr || !splits_blocks(t.type)) return false;
  const auto* b = dynamic_cast<const CudaBuffer*>(t.buffer);
  return b != nullptr && b->splits();
}

bool is_view_of_split(const Tensor& t) {
  const Tensor* root = &t;
  while (root->view_src != nullptr) root = root->view_src;
  return root != &t && is_split(*root);
}

}  // namespace tessera::cuda
