// The scheduler on CPU + BLAS: matmuls of a small MLP go to BLAS at batch 64
// and stay on the CPU at batch 1, results match CPU-only, copies are made
// where a device cannot read a tensor, and unsupported ops are named.
#include "tessera/backends/builtin.h"
#include "tessera/runtime/scheduler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "backends/cpu/cpu_backend.h"
#include "runtime/async_device.h"
#include "tessera/core/error.h"
#include "tessera/core/half.h"
#include "tessera/core/ops.h"
#include "tessera/runtime/buffer.h"
#include "tessera/runtime/runtime.h"

namespace tessera {
namespace {

// w1 large enough for BLAS to want it at batch 64 (>= 2^24 multiply-adds).
constexpr int64_t kIn = 512, kHidden = 512, kOut = 48;

std::vector<float> random_floats(size_t n, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

// Weights of a two-layer MLP (w1 f32, w2 f16, bias f32) in one weights buffer.
struct Mlp {
  Graph weights;
  Tensor *w1, *b1, *w2;
  std::unique_ptr<Buffer> buffer;

  Mlp(BufferType& type, uint32_t seed) {
    w1 = weights.new_tensor(DType::kF32, {kIn, kHidden}, "w1");
    b1 = weights.new_tensor(DType::kF32, {kHidden}, "b1");
    w2 = weights.new_tensor(DType::kF16, {kHidden, kOut}, "w2");
    size_t size = 0;
    for (Tensor* t : {w1, b1, w2}) size += (type.alloc_size(*t) + 255) / 256 * 256;
    buffer = type.allocate(size);
    buffer->set_usage(BufferUsage::kWeights);
    size_t offset = 0;
    std::mt19937 rng(seed);
    for (Tensor* t : {w1, b1, w2}) {
      buffer->place(*t, offset);
      offset += (type.alloc_size(*t) + 255) / 256 * 256;
      auto v = random_floats(static_cast<size_t>(t->n_elements()), rng);
      if (t->type == DType::kF16) {
        std::vector<uint16_t> h(v.size());
        for (size_t i = 0; i < v.size(); ++i) h[i] = fp32_to_fp16(v[i]);
        buffer->set_tensor(*t, h.data());
      } else {
        buffer->set_tensor(*t, v.data());
      }
    }
  }

  // y = w2 * relu(w1 * x + b1), x [kIn, batch]
  Tensor* build(Graph& g, int64_t batch, Tensor** input) const {
    Tensor* x = g.new_tensor(DType::kF32, {kIn, batch}, "x");
    x->flags |= kFlagInput;
    Tensor* h = ops::relu(g, ops::add(g, ops::mul_mat(g, w1, x), b1));
    Tensor* y = ops::mul_mat(g, w2, h);
    y->flags |= kFlagOutput;
    g.expand(y);
    *input = x;
    return y;
  }
};

class SchedulerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (rt_->find_backend("BLAS") == nullptr) GTEST_SKIP() << "this build has no BLAS backend";
  }
  std::unique_ptr<Runtime> rt_ = make_runtime(false);
  Device& cpu_ = rt_->device("CPU0");
  uint32_t seed_ = std::random_device{}();

  // The graph is kept in graphs_: the scheduler's splits point into it.
  std::vector<float> run(Scheduler& sched, const Mlp& mlp, int64_t batch,
                         const std::vector<float>& in) {
    Graph& g = *graphs_.emplace_back(std::make_unique<Graph>());
    Tensor* x = nullptr;
    Tensor* y = mlp.build(g, batch, &x);
    sched.allocate(g);
    x->buffer->set_tensor(*x, in.data());
    sched.compute();
    std::vector<float> out(static_cast<size_t>(y->n_elements()));
    y->buffer->get_tensor(*y, out.data());
    last_ = sched.describe();
    return out;
  }
  std::string last_;
  std::vector<std::unique_ptr<Graph>> graphs_;
};

double nmse(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    den += double(a[i]) * a[i];
  }
  return num / den;
}

int count_on(const Scheduler& s, std::string_view device, Op op) {
  int n = 0;
  for (const auto& split : s.splits()) {
    for (const Tensor* t : split.nodes) n += split.device->name() == device && t->op == op;
  }
  return n;
}

TEST_F(SchedulerTest, HostWeightsOffloadToBlasOnlyForBigBatches) {
  SCOPED_TRACE(::testing::Message() << "seed " << seed_);
  Mlp mlp(cpu_.buffer_type(), seed_);
  Device& blas = rt_->device("BLAS0");
  Scheduler both({&blas, &cpu_});
  Scheduler cpu_only({&cpu_});
  std::mt19937 rng(seed_ + 1);
  for (int64_t batch : {64, 1}) {
    SCOPED_TRACE(::testing::Message() << "batch " << batch);
    const auto in = random_floats(static_cast<size_t>(kIn * batch), rng);
    const auto ref = run(cpu_only, mlp, batch, in);
    EXPECT_EQ(cpu_only.splits().size(), 1u);
    const auto out = run(both, mlp, batch, in);
    if (batch >= 32) {
      // The f32 w1 goes to BLAS; the f16 w2 stays: BLAS would convert it on
      // every call, slower than the CPU's f16 kernels (BlasDevice::offload_op).
      EXPECT_EQ(count_on(both, "BLAS0", Op::kMulMat), 1) << last_;
      EXPECT_EQ(count_on(both, "CPU0", Op::kMulMat), 1) << last_;
      EXPECT_EQ(both.splits().size(), 2u) << last_;  // BLAS (w1), CPU (add, relu, w2)
    } else {
      EXPECT_EQ(count_on(both, "BLAS0", Op::kMulMat), 0) << last_;
      EXPECT_EQ(both.splits().size(), 1u) << last_;
    }
    // Host memory everywhere: no copies needed.
    for (const auto& s : both.splits()) EXPECT_TRUE(s.copies.empty()) << last_;
    EXPECT_LT(nmse(ref, out), 5e-4) << last_;  // matmul tolerance (docs/ops.md, "Tolerances")
  }
}

