#include "tessera/runtime/buffer.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "tessera/core/error.h"
#include "tessera/runtime/device.h"

namespace tessera {

std::string_view buffer_usage_name(BufferUsage usage) {
  switch (usage) {
    case BufferUsage::kAny: return "any";
    case BufferUsage::kWeights: return "weights";
    case BufferUsage::kCompute: return "compute";
  }
  return "?";
}

void Buffer::place(Tensor& t, size_t offset) {
  TESSERA_CHECK(t.data == nullptr, "tensor {} is already placed", t.describe());
  if (t.view_src != nullptr) {
    TESSERA_CHECK(t.view_src->buffer == this && t.view_src->data != nullptr,
                  "view {} placed before its source", t.describe());
    t.buffer = this;
    t.data = static_cast<uint8_t*>(t.view_src->data) + t.view_offset;
    return;
  }
  const size_t align = type_.alignment();
  const size_t need = type_.alloc_size(t);
  if (offset % align != 0 || offset > size_ || need > size_ - offset) {
    fail(ErrorCategory::kInvalidArgument,
         "[buffer {}] tensor {} at offset {} needs {} bytes aligned to {}, buffer holds {}",
         type_.name(), t.describe(), offset, need, align, size_);
  }
  t.buffer = this;
  t.data = static_cast<uint8_t*>(base_) + offset;
  init_tensor(t);
}

void Buffer::init_tensor(Tensor& /*t*/) {}

void Buffer::check_range(const Tensor& t, size_t offset, size_t size, const char* what) const {
  if (t.buffer != this) {
    fail(ErrorCategory::kInvalidArgument, "[buffer {}] {} of tensor {}: it lives in {}",
         type_.name(), what, t.describe(),
         t.buffer ? std::string(t.buffer->type().name()) : std::string("no buffer"));
  }
  const size_t n = t.n_bytes();
  if (offset > n || size > n - offset) {
    fail(ErrorCategory::kInvalidArgument,
         "[buffer {}] {} of tensor {}: found bytes [{}, {}), expected within [0, {})",
         type_.name(), what, t.describe(), offset, offset + size, n);
  }
}

void Buffer::set_tensor(Tensor& t, const void* src, size_t offset, size_t size) {
  check_range(t, offset, size, "set_tensor");
  if (size == 0) return;
  write(t, src, offset, size);
}

void Buffer::get_tensor(const Tensor& t, void* dst, size_t offset, size_t size) const {
  check_range(t, offset, size, "get_tensor");
  if (size == 0) return;
  read(t, dst, offset, size);
}

bool Buffer::copy_tensor(const Tensor& /*src*/, Tensor& /*dst*/) { return false; }

void copy_tensor(const Tensor& src, Tensor& dst) {
  // Same type, shape and strides: the byte span from element 0 to the last
  // element is copied as it is (a view keeps its gaps).
  if (src.type != dst.type || !same_shape(src, dst) || src.nb != dst.nb) {
    fail(ErrorCategory::kInvalidArgument, "[copy_tensor] found {} -> {}, expected equal layouts",
         src.describe(), dst.describe());
  }
  TESSERA_CHECK(src.buffer != nullptr && dst.buffer != nullptr);
  const size_t n = src.n_bytes();
  if (n == 0) return;
  if (dst.buffer->copy_tensor(src, dst)) return;
  // is_host() promises the plain layout at .data, so one side can be used directly.
  if (src.buffer->is_host()) {
    dst.buffer->set_tensor(dst, src.data, 0, n);
  } else if (dst.buffer->is_host()) {
    src.buffer->get_tensor(src, dst.data, 0, n);
  } else {
    std::vector<uint8_t> staging(n);
    src.buffer->get_tensor(src, staging.data(), 0, n);
    dst.buffer->set_tensor(dst, staging.data(), 0, n);
  }
}

std::vector<BufferPlan> plan_buffers(std::span<const TensorPlacement> tensors) {
  std::vector<BufferPlan> plans;
  for (const TensorPlacement& p : tensors) {
    auto plan = std::find_if(plans.begin(), plans.end(),
                             [&](const BufferPlan& b) { return b.type == p.type; });
    if (plan == plans.end()) plan = plans.insert(plans.end(), BufferPlan{.type = p.type});
    const size_t align = p.type->alignment();
    plan->tensors.emplace_back(p.tensor, plan->size);
    plan->size += (p.type->alloc_size(*p.tensor) + align - 1) / align * align;
  }
  return plans;
}

void place_tensors(Buffer& buffer, const BufferPlan& plan) {
  TESSERA_CHECK(&buffer.type() == plan.type && buffer.size() >= plan.size,
                "a plan of {} bytes of {} placed in {} bytes of {}", plan.size, plan.type->name(),
                buffer.size(), buffer.type().name());
  for (const auto& [t, offset] : plan.tensors) buffer.place(*t, offset);
}

std::vector<std::unique_ptr<Buffer>> pack_tensors(std::span<const TensorPlacement> tensors,
                                                  BufferUsage usage, std::optional<uint8_t> fill) {
  std::vector<std::unique_ptr<Buffer>> buffers;
  for (const BufferPlan& plan : plan_buffers(tensors)) {
    auto buffer = plan.type->allocate(plan.size);
    buffer->set_usage(usage);
    if (fill) buffer->clear(*fill);
    place_tensors(*buffer, plan);
    buffers.push_back(std::move(buffer));
  }
  return buffers;
}

}  // namespace tessera
