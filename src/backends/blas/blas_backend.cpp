#include "blas/blas_backend.h"

#include <cblas.h>

#include <cstring>

#include "tessera/core/error.h"
#include "tessera/core/half.h"
#include "tessera/runtime/host_memory.h"

extern "C" char* openblas_get_config(void);
extern "C" void openblas_set_num_threads(int num_threads);

namespace tessera::blas {
namespace {

class BlasBuffer final : public Buffer {
 public:
  BlasBuffer(BufferType& type, size_t size)
      : Buffer(type, host::host_allocate(size, 64, type.device().name()), size) {}
  ~BlasBuffer() override { host::host_release(base(), size()); }

  void clear(uint8_t value) override { std::memset(base(), value, size()); }

 protected:
  void write(Tensor& t, const void* src, size_t offset, size_t size) override {
    if (t.type != DType::kF16) {
      std::memcpy(static_cast<uint8_t*>(t.data) + offset, src, size);
      return;
    }
    check_whole_elements(t, offset, size);
    const auto* in = static_cast<const uint16_t*>(src);
    float* out = static_cast<float*>(t.data) + offset / 2;
    fp16_to_fp32_row(in, out, static_cast<int64_t>(size / 2));
  }

  void read(const Tensor& t, void* dst, size_t offset, size_t size) const override {
    if (t.type != DType::kF16) {
      std::memcpy(dst, static_cast<const uint8_t*>(t.data) + offset, size);
      return;
    }
    check_whole_elements(t, offset, size);
    const float* in = static_cast<const float*>(t.data) + offset / 2;
    fp32_to_fp16_row(in, static_cast<uint16_t*>(dst), static_cast<int64_t>(size / 2));
  }

 private:
  static void check_whole_elements(const Tensor& t, size_t offset, size_t size) {
    if (offset % 2 != 0 || size % 2 != 0) {
      fail(ErrorCategory::kInvalidArgument,
           "[buffer BLAS] tensor {}: bytes [{}, {}) split an f16 element", t.describe(), offset,
           offset + size);
    }
    if (!t.is_contiguous()) {
      fail(ErrorCategory::kUnsupported, "[buffer BLAS] f16 view {} is not contiguous",
           t.describe());
    }
  }
};

class BlasStream final : public Stream {
 public:
  explicit BlasStream(BlasDevice& device) : device_(device) {}
  Device& device() const override { return device_; }
  void synchronize() override {}
  void record(Event&) override {}
  void wait(Event&) override {}

  void compute(std::span<Tensor* const> nodes) override {
    for (Tensor* node : nodes) {
      if (node->op == Op::kNone || is_view_op(node->op)) continue;
      if (!device_.supports_op(*node)) {
        fail(ErrorCategory::kUnsupported, "[BLAS0] cannot compute {} on {}", op_name(node->op),
             node->describe());
      }
      mul_mat(*node);
    }
  }

 private:
  // One sgemm per (i2, i3) batch: D (M x N) = W^T (M x K) * X (K x N), column-major.
  void mul_mat(Tensor& node) {
    const Tensor& w = *node.src[0];
    const Tensor& x = *node.src[1];
    const int64_t k = w.ne[0], m = w.ne[1], n = x.ne[1];
    const int64_t r2 = x.ne[2] / w.ne[2], r3 = x.ne[3] / w.ne[3];
    for (int64_t i3 = 0; i3 < x.ne[3]; ++i3) {
      for (int64_t i2 = 0; i2 < x.ne[2]; ++i2) {
        const float* wp = weight_matrix(w, i2 / r2, i3 / r3);
        const int64_t ldw = k;  // supports_op: weight rows are contiguous
        const auto* xp = reinterpret_cast<const float*>(static_cast<const uint8_t*>(x.data) +
                                                        i2 * x.nb[2] + i3 * x.nb[3]);
        auto* dp = reinterpret_cast<float*>(static_cast<uint8_t*>(node.data) + i2 * node.nb[2] +
                                            i3 * node.nb[3]);
        cblas_sgemm(CblasColMajor, CblasTrans, CblasNoTrans, static_cast<int>(m),
                    static_cast<int>(n), static_cast<int>(k), 1.0f, wp, static_cast<int>(ldw),
                    xp, static_cast<int>(x.nb[1] / sizeof(float)), 0.0f, dp,
                    static_cast<int>(node.nb[1] / sizeof(float)));
      }
    }
  }