TEST_F(SchedulerTest, WeightsInBlasBufferRunThereAndAreCopiedForTheCpu) {
  SCOPED_TRACE(::testing::Message() << "seed " << seed_);
  Device& blas = rt_->device("BLAS0");
  Mlp host(cpu_.buffer_type(), seed_);
  Mlp converted(blas.weights_buffer_type(), seed_);
  Scheduler sched({&blas, &cpu_});
  Scheduler cpu_only({&cpu_});
  std::mt19937 rng(seed_ + 2);
  const auto in = random_floats(kIn * 2, rng);
  // Batch 2: the matmuls follow their weights to BLAS; the bias add runs on the
  // CPU, which cannot read the BLAS buffer, so b1 is copied over.
  const auto ref = run(cpu_only, host, 2, in);
  const auto out = run(sched, converted, 2, in);
  EXPECT_EQ(count_on(sched, "BLAS0", Op::kMulMat), 2) << last_;
  bool copied_bias = false;
  for (const auto& s : sched.splits()) {
    for (const Tensor* c : s.copies) copied_bias |= c->src[0]->name == "b1";
  }
  EXPECT_TRUE(copied_bias) << last_;
  EXPECT_LT(nmse(ref, out), 5e-4) << last_;
}

TEST_F(SchedulerTest, DebugDescriptionNamesSplitsAndPeak) {
  Mlp mlp(cpu_.buffer_type(), seed_);
  Device& blas = rt_->device("BLAS0");
  Scheduler sched({&blas, &cpu_});
  std::mt19937 rng(seed_);
  run(sched, mlp, 64, random_floats(kIn * 64, rng));
  EXPECT_NE(last_.find("split 0: BLAS0"), std::string::npos) << last_;
  EXPECT_NE(last_.find("compute peak"), std::string::npos) << last_;
  EXPECT_GT(sched.memory_stats().peak, 0u);
}

TEST(SchedulerErrors, UnsupportedOpIsNamedWithItsTypes) {
  auto rt = make_runtime(false);
  Scheduler sched({&rt->device("CPU0")});
  Graph g;
  Tensor* a = g.new_tensor(DType::kI32, {4}, "a");
  Tensor* b = g.new_tensor(DType::kI32, {4}, "b");
  g.expand(ops::add(g, a, b));
  try {
    sched.allocate(g);
    FAIL() << "scheduled an op no device supports";
  } catch (const Error& e) {
    EXPECT_EQ(e.category(), ErrorCategory::kUnsupported);
    const std::string msg = e.what();
    EXPECT_NE(msg.find("ADD"), std::string::npos) << msg;
    EXPECT_NE(msg.find("i32"), std::string::npos) << msg;
  }
}

TEST(SchedulerErrors, DeviceListMustEndWithCpu) {
  auto rt = make_runtime(false);
  if (rt->find_backend("BLAS") == nullptr) GTEST_SKIP();
  EXPECT_THROW(Scheduler({&rt->device("BLAS0")}), Error);
}

}  // namespace
}  // namespace tessera

namespace tessera {
namespace {

// Two asynchronous devices with events and a CPU: copies between the two run
// asynchronously behind events; copies to and from the CPU synchronously.
TEST(SchedulerAsync, CopiesBetweenAsyncDevicesWaitOnEvents) {
  testing::AsyncDevice dev0(0), dev1(1);
  cpu::CpuBackend cpu_backend(2);
  Device& cpu = cpu_backend.device(0);
  Scheduler sched({&dev0, &dev1, &cpu});
  for (int pass = 0; pass < 3; ++pass) {
    Graph g;
    const int64_t n = 1000;
    Tensor* x = g.new_tensor(DType::kF32, {n}, "x");
    x->flags |= kFlagInput;
    Tensor* a = ops::scale(g, x, 2.0f, 1.0f);
    Tensor* b = ops::scale(g, a, -0.5f, 0.25f);
    Tensor* c = ops::relu(g, b);
    Tensor* d = ops::scale(g, c, 3.0f, 0.0f);
    d->flags |= kFlagOutput;
    g.expand(d);
    sched.pin(a, dev0);
    sched.pin(b, dev1);
    sched.pin(d, dev0);
    sched.allocate(g);
    ASSERT_EQ(sched.splits().size(), 4u) << sched.describe();
    std::vector<float> in(n);
    for (int64_t i = 0; i < n; ++i) in[i] = std::sin(0.37f * i + pass);
    x->buffer->set_tensor(*x, in.data());
    sched.compute();
    EXPECT_GE(dev1.last_stream->async_copies, 1) << "a -> ASYNC1 should be an async copy";
    std::vector<float> out(n);
    d->buffer->get_tensor(*d, out.data());
    for (int64_t i = 0; i < n; ++i) {
      const float expect = 3.0f * std::max(0.0f, -0.5f * (2.0f * in[i] + 1.0f) + 0.25f);
      ASSERT_NEAR(out[i], expect, 1e-5f) << "pass " << pass << " i " << i;
    }
  }
}

}  // namespace
}  // namespace tessera
