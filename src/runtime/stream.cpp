#include "tessera/runtime/stream.h"

#include "tessera/core/error.h"
#include "tessera/core/graph.h"
#include "tessera/runtime/buffer.h"

namespace tessera {

void Stream::set_tensor_async(Tensor& t, const void* src, size_t offset, size_t size) {
  TESSERA_CHECK(t.buffer != nullptr, "tensor {} has no buffer", t.describe());
  t.buffer->set_tensor(t, src, offset, size);
}

void Stream::get_tensor_async(const Tensor& t, void* dst, size_t offset, size_t size) {
  TESSERA_CHECK(t.buffer != nullptr, "tensor {} has no buffer", t.describe());
  t.buffer->get_tensor(t, dst, offset, size);
}

void Stream::compute(const Graph& graph) { compute(graph.nodes()); }

}  // namespace tessera
