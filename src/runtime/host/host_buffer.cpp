#include "tessera/runtime/host_buffer.h"

#include <cstdint>
#include <cstring>

#include "tessera/core/error.h"

#include "tessera/runtime/device.h"
#include "tessera/runtime/host_memory.h"

namespace tessera::host {

std::unique_ptr<Buffer> HostBufferType::allocate(size_t bytes) {
  return std::make_unique<HostBuffer>(*this, bytes);
}

std::unique_ptr<Buffer> HostBufferType::wrap(void* base, size_t bytes, std::shared_ptr<void> keep) {
  return std::make_unique<HostBuffer>(*this, base, bytes, std::move(keep));
}

HostBuffer::HostBuffer(BufferType& type, size_t size)
    : Buffer(type, host_allocate(size, HostBufferType::kAlignment, type.device().name()), size) {}

HostBuffer::HostBuffer(BufferType& type, void* base, size_t size, std::shared_ptr<void> keep)
    : Buffer(type, base, size), keep_(std::move(keep)) {
  TESSERA_CHECK(keep_ != nullptr && reinterpret_cast<uintptr_t>(base) % HostBufferType::kAlignment == 0,
                "wrapped host memory must be held and aligned to {}", HostBufferType::kAlignment);
}

HostBuffer::~HostBuffer() {
  if (keep_ == nullptr) host_release(base(), size());
}

bool HostBuffer::copy_tensor(const Tensor& src, Tensor& dst) {
  if (src.buffer == nullptr || !src.buffer->is_host()) return false;
  std::memcpy(dst.data, src.data, src.n_bytes());
  return true;
}

void HostBuffer::clear(uint8_t value) { std::memset(base(), value, size()); }

void HostBuffer::write(Tensor& t, const void* src, size_t offset, size_t size) {
  std::memcpy(static_cast<uint8_t*>(t.data) + offset, src, size);
}

void HostBuffer::read(const Tensor& t, void* dst, size_t offset, size_t size) const {
  std::memcpy(dst, static_cast<const uint8_t*>(t.data) + offset, size);
}

}  // namespace tessera::host