  // The (w2, w3) weight matrix as contiguous-row f32: in place for f32 and
  // BLAS-stored f16, else f16 rows converted into scratch (host-resident weights).
  const float* weight_matrix(const Tensor& w, int64_t w2, int64_t w3) {
    if (stored_as_f32(w)) {
      return static_cast<const float*>(w.data) + (w2 * w.ne[1] + w3 * w.ne[1] * w.ne[2]) * w.ne[0];
    }
    const uint8_t* base = static_cast<const uint8_t*>(w.data) + w2 * w.nb[2] + w3 * w.nb[3];
    if (w.type == DType::kF32) return reinterpret_cast<const float*>(base);
    scratch_.resize(static_cast<size_t>(w.ne[0] * w.ne[1]));
    for (int64_t i = 0; i < w.ne[1]; ++i) {
      fp16_to_fp32_row(reinterpret_cast<const uint16_t*>(base + i * w.nb[1]),
                       scratch_.data() + i * w.ne[0], w.ne[0]);
    }
    return scratch_.data();
  }

  BlasDevice& device_;
  std::vector<float> scratch_;
};

}  // namespace

bool stored_as_f32(const Tensor& t) {
  return t.type == DType::kF16 && t.buffer != nullptr &&
         dynamic_cast<const BlasBufferType*>(&t.buffer->type()) != nullptr;
}

size_t BlasBufferType::alloc_size(const Tensor& t) const {
  return t.type == DType::kF16 ? t.n_bytes() * 2 : t.n_bytes();
}

std::unique_ptr<Buffer> BlasBufferType::allocate(size_t bytes) {
  return std::make_unique<BlasBuffer>(*this, bytes);
}

BlasDevice::BlasDevice(BlasBackend& backend)
    : backend_(backend),
      description_(fmt::format("OpenBLAS ({})", openblas_get_config())),
      host_type_(*this, "BLAS_Host"),
      weights_type_(*this) {}

MemoryInfo BlasDevice::memory() const {
  return {host::host_free_bytes(), host::host_total_bytes()};
}

Backend& BlasDevice::backend() const { return backend_; }

std::unique_ptr<Stream> BlasDevice::make_stream() { return std::make_unique<BlasStream>(*this); }

bool BlasDevice::supports_buffer_type(const BufferType& type) const {
  return type.is_host() || &type == &weights_type_;
}

bool BlasDevice::supports_op(const Tensor& node) const {
  if (node.op == Op::kNone || is_view_op(node.op)) return true;
  if (node.op != Op::kMulMat) return false;
  const Tensor& w = *node.src[0];
  const Tensor& x = *node.src[1];
  // sgemm wants unit stride along K and whole rows; dims fit in int.
  const bool w_rows = (w.type == DType::kF32 || w.type == DType::kF16) &&
                      w.nb[0] == dtype_info(w.type).block_bytes &&
                      w.nb[1] == w.nb[0] * static_cast<size_t>(w.ne[0]) &&
                      w.nb[2] == w.nb[1] * static_cast<size_t>(w.ne[1]) &&
                      w.nb[3] == w.nb[2] * static_cast<size_t>(w.ne[2]);
  const bool x_rows = x.type == DType::kF32 && x.nb[0] == sizeof(float) &&
                      x.nb[1] % sizeof(float) == 0 && x.nb[1] >= x.ne[0] * sizeof(float);
  const bool d_rows = node.type == DType::kF32 && node.nb[0] == sizeof(float) &&
                      node.nb[1] % sizeof(float) == 0 &&
                      node.nb[1] >= static_cast<size_t>(node.ne[0]) * sizeof(float);
  // A view into converted f16 storage would point at the wrong bytes.
  const bool w_placed = !(stored_as_f32(w) && w.view_src != nullptr);
  const bool shape = node.ne[0] == w.ne[1] && node.ne[1] == x.ne[1] && node.ne[2] == x.ne[2] &&
                     node.ne[3] == x.ne[3];
  const int64_t kMaxInt = 0x7fffffff;
  return w_rows && x_rows && d_rows && w_placed && shape && w.ne[0] == x.ne[0] &&
         x.ne[2] % w.ne[2] == 0 &&
         x.ne[3] % w.ne[3] == 0 && w.ne[0] <= kMaxInt && w.ne[1] <= kMaxInt &&
         x.ne[1] <= kMaxInt;
}

bool BlasDevice::offload_op(const Tensor& node) const {
  if (node.op == Op::kMulMat) {
    const Tensor& w = *node.src[0];
    if (w.type == DType::kF16 && !stored_as_f32(w)) return false;
    constexpr double kMinMacs = double(1 << 24);
    if (double(w.ne[0]) * double(w.ne[1]) * double(node.ne[1]) * double(node.ne[2] * node.ne[3]) <
        kMinMacs) {
      return false;
    }
  }
  return Device::offload_op(node);
}

BlasBackend::BlasBackend() : device_(*this) {}

void* BlasBackend::proc_address(std::string_view name) {
  if (name == kSetThreadsProc) {
    static constexpr SetThreadsFn fn = [](Device&, int n) { openblas_set_num_threads(n); };
    return reinterpret_cast<void*>(fn);
  }
  return nullptr;
}

}  // namespace tessera::blas
