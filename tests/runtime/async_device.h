// A test device that really is asynchronous: its stream runs queued work on
// a worker thread, its buffers are not host memory (the CPU cannot read them
// in place), and it has events. By itself it computes SCALE only; given a
// device to borrow kernels from (the CPU), it runs every op that device
// supports, on its worker thread over its own memory: a fake GPU, for models
// split across devices. The scheduler's async copy-and-event path is
// exercised through it, as a GPU would.
#pragma once

#include <condition_variable>
#include <cstring>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

#include "tessera/core/error.h"
#include "tessera/core/op_params.h"
#include "tessera/runtime/buffer.h"
#include "tessera/runtime/device.h"
#include "tessera/runtime/stream.h"

namespace tessera::testing {

class AsyncDevice;

class AsyncBufferType final : public BufferType {
 public:
  explicit AsyncBufferType(AsyncDevice& d);
  std::string_view name() const override;
  Device& device() const override;
  size_t alignment() const override { return 256; }
  bool is_host() const override { return false; }
  std::unique_ptr<Buffer> allocate(size_t bytes) override;

 private:
  AsyncDevice& device_;
};

class AsyncBuffer final : public Buffer {
 public:
  AsyncBuffer(BufferType& t, size_t n) : Buffer(t, ::operator new(n == 0 ? 1 : n), n) {}
  ~AsyncBuffer() override { ::operator delete(base()); }
  void clear(uint8_t v) override { std::memset(base(), v, size()); }

 protected:
  void write(Tensor& t, const void* src, size_t off, size_t n) override {
    std::memcpy(static_cast<uint8_t*>(t.data) + off, src, n);
  }
  void read(const Tensor& t, void* dst, size_t off, size_t n) const override {
    std::memcpy(dst, static_cast<const uint8_t*>(t.data) + off, n);
  }
};

// In-order work queue on one thread.
class WorkQueue {
 public:
  WorkQueue() : thread_([this] { loop(); }) {}
  ~WorkQueue() {
    push(nullptr);
    thread_.join();
  }
  void push(std::function<void()> job) {
    std::lock_guard l(m_);
    q_.push_back(std::move(job));
    cv_.notify_all();
  }
  uint64_t submitted() {
    std::lock_guard l(m_);
    return submitted_ + q_.size();
  }
  void wait_until(uint64_t n) {
    std::unique_lock l(m_);
    cv_.wait(l, [&] { return done_ >= n; });
  }

 private:
  void loop() {
    while (true) {
      std::function<void()> job;
      {
        std::unique_lock l(m_);
        cv_.wait(l, [&] { return !q_.empty(); });
        job = std::move(q_.front());
        q_.pop_front();
        submitted_ += 1;
      }
      if (!job) return;
      std::this_thread::sleep_for(std::chrono::microseconds(200));  // make races visible
      job();
      std::lock_guard l(m_);
      done_ += 1;
      cv_.notify_all();
    }
  }
  std::mutex m_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> q_;
  uint64_t submitted_ = 0, done_ = 0;
  std::thread thread_;
};

class AsyncEvent final : public Event {
 public:
  AsyncEvent(Device& d, WorkQueue& q) : device_(d), queue_(q) {}
  Device& device() const override { return device_; }
  void synchronize() override { queue_.wait_until(mark_); }
  WorkQueue& queue() { return queue_; }
  uint64_t mark_ = 0;

