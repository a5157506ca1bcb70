// The device contracts (docs/runtime.md, "Devices") that every device keeps: one test body, run on
// each device of this build (CPU0, BLAS0, ...).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "tessera/backends/builtin.h"
#include "tessera/core/error.h"
#include "tessera/core/graph.h"
#include "tessera/core/half.h"
#include "tessera/core/ops.h"
#include "tessera/runtime/buffer.h"
#include "tessera/runtime/runtime.h"
#include "tessera/runtime/stream.h"

namespace tessera {
namespace {

Runtime& runtime() {
  static const std::unique_ptr<Runtime> rt = make_runtime(/*load_modules=*/false);
  return *rt;
}

std::vector<std::string> device_names() {
  std::vector<std::string> names;
  for (Device* d : runtime().devices()) names.emplace_back(d->name());
  return names;
}

std::vector<float> random_floats(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

class DeviceContract : public ::testing::TestWithParam<std::string> {
 protected:
  Device& device() { return runtime().device(GetParam()); }
  uint32_t seed_ = std::random_device{}();
};

// A tensor of `type` and `shape`, alone in a new buffer of `buft`.
struct Placed {
  Graph g;
  Tensor* t = nullptr;
  std::unique_ptr<Buffer> buffer;
  Placed(BufferType& buft, DType type, std::initializer_list<int64_t> shape) {
    t = g.new_tensor(type, shape, "t");
    buffer = buft.allocate(buft.alloc_size(*t));
    buffer->place(*t, 0);
  }
};

TEST_P(DeviceContract, DescribesItself) {
  Device& d = device();
  const std::string name(d.name());
  const std::string backend(d.backend().name());
  EXPECT_EQ(name.rfind(backend, 0), 0u) << name << " should start with " << backend;
  EXPECT_TRUE(std::isdigit(static_cast<unsigned char>(name.back()))) << name;
  EXPECT_FALSE(d.description().empty());
  const MemoryInfo mem = d.memory();
  EXPECT_GT(mem.total, 0u);
  EXPECT_LE(mem.free, mem.total);
  const size_t align = d.buffer_type().alignment();
  EXPECT_TRUE(align > 0 && (align & (align - 1)) == 0) << align;
  EXPECT_EQ(&d.buffer_type().device(), &d);
  EXPECT_TRUE(d.supports_buffer_type(d.buffer_type()));
  EXPECT_TRUE(d.supports_buffer_type(d.weights_buffer_type()));
}

TEST_P(DeviceContract, SetAndGetRoundTripWholeAndPartial) {
  SCOPED_TRACE(testing::Message() << "seed " << seed_);
  for (BufferType* buft : {&device().buffer_type(), &device().weights_buffer_type()}) {
    for (DType type : {DType::kF32, DType::kF16}) {
      SCOPED_TRACE(testing::Message() << buft->name() << " " << dtype_name(type));
      Placed p(*buft, type, {37, 5});
      const size_t n = p.t->n_bytes();
      std::vector<uint8_t> in(n);
      std::mt19937 rng(seed_);
      // Finite f16/f32 values: the bytes of random floats.
      const std::vector<float> f = random_floats(37 * 5, seed_);
      if (type == DType::kF32) {
        std::memcpy(in.data(), f.data(), n);
      } else {
        for (size_t i = 0; i < f.size(); ++i) {
          const uint16_t h = fp32_to_fp16(f[i]);
          std::memcpy(in.data() + 2 * i, &h, 2);
        }
      }
      p.buffer->set_tensor(*p.t, in.data());
      std::vector<uint8_t> out(n, 0);
      p.buffer->get_tensor(*p.t, out.data());
      EXPECT_EQ(in, out);
      // A partial write lands exactly where asked; the rest is untouched.
      std::vector<uint8_t> patch(40, 0);
      p.buffer->set_tensor(*p.t, patch.data(), 20, 40);
      p.buffer->get_tensor(*p.t, out.data());
      std::vector<uint8_t> expect = in;
      for (size_t i = 20; i < 60; ++i) expect.at(i) = 0;
      EXPECT_EQ(expect, out);
      std::vector<uint8_t> part(16);
      p.buffer->get_tensor(*p.t, part.data(), 100, 16);
      EXPECT_TRUE(std::equal(part.begin(), part.end(), expect.begin() + 100));
    }
  }
}

TEST_P(DeviceContract, TransfersAreBoundsChecked) {
  Placed p(device().buffer_type(), DType::kF32, {16, 4});
  std::vector<uint8_t> bytes(p.t->n_bytes() + 8);
  const size_t n = p.t->n_bytes();
  EXPECT_THROW(p.buffer->set_tensor(*p.t, bytes.data(), 0, n + 1), Error);
  EXPECT_THROW(p.buffer->set_tensor(*p.t, bytes.data(), n, 4), Error);
  EXPECT_THROW(p.buffer->get_tensor(*p.t, bytes.data(), SIZE_MAX - 2, 4), Error);
  EXPECT_NO_THROW(p.buffer->set_tensor(*p.t, bytes.data(), n, 0));
  Placed other(device().buffer_type(), DType::kF32, {16, 4});
  EXPECT_THROW(p.buffer->set_tensor(*other.t, bytes.data(), 0, 4), Error);
}

TEST_P(DeviceContract, OutOfMemoryNamesDeviceAndBytes) {
  const size_t huge = size_t{1} << 52;  // 4 PiB
  try {
    device().buffer_type().allocate(huge);
    FAIL() << "allocated 4 PiB";
  } catch (const Error& e) {
    EXPECT_EQ(e.category(), ErrorCategory::kOutOfMemory);
    const std::string msg = e.what();
    EXPECT_NE(msg.find(std::string(device().name())), std::string::npos) << msg;
    EXPECT_NE(msg.find(std::to_string(huge)), std::string::npos) << msg;
    EXPECT_NE(msg.find("free"), std::string::npos) << msg;
  }
}

TEST_P(DeviceContract, ClearAndCopyBetweenBuffers) {
  Placed a(device().buffer_type(), DType::kF32, {64});
  a.buffer->clear(0);
  std::vector<float> out(64, 1.0f);
  a.buffer->get_tensor(*a.t, out.data());
  for (float v : out) ASSERT_EQ(v, 0.0f);
  const std::vector<float> in = random_floats(64, seed_);
  Placed host(runtime().device("CPU0").buffer_type(), DType::kF32, {64});
  host.buffer->set_tensor(*host.t, in.data());
  copy_tensor(*host.t, *a.t);
  a.buffer->get_tensor(*a.t, out.data());
  EXPECT_EQ(in, out);
  Placed back(device().weights_buffer_type(), DType::kF32, {64});
  copy_tensor(*a.t, *back.t);
  std::vector<float> out2(64);
  back.buffer->get_tensor(*back.t, out2.data());
  EXPECT_EQ(in, out2);
}

TEST_P(DeviceContract, StreamComputesMatMulAndSynchronizes) {
  SCOPED_TRACE(testing::Message() << "seed " << seed_);
  Device& d = device();
  const int64_t k = 33, m = 7, n = 40;  // odd sizes; n >= 32 so every device takes it
  Graph g;
  Tensor* w = g.new_tensor(DType::kF32, {k, m}, "w");
  Tensor* x = g.new_tensor(DType::kF32, {k, n}, "x");
  Tensor* y = ops::mul_mat(g, w, x);
  ASSERT_TRUE(d.supports_op(*y));
  auto buf = d.buffer_type().allocate(1 << 16);
  buf->place(*w, 0);
  buf->place(*x, 8192);
  buf->place(*y, 16384);
  const auto wv = random_floats(static_cast<size_t>(k * m), seed_);
  const auto xv = random_floats(static_cast<size_t>(k * n), seed_ + 1);
  auto stream = d.make_stream();
  stream->set_tensor_async(*w, wv.data(), 0, wv.size() * 4);
  stream->set_tensor_async(*x, xv.data(), 0, xv.size() * 4);
  g.expand(y);
  stream->compute(g);
  std::vector<float> out(static_cast<size_t>(m * n));
  stream->get_tensor_async(*y, out.data(), 0, out.size() * 4);
  stream->synchronize();
  for (int64_t j = 0; j < n; ++j) {
    for (int64_t i = 0; i < m; ++i) {
      double ref = 0;
      for (int64_t kk = 0; kk < k; ++kk) ref += double(wv[i * k + kk]) * xv[j * k + kk];
      ASSERT_NEAR(out[j * m + i], ref, 1e-5) << "i=" << i << " j=" << j;
    }
  }
}

TEST_P(DeviceContract, EventsExactlyWhenAdvertised) {
  Device& d = device();
  if (!d.caps().events) {
    EXPECT_THROW(d.make_event(), Error);
    return;
  }
  auto stream = d.make_stream();
  auto event = d.make_event();
  EXPECT_EQ(&event->device(), &d);
  stream->record(*event);
  stream->wait(*event);
  event->synchronize();
}

TEST_P(DeviceContract, OffloadFollowsTheBatchRule) {
  Device& d = device();
  Graph g;
  // Weights large enough that size is not what decides (BLAS wants >= 2^24
  // multiply-adds per call): the batch is.
  Tensor* w = g.new_tensor(DType::kF32, {1024, 1024});
  Tensor* small = ops::mul_mat(g, w, g.new_tensor(DType::kF32, {1024, 31}));
  Tensor* big = ops::mul_mat(g, w, g.new_tensor(DType::kF32, {1024, 32}));
  Tensor* rows = ops::get_rows(g, w, g.new_tensor(DType::kI32, {64}));
  EXPECT_FALSE(d.offload_op(*small));
  EXPECT_FALSE(d.offload_op(*rows));
  if (d.type() == DeviceType::kCpu) {
    EXPECT_FALSE(d.offload_op(*big));  // already where host weights are
  } else {
    EXPECT_TRUE(d.offload_op(*big));
    if (d.name().starts_with("BLAS")) {
      // Small matrices stay: the call costs more than it saves (BlasDevice::offload_op).
      Tensor* tiny_w = g.new_tensor(DType::kF32, {64, 64});
      EXPECT_FALSE(d.offload_op(*ops::mul_mat(g, tiny_w, g.new_tensor(DType::kF32, {64, 512}))));
    }
    ::setenv("TESSERA_OFFLOAD_MIN_BATCH", "64", 1);
    EXPECT_FALSE(d.offload_op(*big));
    ::setenv("TESSERA_OFFLOAD_MIN_BATCH", "many", 1);
    EXPECT_THROW(d.offload_op(*big), Error);
    ::unsetenv("TESSERA_OFFLOAD_MIN_BATCH");
  }
}

INSTANTIATE_TEST_SUITE_P(Devices, DeviceContract, ::testing::ValuesIn(device_names()),
                         [](const auto& param_info) { return param_info.param; });

TEST(RuntimeTest, DevicesListCpuLastAndLookUpByName) {
  const auto devices = runtime().devices();
  ASSERT_FALSE(devices.empty());
  EXPECT_EQ(devices.back()->type(), DeviceType::kCpu);
  EXPECT_EQ(&runtime().device("cpu0"), &runtime().device("CPU0"));
  try {
    runtime().device("CUDA7");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("CPU0"), std::string::npos) << e.what();
  }
  EXPECT_THROW(runtime().backends().front()->device(99), Error);
}

// Weights and KV caches are packed by pack_tensors: one buffer per buffer
// type, tensors at aligned offsets in the order given, each readable back.
TEST(RuntimeTest, PackTensorsGivesOneBufferPerTypeAtAlignedOffsets) {
  Device& cpu = runtime().device("CPU0");
  Graph g;
  BufferType& plain = cpu.buffer_type();
  BufferType& weights = cpu.weights_buffer_type();
  std::vector<TensorPlacement> placed;
  for (int i = 0; i < 5; ++i) {
    Tensor* t = g.new_tensor(DType::kF32, {static_cast<int64_t>(7 + 13 * i)}, "t" + std::to_string(i));
    placed.push_back({t, i % 2 == 0 ? &plain : &weights});
  }
  const auto buffers = pack_tensors(placed, BufferUsage::kWeights, uint8_t{0x5A});
  const bool one_type = &plain == &weights;
  ASSERT_EQ(buffers.size(), one_type ? 1u : 2u);
  EXPECT_EQ(&buffers[0]->type(), &plain);
  const uint32_t seed = std::random_device{}();
  for (size_t i = 0; i < placed.size(); ++i) {
    const Tensor& t = *placed[i].tensor;
    ASSERT_NE(t.buffer, nullptr);
    EXPECT_EQ(&t.buffer->type(), placed[i].type);
    EXPECT_EQ(t.buffer->usage(), BufferUsage::kWeights);
    const auto at = static_cast<const char*>(t.data) - static_cast<const char*>(t.buffer->base());
    EXPECT_EQ(static_cast<size_t>(at) % placed[i].type->alignment(), 0u) << t.name;
    if (i >= 2 && placed[i - 2].type == placed[i].type) {  // in order, not overlapping
      const auto prev = static_cast<const char*>(placed[i - 2].tensor->data);
      EXPECT_GE(static_cast<const char*>(t.data), prev + placed[i - 2].tensor->n_bytes());
    }
    std::vector<uint8_t> fresh(t.n_bytes());
    t.buffer->get_tensor(t, fresh.data());
    EXPECT_EQ(fresh, std::vector<uint8_t>(t.n_bytes(), 0x5A)) << t.name << ": not filled";
    const std::vector<float> v = random_floats(static_cast<size_t>(t.ne[0]), seed + static_cast<uint32_t>(i));
    t.buffer->set_tensor(*placed[i].tensor, v.data());
  }
  for (size_t i = 0; i < placed.size(); ++i) {  // no write reached another tensor
    const Tensor& t = *placed[i].tensor;
    std::vector<float> back(static_cast<size_t>(t.ne[0]));
    t.buffer->get_tensor(t, back.data());
    EXPECT_EQ(back, random_floats(back.size(), seed + static_cast<uint32_t>(i))) << t.name;
  }
}

TEST(RuntimeTest, DuplicateBackendNamesAreRefused) {
  auto rt = make_runtime(false);
  EXPECT_THROW(rt->add_backend(std::make_unique<cpu::CpuBackend>(1)), Error);
  EXPECT_NE(rt->find_backend("cpu"), nullptr);
}

}  // namespace
}  // namespace tessera
