// The CUDA backend. On every machine: the split weight layout (host code),
// and a backend that reports zero devices, with a reason, where there is no
// GPU. With a GPU (CUDA0): the pools on real device memory, split weights
// read back exactly through any range, asynchronous copies with events, and
// greedy generation equal to the CPU's with every layer on the GPU. The
// conformance suite (conformance_test) runs every op on CUDA0 as well.
#include <cuda_runtime_api.h>
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <vector>

#include "backends/cuda/cublas_lib.h"
#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/ops/ops.h"
#include "backends/cuda/repack.h"
#include "backends/cuda/stream.h"
#include "backends/cuda/vmm.h"
#include "models/model_test_util.h"
#include "tessera/backends/builtin.h"
#include "tessera/core/dtype.h"
#include "tessera/core/error.h"
#include "tessera/core/graph.h"
#include "tessera/core/ops.h"
#include "tessera/engine/engine.h"
#include "tessera/engine/placement.h"
#include "tessera/runtime/pool.h"
#include "tessera/runtime/runtime.h"

namespace tessera {
namespace {

std::vector<uint8_t> random_bytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> v(n);
  for (uint8_t& b : v) b = static_cast<uint8_t>(rng());
  return v;
}

// ---- the split layout (host code, every machine) -------------------------------------------

TEST(CudaSplitLayout, QuantsThenScalesBlockByBlock) {
  for (DType type : {DType::kQ4_0, DType::kQ8_0}) {
    SCOPED_TRACE(dtype_name(type));
    const cuda::BlockSplit s = cuda::block_split(type, 7);
    EXPECT_EQ(s.block_bytes, dtype_info(type).block_bytes);
    EXPECT_EQ(s.quant_bytes, s.block_bytes - 2);
    EXPECT_EQ(s.total_bytes(), 7 * s.block_bytes);
    const std::vector<uint8_t> gguf = random_bytes(s.total_bytes(), 1);
    std::vector<uint8_t> split(s.total_bytes());
    cuda::split_blocks(s, gguf.data(), 0, 7, split.data());
    for (size_t b = 0; b < 7; ++b) {
      const uint8_t* block = gguf.data() + b * s.block_bytes;
      EXPECT_EQ(0, std::memcmp(split.data() + s.scales_offset() + 2 * b, block, 2)) << b;
      EXPECT_EQ(0, std::memcmp(split.data() + b * s.quant_bytes, block + 2, s.quant_bytes)) << b;
    }
    std::vector<uint8_t> back(s.total_bytes());
    cuda::join_blocks(s, split.data(), 0, 7, back.data());
    EXPECT_EQ(back, gguf);
  }
}

TEST(CudaSplitLayout, BlockRangesLandInPlace) {
  const cuda::BlockSplit s = cuda::block_split(DType::kQ4_0, 10);
  const std::vector<uint8_t> gguf = random_bytes(s.total_bytes(), 2);
  std::vector<uint8_t> split(s.total_bytes(), 0);
  // Written in three ranges, out of order.
  cuda::split_blocks(s, gguf.data() + 6 * s.block_bytes, 6, 4, split.data());
  cuda::split_blocks(s, gguf.data(), 0, 1, split.data());
  cuda::split_blocks(s, gguf.data() + s.block_bytes, 1, 5, split.data());
  std::vector<uint8_t> whole(s.total_bytes());
  cuda::split_blocks(s, gguf.data(), 0, 10, whole.data());
  EXPECT_EQ(split, whole);
  std::vector<uint8_t> some(3 * s.block_bytes);
  cuda::join_blocks(s, split.data(), 4, 3, some.data());
  EXPECT_EQ(0, std::memcmp(some.data(), gguf.data() + 4 * s.block_bytes, some.size()));
  EXPECT_THROW(cuda::split_blocks(s, gguf.data(), 8, 3, split.data()), Error);
}

// ---- the backend without a GPU -----------------------------------------------------------------

TEST(CudaBackendTest, ListsItsDevicesOrSaysWhyItHasNone) {
  auto rt = make_runtime(false);
  Backend* cuda = rt->find_backend("CUDA");
  ASSERT_NE(cuda, nullptr) << "built with CUDA but make_runtime has no CUDA backend";
  const std::string why = no_devices_reason(*cuda);
  if (cuda->device_count() == 0) {
    EXPECT_FALSE(why.empty());
    EXPECT_THROW(cuda->device(0), Error);
    ASSERT_NE(rt->find_device("CPU0"), nullptr);  // the runtime carries on
    return;
  }
  EXPECT_TRUE(why.empty()) << why;
  for (size_t i = 0; i < cuda->device_count(); ++i) {
    Device& d = cuda->device(i);
    EXPECT_EQ(d.name(), fmt::format("CUDA{}", i));
    EXPECT_EQ(d.type(), DeviceType::kGpu);
    EXPECT_FALSE(d.description().empty());
    const MemoryInfo m = d.memory();
    EXPECT_GT(m.total, 0u);
    EXPECT_LE(m.free, m.total);
    EXPECT_TRUE(d.caps().async && d.caps().events);
    EXPECT_EQ(d.buffer_type().alignment(), 128u);
    EXPECT_TRUE(d.supports_buffer_type(d.buffer_type()));
    EXPECT_TRUE(d.supports_buffer_type(d.weights_buffer_type()));
    EXPECT_FALSE(d.supports_buffer_type(rt->device("CPU0").buffer_type()));
  }
}

// ---- with a GPU --------------------------------------------------------------------------------

class CudaGpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Backend* b = rt_->find_backend("CUDA");
    if (b == nullptr || b->device_count() == 0) GTEST_SKIP() << "no CUDA GPU here";
    gpu_ = dynamic_cast<cuda::CudaDevice*>(&b->device(0));
  }
  std::unique_ptr<Runtime> rt_ = make_runtime(false);
  cuda::CudaDevice* gpu_ = nullptr;
};