 private:
  Device& device_;
  WorkQueue& queue_;
};

class AsyncStream final : public Stream {
 public:
  AsyncStream(Device& d, WorkQueue& q, std::unique_ptr<Stream> kernels = nullptr)
      : device_(d), queue_(q), kernels_(std::move(kernels)) {}
  Device& device() const override { return device_; }
  void set_tensor_async(Tensor& t, const void* src, size_t off, size_t n) override {
    queue_.push([&t, src, off, n] { t.buffer->set_tensor(t, src, off, n); });
  }
  void get_tensor_async(const Tensor& t, void* dst, size_t off, size_t n) override {
    queue_.push([&t, dst, off, n] { t.buffer->get_tensor(t, dst, off, n); });
  }
  // Device to device: both sides in ASYNC buffers (plain memory underneath).
  bool copy_tensor_async(const Tensor& src, Tensor& dst) override {
    if (src.buffer == nullptr || dynamic_cast<AsyncBuffer*>(src.buffer) == nullptr) return false;
    async_copies += 1;
    queue_.push([&src, &dst] { std::memcpy(dst.data, src.data, src.n_bytes()); });
    return true;
  }
  void synchronize() override { queue_.wait_until(queue_.submitted()); }
  void compute(std::span<Tensor* const> nodes) override {
    if (kernels_ != nullptr) {
      // The nodes outlive the queued work: the scheduler waits before freeing.
      queue_.push([this, nodes] {
        kernels_->compute(nodes);
        kernels_->synchronize();
      });
      return;
    }
    for (Tensor* n : nodes) {
      if (n->op != Op::kScale) continue;
      queue_.push([n] {
        const auto* a = static_cast<const float*>(n->src[0]->data);
        auto* y = static_cast<float*>(n->data);
        const ScaleParams p = ScaleParams::get(*n);
        for (int64_t i = 0; i < n->n_elements(); ++i) y[i] = p.s * a[i] + p.bias;
      });
    }
  }
  void record(Event& e) override { static_cast<AsyncEvent&>(e).mark_ = queue_.submitted(); }
  // Later work on this queue waits for the event as recorded now.
  void wait(Event& e) override {
    auto& ev = static_cast<AsyncEvent&>(e);
    const uint64_t mark = ev.mark_;
    WorkQueue* other = &ev.queue();
    if (other != &queue_) queue_.push([other, mark] { other->wait_until(mark); });
  }
  int async_copies = 0;

 private:
  Device& device_;
  WorkQueue& queue_;
  std::unique_ptr<Stream> kernels_;
};

class AsyncDevice final : public Device, public Backend {
 public:
  explicit AsyncDevice(int index, Device* kernels = nullptr, uint64_t free_bytes = 1u << 30)
      : name_("ASYNC" + std::to_string(index)), type_(*this), kernels_(kernels), free_(free_bytes) {}
  // Device (and, being its own one-device backend, Backend)
  std::string_view name() const override { return name_; }
  std::string_view description() const override { return "test device with a worker thread"; }
  DeviceType type() const override { return DeviceType::kGpu; }
  MemoryInfo memory() const override { return {free_, free_}; }
  DeviceCaps caps() const override { return {.async = true, .events = true}; }
  Backend& backend() const override { return const_cast<AsyncDevice&>(*this); }
  std::unique_ptr<Stream> make_stream() override {
    auto s = std::make_unique<AsyncStream>(*this, queue_,
                                           kernels_ != nullptr ? kernels_->make_stream() : nullptr);
    last_stream = s.get();
    return s;
  }
  BufferType& buffer_type() override { return type_; }
  bool supports_op(const Tensor& n) const override {
    if (kernels_ != nullptr) return kernels_->supports_op(n);
    return is_view_op(n.op) || n.op == Op::kNone ||
           (n.op == Op::kScale && n.type == DType::kF32 && n.src[0]->type == DType::kF32 &&
            n.is_contiguous() && n.src[0]->is_contiguous());
  }
  bool supports_buffer_type(const BufferType& t) const override { return &t == &type_; }
  bool offload_op(const Tensor&) const override { return true; }
  std::unique_ptr<Event> make_event() override {
    return std::make_unique<AsyncEvent>(*this, queue_);
  }
  // Backend
  size_t device_count() const override { return 1; }
  AsyncStream* last_stream = nullptr;

 protected:
  Device& device_at(size_t) override { return *this; }

 private:
  std::string name_;
  AsyncBufferType type_;
  Device* kernels_;
  uint64_t free_;
  WorkQueue queue_;
};

inline AsyncBufferType::AsyncBufferType(AsyncDevice& d) : device_(d) {}
inline Device& AsyncBufferType::device() const { return device_; }
inline std::string_view AsyncBufferType::name() const { return device_.name(); }
inline std::unique_ptr<Buffer> AsyncBufferType::allocate(size_t bytes) {
  return std::make_unique<AsyncBuffer>(*this, bytes);
}

}  // namespace tessera::testing
