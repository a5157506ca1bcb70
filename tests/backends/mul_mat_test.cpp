// MUL_MAT through the CPU device on every tier, with weights in host memory
// and in the repacking weights buffer: odd shapes, broadcast batches, GEMV
// (static split) and GEMM (chunked) sizes. Each result is held to a
// double-precision oracle (NMSE 5e-4 with quantized activations, as the
// conformance suite; 1e-10 for float weights, where only summation order
// differs) and to the rounding bound of mat_kernels_test against activations
// quantized as the tiers quantize them; the ref tier is held to the bound of a
// sequential f32 sum and gives bit-identical results from either buffer.
// The device refuses ops that would read panels as plain bytes.
#include <gtest/gtest.h>

#include <iterator>
#include <memory>
#include <tuple>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/kernels/repack.h"
#include "kernel_test_util.h"
#include "tessera/core/graph.h"
#include "tessera/core/ops.h"

namespace tessera::cpu {
namespace {

using testing::fresh_seed;
using testing::random_floats;

struct Shape {
  int64_t m, n, w2, w3, x2, x3;
};

class MulMatTest : public ::testing::TestWithParam<DType> {
 protected:
  CpuBackend backend_{2};
  CpuDevice& device() { return backend_.cpu_device(); }
  uint32_t seed_ = fresh_seed();
};

// Runs y = w x on `device` at `isa`, w placed in `wtype`; returns y.
std::vector<float> run_mul_mat(CpuDevice& device, Isa isa, BufferType& wtype, DType type, int64_t k,
                               const Shape& s, const std::vector<uint8_t>& wbytes,
                               const std::vector<float>& xv) {
  Graph g;
  Tensor* w = g.new_tensor(type, {k, s.m, s.w2, s.w3}, "w");
  Tensor* x = g.new_tensor(DType::kF32, {k, s.n, s.x2, s.x3}, "x");
  Tensor* y = ops::mul_mat(g, w, x);
  auto wbuf = wtype.allocate(wtype.alloc_size(*w));
  wbuf->place(*w, 0);
  wbuf->set_tensor(*w, wbytes.data());
  BufferType& host = device.buffer_type();
  auto xbuf = host.allocate(x->n_bytes());
  xbuf->place(*x, 0);
  xbuf->set_tensor(*x, xv.data());
  auto ybuf = host.allocate(y->n_bytes());
  ybuf->place(*y, 0);
  EXPECT_TRUE(device.supports_op(*y));
  device.set_isa(isa);
  g.expand(y);
  device.compute(g.nodes());
  std::vector<float> out(static_cast<size_t>(y->n_elements()));
  ybuf->get_tensor(*y, out.data());
  return out;
}

// Types the SIMD tiers have a kernel for in the GGUF row layout (host
// memory); the rest have kernels only for the weights buffer's panels.
bool has_row_kernel(DType type) {
  switch (type) {
    case DType::kQ2_K:
    case DType::kQ3_K:
    case DType::kQ5_K:
    case DType::kIQ4_NL:
    case DType::kIQ4_XS:
    case DType::kMXFP4:
      return false;
    default:
      return true;
  }
}

TEST_P(MulMatTest, EveryTierMatchesTheOracleFromEitherBuffer) {
  SCOPED_TRACE(::testing::Message() << "seed " << seed_);
  const DType type = GetParam();
  const int64_t bs = dtype_info(type).block_size;
  // F16: rows of 64 elements, so the weights buffer repacks them into panels.
  const int64_t k = type == DType::kF16 ? 64 : bs == 1 ? 45 : bs == kQK ? 160 : 512;
  const Shape shapes[] = {{1, 1, 1, 1, 1, 1},  {17, 5, 1, 1, 1, 1}, {70, 70, 1, 1, 1, 1},
                          {33, 9, 2, 1, 4, 2}, {16, 3, 1, 2, 3, 2}, {5, 40, 3, 1, 3, 1}};
  std::mt19937 rng(seed_);
  for (const Shape& s : shapes) {
    SCOPED_TRACE(::testing::Message() << "m " << s.m << " n " << s.n << " batches w " << s.w2 << "x"
                                      << s.w3 << " x " << s.x2 << "x" << s.x3);
    const int64_t wrows = s.m * s.w2 * s.w3, xrows = s.n * s.x2 * s.x3;
    const std::vector<float> wf = random_floats(static_cast<size_t>(wrows * k), rng);
    const std::vector<uint8_t> wq = testing::to_type(type, wf, wrows, k);
    const std::vector<float> wd = testing::to_float(type, wq, wrows, k);
    const std::vector<float> xv = random_floats(static_cast<size_t>(xrows * k), rng);
    // Oracles: exact activations (want), and activations as the SIMD tiers
    // quantize them (want_q) with the magnitude their rounding scales with.
    std::vector<float> w_scaled, w_min;
    testing::split_parts(type, wq, wrows, k, &w_scaled, &w_min);
    const std::vector<double> xq = testing::act_values(testing::act_format_of(type), xv, k);
    const size_t outputs = static_cast<size_t>(s.m * xrows);
    std::vector<double> want(outputs), want_q(outputs), mag(outputs), mag_ref(outputs);
    for (int64_t x3 = 0; x3 < s.x3; ++x3) {
      for (int64_t x2 = 0; x2 < s.x2; ++x2) {
        const int64_t wb = x2 / (s.x2 / s.w2) + s.w2 * (x3 / (s.x3 / s.w3));
        for (int64_t j = 0; j < s.n; ++j) {
          const int64_t xr = j + s.n * (x2 + s.x2 * x3);
          for (int64_t i = 0; i < s.m; ++i) {
            double sum = 0, sum_q = 0, m = 0, m_ref = 0;
            for (int64_t kk = 0; kk < k; ++kk) {
              const auto wi = static_cast<size_t>((wb * s.m + i) * k + kk);
              const auto xi = static_cast<size_t>(xr * k + kk);
              sum += static_cast<double>(wd[wi]) * xv[xi];
              sum_q += static_cast<double>(wd[wi]) * xq[xi];
              m += (std::fabs(w_scaled[wi]) + std::fabs(w_min[wi])) * std::fabs(xq[xi]);
              m_ref += std::fabs(wd[wi] * xv[xi]);
            }
            const auto o = static_cast<size_t>(xr * s.m + i);
            want[o] = sum;
            want_q[o] = sum_q;
            mag[o] = m;
            mag_ref[o] = m_ref;
          }
        }
      }
    }
    // Rounding bound of mat_kernels_test; NMSE needs enough outputs to mean anything.
    // (F16 panels add all k in one lane.)
    const double n_acc = type == DType::kF16 ? static_cast<double>(k)
                         : bs == 1           ? static_cast<double>((k + 7) / 8)
                                             : static_cast<double>(k / bs);
    const double nmse_limit = bs == 1 ? 1e-10 : 5e-4;
    std::vector<float> ref_host;
    for (BufferType* wtype : {&device().buffer_type(), &device().weights_buffer_type()}) {
      for (Isa isa : testing::tiers()) {
        SCOPED_TRACE(::testing::Message() << isa_name(isa) << " weights in " << wtype->name());
        const std::vector<float> got = run_mul_mat(device(), isa, *wtype, type, k, s, wq, xv);
        if (isa != Isa::kRef && wtype->is_host() && !has_row_kernel(type)) {
          // No kernel for the GGUF layout: every tier runs the reference, bit for bit.
          ASSERT_FALSE(ref_host.empty());
          EXPECT_EQ(got, ref_host) << "host weights without a row kernel";
          continue;
        }
        if (isa == Isa::kRef) {  // sequential f32 sums over k
          for (size_t o = 0; o < outputs; ++o) {
            ASSERT_NEAR(got[o], want[o],
                        static_cast<double>(k + 8) * std::ldexp(1.0, -23) * mag_ref[o]);
          }
          if (ref_host.empty()) {
            ref_host = got;
          } else {
            EXPECT_EQ(got, ref_host) << "ref tier differs between buffers";
          }
          continue;
        }
        if (outputs >= 64) {
          EXPECT_LE(testing::nmse(got, want), nmse_limit);
        }
        for (size_t o = 0; o < outputs; ++o) {
          ASSERT_NEAR(got[o], want_q[o], (n_acc + 8) * std::ldexp(1.0, -23) * mag[o]) << o;
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Types, MulMatTest,
                         ::testing::Values(DType::kF32, DType::kF16, DType::kBF16, DType::kQ4_0,
                                           DType::kQ4_1, DType::kQ5_0, DType::kQ5_1, DType::kQ8_0,
                                           DType::kQ2_K, DType::kQ3_K, DType::kQ4_K,
                                           DType::kQ5_K, DType::kQ6_K, DType::kIQ4_NL,
                                           DType::kIQ4_XS, DType::kMXFP4),
                         [](const auto& param_info) {
                           return std::string(dtype_name(param_info.param));
                         });

// Every output is one kernel's dot product whatever the chunking, so the
// thread count (1, 2, 3: GEMV runs of rows and GEMM chunks of other sizes,
// all taken from the op's counter) cannot change a single bit. m 300 at one
// column: 5 runs of 64 rows, the last a partial panel.
TEST(MulMatThreads, ResultsDoNotDependOnTheThreadCount) {
  const uint32_t seed = fresh_seed();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  std::mt19937 rng(seed);
  CpuBackend backend(1);
  CpuDevice& d = backend.cpu_device();
  const Isa best = testing::tiers().back();
  for (DType type : {DType::kF16, DType::kQ4_0, DType::kQ8_0, DType::kQ4_K}) {
    const int64_t k = 512;
    for (const Shape& s :
         {Shape{100, 3, 1, 1, 2, 1}, Shape{300, 1, 1, 1, 1, 1}, Shape{75, 90, 1, 1, 1, 1}}) {
      const int64_t wrows = s.m * s.w2 * s.w3;
      const std::vector<uint8_t> wq =
          testing::to_type(type, random_floats(static_cast<size_t>(wrows * k), rng), wrows, k);
      const std::vector<float> xv = random_floats(static_cast<size_t>(s.n * s.x2 * s.x3 * k), rng);
      std::vector<float> first;
      for (int threads : {1, 2, 3}) {
        d.set_threads(threads);
        d.set_min_work_per_thread(0);  // every thread, even on small shapes
        const std::vector<float> got =
            run_mul_mat(d, best, d.weights_buffer_type(), type, k, s, wq, xv);
        if (first.empty()) {
          first = got;
        } else {
          EXPECT_EQ(got, first) << dtype_name(type) << " n " << s.n << ", " << threads
                                << " threads";
        }
      }
    }
  }
}

// MUL_MATs of one input share its quantized copy: the device keeps the
// converted activations for the next MUL_MAT of the same input, format (Q8
// for Q8_0 / Q4_0, Q8_K for Q4_K) and copies (GEMM: one; GEMV: one per slot).
// Each result must be, bit for bit, what that matmul gives alone; a format or
// slot-count change converts afresh; and a node that writes over the input in
// between drops the copy. Run for a GEMM (40 columns) and a GEMV (one).
class MulMatShared : public ::testing::TestWithParam<int64_t> {};

TEST_P(MulMatShared, MatmulsOfOneInputGiveWhatEachGivesAlone) {
  const uint32_t seed = fresh_seed();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  std::mt19937 rng(seed);
  CpuBackend backend(2);
  CpuDevice& d = backend.cpu_device();
  const Isa best = testing::tiers().back();
  const int64_t k = 512, n = GetParam();
  // With the default threshold of work per thread, a 48-row GEMV runs on one
  // slot and a 256-row one on two.
  struct Mat {
    DType type;
    int64_t m;
  };
  const Mat mats[] = {{DType::kQ8_0, 48},  {DType::kQ4_0, 256}, {DType::kQ8_0, 256},
                      {DType::kQ4_K, 256}, {DType::kQ8_0, 256}, {DType::kQ8_0, 256}};
  constexpr size_t kAfterCopy = 5;  // reads x after a copy of z over it
  const std::vector<float> xv = random_floats(static_cast<size_t>(n * k), rng);
  const std::vector<float> zv = random_floats(static_cast<size_t>(n * k), rng);
  std::vector<std::vector<uint8_t>> wq;
  std::vector<std::vector<float>> alone;
  for (size_t i = 0; i < std::size(mats); ++i) {
    const auto [type, m] = mats[i];
    wq.push_back(testing::to_type(type, random_floats(static_cast<size_t>(m * k), rng), m, k));
    alone.push_back(run_mul_mat(d, best, d.weights_buffer_type(), type, k, {m, n, 1, 1, 1, 1},
                                wq[i], i == kAfterCopy ? zv : xv));
  }

  Graph g;
  Tensor* x = g.new_tensor(DType::kF32, {k, n}, "x");
  Tensor* z = g.new_tensor(DType::kF32, {k, n}, "z");
  BufferType& host = d.buffer_type();
  BufferType& wtype = d.weights_buffer_type();
  std::vector<std::unique_ptr<Buffer>> buffers;
  const auto place = [&](BufferType& bt, Tensor* t, const void* bytes) {
    buffers.push_back(bt.allocate(bt.alloc_size(*t)));
    buffers.back()->place(*t, 0);
    if (bytes != nullptr) buffers.back()->set_tensor(*t, bytes);
  };
  place(host, x, xv.data());
  place(host, z, zv.data());
  std::vector<Tensor*> nodes, ys;
  for (size_t i = 0; i < std::size(mats); ++i) {
    if (i == kAfterCopy) nodes.push_back(ops::cpy(g, z, x));  // writes z's values into x
    Tensor* w = g.new_tensor(mats[i].type, {k, mats[i].m}, "w");
    place(wtype, w, wq[i].data());
    ys.push_back(ops::mul_mat(g, w, x));
    place(host, ys.back(), nullptr);
    nodes.push_back(ys.back());
  }
  d.set_isa(best);
  d.compute(nodes);
  for (size_t i = 0; i < ys.size(); ++i) {
    std::vector<float> got(static_cast<size_t>(mats[i].m * n));
    ys[i]->buffer->get_tensor(*ys[i], got.data());
    EXPECT_EQ(got, alone[i]) << "matmul " << i << " (" << dtype_name(mats[i].type) << ")";
  }
}

INSTANTIATE_TEST_SUITE_P(GemmAndGemv, MulMatShared, ::testing::Values(int64_t{40}, int64_t{1}),
                         [](const auto& param_info) { return param_info.param == 1 ? "gemv" : "gemm"; });

TEST(RepackedWeights, OnlyMulMatAndGetRowsReadThem) {
  CpuBackend backend(1);
  CpuDevice& d = backend.cpu_device();
  Graph g;
  Tensor* w = g.new_tensor(DType::kQ4_0, {64, 20}, "w");
  Tensor* x = g.new_tensor(DType::kF32, {64, 3}, "x");
  Tensor* ids = g.new_tensor(DType::kI32, {4}, "ids");
  BufferType& wt = d.weights_buffer_type();
  auto buf = wt.allocate(wt.alloc_size(*w));
  buf->place(*w, 0);
  Tensor* rows = ops::view(g, w, {64, 10}, {w->nb[1]}, w->nb[1] * 5);
  EXPECT_TRUE(d.supports_op(*ops::mul_mat(g, w, x)));
  EXPECT_TRUE(d.supports_op(*ops::get_rows(g, w, ids)));
  EXPECT_FALSE(d.supports_op(*ops::mul_mat(g, rows, x)));  // a view into panels
  EXPECT_FALSE(d.supports_op(*ops::get_rows(g, rows, ids)));
  EXPECT_FALSE(d.supports_op(*ops::dup(g, w)));  // would copy panel bytes
  EXPECT_TRUE(d.supports_op(*rows));             // a view itself computes nothing
}

TEST(RepackedWeights, GetRowsReadsRepackedEmbeddings) {
  const uint32_t seed = fresh_seed();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  std::mt19937 rng(seed);
  CpuBackend backend(2);
  CpuDevice& d = backend.cpu_device();
  for (DType type : {DType::kQ4_0, DType::kQ8_0}) {
    const int64_t k = 96, vocab = 37;
    Graph g;
    Tensor* emb = g.new_tensor(type, {k, vocab}, "emb");
    Tensor* ids = g.new_tensor(DType::kI32, {5}, "ids");
    Tensor* y = ops::get_rows(g, emb, ids);
    BufferType& wt = d.weights_buffer_type();
    auto wbuf = wt.allocate(wt.alloc_size(*emb));
    wbuf->place(*emb, 0);
    const std::vector<uint8_t> bytes =
        testing::to_type(type, random_floats(static_cast<size_t>(k * vocab), rng), vocab, k);
    wbuf->set_tensor(*emb, bytes.data());
    auto hbuf = d.buffer_type().allocate(1 << 16);
    hbuf->place(*ids, 0);
    hbuf->place(*y, 1024);
    const std::vector<int32_t> picks = {0, 36, 17, 16, 15};
    hbuf->set_tensor(*ids, picks.data());
    ASSERT_TRUE(d.supports_op(*y));
    g.expand(y);
    d.compute(g.nodes());
    std::vector<float> got(static_cast<size_t>(k) * picks.size());
    hbuf->get_tensor(*y, got.data());
    const std::vector<float> all = testing::to_float(type, bytes, vocab, k);
    for (size_t i = 0; i < picks.size(); ++i) {
      for (int64_t e = 0; e < k; ++e) {
        ASSERT_EQ(got[i * static_cast<size_t>(k) + static_cast<size_t>(e)],
                  all[static_cast<size_t>(picks[i] * k + e)])
            << dtype_name(type) << " pick " << i << " element " << e;
      }
    }
  }
}

}  // namespace
}  // namespace tessera::cpu