TEST_F(CudaGpuTest, VirtualPoolMapsChunksOfTheGranularityLifo) {
  auto vm = cuda::CudaVirtualMemory::create(gpu_->index(), "CUDA0 test pool");
  if (vm == nullptr) GTEST_SKIP() << "no virtual memory management on this GPU";
  const size_t g = vm->granularity();
  ASSERT_GT(g, 0u);
  VirtualPool pool(*vm, 4 * g);
  PoolBlock a = pool.alloc(1000);
  EXPECT_EQ(pool.reserved_bytes(), g);
  PoolBlock b = pool.alloc(g + 1);  // grows by whole chunks
  EXPECT_EQ(pool.reserved_bytes(), 2 * g);  // 1024 + g + 128 bytes in use
  // The mapped memory is usable: write and read back across the chunk border.
  std::vector<uint8_t> pattern = random_bytes(b.size, 3), back(b.size);
  ASSERT_EQ(cudaMemcpy(b.ptr, pattern.data(), b.size, cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(back.data(), b.ptr, b.size, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(back, pattern);
  EXPECT_THROW(pool.free(a), Error);  // not the top
  pool.free(b);
  pool.free(a);
  EXPECT_EQ(pool.used_bytes(), 0u);
  try {
    (void)pool.alloc(5 * g);
    ADD_FAILURE() << "a request past the limit was granted";
  } catch (const Error& e) {
    EXPECT_EQ(e.category(), ErrorCategory::kOutOfMemory) << e.what();
  }
}

TEST_F(CudaGpuTest, BestFitPoolReusesDeviceBlocks) {
  cuda::CudaRawMemory raw(gpu_->index(), "CUDA0 test pool");
  BestFitPool pool(raw);
  PoolBlock a = pool.alloc(4096);
  void* first = a.ptr;
  pool.free(a);
  PoolBlock again = pool.alloc(3000);
  EXPECT_EQ(again.ptr, first);
  EXPECT_EQ(pool.reserved_bytes(), 4096u);
  pool.free(again);
}

TEST_F(CudaGpuTest, SplitWeightsReadBackExactlyThroughAnyRange) {
  for (DType type : {DType::kQ4_0, DType::kQ8_0}) {
    SCOPED_TRACE(dtype_name(type));
    Graph g;
    Tensor* w = g.new_tensor(type, {96, 5}, "w");
    BufferType& bt = gpu_->weights_buffer_type();
    EXPECT_GT(bt.alloc_size(*w), w->n_bytes());  // row padding to 512 elements
    auto buf = bt.allocate(bt.alloc_size(*w));
    buf->place(*w, 0);
    ASSERT_TRUE(cuda::is_split(*w));
    std::vector<uint8_t> bytes = random_bytes(w->n_bytes(), 4);
    buf->set_tensor(*w, bytes.data());
    std::vector<uint8_t> back(w->n_bytes());
    buf->get_tensor(*w, back.data());
    EXPECT_EQ(back, bytes);
    // An unaligned range: starts and ends inside blocks.
    const std::vector<uint8_t> patch = random_bytes(50, 5);
    buf->set_tensor(*w, patch.data(), 7, patch.size());
    std::copy(patch.begin(), patch.end(), bytes.begin() + 7);
    buf->get_tensor(*w, back.data());
    EXPECT_EQ(back, bytes);
    std::vector<uint8_t> part(33);
    buf->get_tensor(*w, part.data(), 19, part.size());
    EXPECT_TRUE(std::equal(part.begin(), part.end(), bytes.begin() + 19));
    buf->clear(0xab);
    buf->get_tensor(*w, back.data());
    EXPECT_TRUE(std::all_of(back.begin(), back.end(), [](uint8_t b) { return b == 0xab; }));
  }
}

TEST_F(CudaGpuTest, AsyncCopiesFromPinnedMemoryWithEvents) {
  Graph g;
  Tensor* t = g.new_tensor(DType::kF32, {1000, 3}, "t");
  Tensor* h = g.new_tensor(DType::kF32, {1000, 3}, "h");
  auto dev = gpu_->buffer_type().allocate(t->n_bytes());
  dev->place(*t, 0);
  ASSERT_NE(gpu_->host_buffer_type(), nullptr);
  auto host = gpu_->host_buffer_type()->allocate(h->n_bytes());
  host->place(*h, 0);
  ASSERT_TRUE(host->is_host());
  std::vector<float> values(3000);
  std::mt19937 rng(6);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (float& v : values) v = dist(rng);
  std::memcpy(h->data, values.data(), h->n_bytes());
  auto stream = gpu_->make_stream();
  ASSERT_TRUE(stream->copy_tensor_async(*h, *t));
  auto event = gpu_->make_event();
  stream->record(*event);
  event->synchronize();
  std::vector<float> back(3000);
  stream->get_tensor_async(*t, back.data(), 0, t->n_bytes());
  stream->synchronize();
  EXPECT_EQ(back, values);
}

TEST_F(CudaGpuTest, RowIdsOutsideTheTensorAreAnError) {
  // As on the CPU (an Error naming the op), here reported when the stream syncs.
  Graph g;
  Tensor* a = g.new_tensor(DType::kF32, {8, 4}, "a");
  Tensor* ids = g.new_tensor(DType::kI32, {2}, "ids");
  Tensor* rows = ops::get_rows(g, a, ids);
  g.expand(rows);
  auto buf = gpu_->buffer_type().allocate(4096);
  buf->place(*a, 0);
  buf->place(*ids, 256);
  buf->place(*rows, 512);
  const std::vector<float> values(32, 1.0f);
  buf->set_tensor(*a, values.data());
  const int32_t bad[2] = {1, 4};
  buf->set_tensor(*ids, bad);
  auto stream = gpu_->make_stream();
  stream->compute(g);
  try {
    stream->synchronize();
    ADD_FAILURE() << "row id 4 of 4 rows was not reported";
  } catch (const Error& e) {
    EXPECT_EQ(e.category(), ErrorCategory::kInvalidArgument) << e.what();
  }
  stream->synchronize();  // reported once
}

// An expert id outside MUL_MAT_ID's experts: an Error when the stream syncs.
TEST_F(CudaGpuTest, ExpertIdsOutsideTheExpertsAreAnError) {
  Graph g;
  Tensor* w = g.new_tensor(DType::kF32, {32, 4, 3}, "w");
  Tensor* x = g.new_tensor(DType::kF32, {32, 1, 1}, "x");
  Tensor* ids = g.new_tensor(DType::kI32, {2, 1}, "ids");
  Tensor* y = ops::mul_mat_id(g, w, x, ids);
  g.expand(y);
  auto buf = gpu_->buffer_type().allocate(4096);
  buf->place(*w, 0);
  buf->place(*x, 1536);
  buf->place(*ids, 1792);
  buf->place(*y, 2048);
  const std::vector<float> values(384, 1.0f);
  buf->set_tensor(*w, values.data());
  buf->set_tensor(*x, values.data());
  const int32_t bad[2] = {2, 3};
  buf->set_tensor(*ids, bad);
  auto stream = gpu_->make_stream();
  stream->compute(g);
  try {
    stream->synchronize();
    ADD_FAILURE() << "expert id 3 of 3 experts was not reported";
  } catch (const Error& e) {
    EXPECT_EQ(e.category(), ErrorCategory::kInvalidArgument) << e.what();
  }
  stream->synchronize();  // reported once
}

// f32 rows copied into Q8_0 / Q4_0 blocks on the GPU (the quantized KV cache's
// K-shift write-back; SET_ROWS shares the kernel) hold the bytes the CPU's
// quantizer writes, block for block.
TEST_F(CudaGpuTest, QuantizedCopiesHoldTheCpusBytes) {
  for (DType type : {DType::kQ8_0, DType::kQ4_0}) {
    SCOPED_TRACE(dtype_name(type));
    Graph g;
    const int64_t k = 256, rows = 5;
    Tensor* a = g.new_tensor(DType::kF32, {k, rows}, "a");
    Tensor* q = g.new_tensor(type, {k, rows}, "q");
    Tensor* out = ops::cpy(g, a, q);
    g.expand(out);
    auto buf = gpu_->buffer_type().allocate(a->n_bytes() + q->n_bytes() + 1024);
    buf->place(*a, 0);
    buf->place(*q, 512 * ((a->n_bytes() + 511) / 512));
    buf->place(*out, 0);  // a view of q
    std::vector<float> x(static_cast<size_t>(k * rows));
    std::mt19937 rng(11);
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    for (float& v : x) v = dist(rng);
    buf->set_tensor(*a, x.data());
    auto stream = gpu_->make_stream();
    stream->compute(g);
    stream->synchronize();
    std::vector<uint8_t> got(q->n_bytes()), want(q->n_bytes());
    buf->get_tensor(*q, got.data());
    quantize_row(type, x.data(), want.data(), k * rows);
    const size_t bb = dtype_info(type).block_bytes;
    for (size_t b = 0; b * bb < want.size(); ++b) {
      if (std::equal(want.begin() + b * bb, want.begin() + (b + 1) * bb, got.begin() + b * bb)) continue;
      std::string w, h;
      for (size_t i = 0; i < bb; ++i) {
        w += fmt::format(" {:02x}", want[b * bb + i]);
        h += fmt::format(" {:02x}", got[b * bb + i]);
      }
      ADD_FAILURE() << "block " << b << " differs\n  cpu:" << w << "\n  gpu:" << h;
      break;
    }
  }
}

// Greedy tokens of the whole model on CUDA0 equal the CPU's (stories260K).
std::vector<int32_t> greedy(const Model& model, int n) {
  Session s(model, {.n_ctx = 128});
  std::vector<int32_t> tokens = {1, 403, 407, 261, 378, 432};
  std::span<const float> logits = s.decode(tokens);
  std::vector<int32_t> out;
  for (int i = 0; i < n; ++i) {
    const auto t = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    out.push_back(t);
    logits = s.decode(std::span(&t, 1));
  }
  return out;
}

TEST_F(CudaGpuTest, GreedyGenerationEqualsTheCpus) {
  const std::string path = testing::stories();
  std::vector<int32_t> cpu;
  {
    auto rt = make_runtime(false);
    cpu = greedy(*load_model(*rt, path, {.gpu_layers = 0}), 40);
  }
  Placement where;
  auto model = load_model(*rt_, path, {.gpu_layers = -1, .device = "CUDA0"}, {}, &where);
  EXPECT_EQ(&model->output_device(), gpu_) << where.message;
  EXPECT_EQ(greedy(*model, 40), cpu);
}

// The rule behind "-ngl 99 leaves no matmul on the CPU", per weight type, as
// the scheduler asks it (no GPU needed: supports() reads shapes, types and
// strides). Decode batches (1..8 columns) of the types llama-quantize
// writes for its K and IQ4 mixes run in place on every GPU; larger
// batches dequantize to f16 for cuBLAS, so they stay on the GPU exactly
// when cuBLAS can be opened.
TEST(CudaOpRules, LlamaQuantizeWeightTypesStayOnTheGpu) {
  bool cublas = true;
  try {
    (void)cuda::cublas();
  } catch (const Error&) {
    cublas = false;
  }
  const auto in_place_type = [](DType t) {
    return t != DType::kQ8_0 && t != DType::kF16 && t != DType::kF32;
  };
  for (DType type : {DType::kQ2_K, DType::kQ3_K, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K,
                     DType::kIQ4_NL, DType::kIQ4_XS, DType::kQ4_1, DType::kQ5_0, DType::kQ5_1,
                     DType::kMXFP4, DType::kQ8_0, DType::kF16, DType::kF32}) {
    SCOPED_TRACE(dtype_name(type));
    for (int64_t n : {1, 2, 5, 8, 9, 512}) {
      SCOPED_TRACE(n);
      Graph g;
      Tensor* w = g.new_tensor(type, {4096, 96}, "w");
      Tensor* x = g.new_tensor(DType::kF32, {4096, n}, "x");
      Tensor* y = ops::mul_mat(g, w, x);
      const bool in_place = n <= 8 && in_place_type(type);
      EXPECT_EQ(cuda::needs_cublas(*y), !in_place);
      EXPECT_EQ(cuda::supports(*y), in_place || cublas);
      Tensor* ids = g.new_tensor(DType::kI32, {3}, "ids");
      EXPECT_EQ(cuda::supports(*ops::get_rows(g, w, ids)), true);
    }
  }
  // Not on the GPU: the CPU runs these (the scheduler splits there).
  for (DType type : {DType::kQ8_K, DType::kI32}) {
    SCOPED_TRACE(dtype_name(type));
    Graph g;
    Tensor* w = g.new_tensor(type, {4096, 96}, "w");
    Tensor* x = g.new_tensor(DType::kF32, {4096, 1}, "x");
    EXPECT_FALSE(cuda::supports(*ops::mul_mat(g, w, x)));
  }
}

// Expert matmuls stay on the GPU for every weight type its matrix-vector
// kernels read (Q4_0 / Q8_0 once split, which tensors in a host buffer are
// not), at any batch, without cuBLAS.
TEST(CudaOpRules, ExpertMatmulsStayOnTheGpu) {
  for (DType type : {DType::kQ4_K, DType::kQ6_K, DType::kIQ4_XS, DType::kQ5_0, DType::kMXFP4,
                     DType::kF16, DType::kBF16, DType::kF32}) {
    SCOPED_TRACE(dtype_name(type));
    for (int64_t tokens : {1, 7, 512}) {
      Graph g;
      Tensor* w = g.new_tensor(type, {2048, 96, 32}, "ffn_up_exps");
      Tensor* x = g.new_tensor(DType::kF32, {2048, 1, tokens}, "x");
      Tensor* ids = g.new_tensor(DType::kI32, {4, tokens}, "ids");
      Tensor* y = ops::mul_mat_id(g, w, x, ids);
      EXPECT_TRUE(cuda::supports(*y)) << tokens;
      EXPECT_FALSE(cuda::needs_cublas(*y));
    }
  }
  Graph g;
  for (DType type : {DType::kQ4_0, DType::kQ8_0, DType::kQ8_K}) {
    SCOPED_TRACE(dtype_name(type));
    Tensor* w = g.new_tensor(type, {2048, 96, 32}, "ffn_up_exps");  // GGUF blocks, not split
    Tensor* x = g.new_tensor(DType::kF32, {2048, 4, 2}, "x");
    Tensor* ids = g.new_tensor(DType::kI32, {4, 2}, "ids");
    EXPECT_FALSE(cuda::supports(*ops::mul_mat_id(g, w, x, ids)));
  }
}

// A quantized KV cache (-ctk / -ctv q8_0 or q4_0) on GPU layers: the cache
// writes (SET_ROWS, quantizing as the CPU does) and attention over it run on
// the GPU; K-quant caches are not offered.
TEST(CudaOpRules, QuantizedCachesAreWrittenAndReadOnTheGpu) {
  for (DType type : {DType::kQ8_0, DType::kQ4_0, DType::kF16}) {
    SCOPED_TRACE(dtype_name(type));
    Graph g;
    const int64_t d = 128, n_head_kv = 2, n_ctx = 512, n_tokens = 3, n_kv = 256;
    Tensor* cache = g.new_tensor(type, {d * n_head_kv, n_ctx}, "cache_k");
    Tensor* values = g.new_tensor(DType::kF32, {d * n_head_kv, n_tokens}, "k");
    Tensor* rows = g.new_tensor(DType::kI64, {n_tokens}, "kv_idx");
    EXPECT_TRUE(cuda::supports(*ops::set_rows(g, cache, values, rows)));
    Tensor* q = g.new_tensor(DType::kF32, {d, n_tokens, 8}, "q");
    // The layer's view of the cache (layers.cpp): [d, n_kv, n_head_kv].
    const size_t head = cache->nb[1] / static_cast<size_t>(n_head_kv);
    Tensor* k = ops::view(g, cache, {d, n_kv, n_head_kv}, {cache->nb[1], head}, 0);
    Tensor* mask = g.new_tensor(DType::kF32, {n_kv, n_tokens}, "mask");
    EXPECT_TRUE(cuda::supports(*ops::flash_attn_ext(g, q, k, k, mask, 0.1f)));
    // The K shift: rows gathered as f32, rotated, copied back into the cache.
    Tensor* keys = ops::view(g, cache, {d, n_head_kv, n_ctx}, {head, cache->nb[1]}, 0);
    Tensor* rotated = g.new_tensor(DType::kF32, {d, n_head_kv, n_ctx}, "rotated");
    EXPECT_TRUE(cuda::supports(*ops::cpy(g, rotated, keys)));
    Tensor* all = g.new_tensor(DType::kI32, {n_ctx}, "rows");
    EXPECT_TRUE(cuda::supports(*ops::get_rows(g, cache, all)));
  }
  Graph g;
  Tensor* cache = g.new_tensor(DType::kQ4_K, {256, 64}, "cache_k");
  Tensor* values = g.new_tensor(DType::kF32, {256, 1}, "k");
  Tensor* rows = g.new_tensor(DType::kI64, {1}, "kv_idx");
  EXPECT_FALSE(cuda::supports(*ops::set_rows(g, cache, values, rows)));
}

}  // namespace
}  // namespace tessera
