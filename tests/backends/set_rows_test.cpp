// SET_ROWS through the CPU device: an id outside [0, R) is an Error naming
// it (i32 and i64, too large and negative), on every tier; and Q8_0 rows
// written through a SIMD tier's activation quantizer are byte for byte those
// of the ref tier (quantize_row), NaN, infinities and zero blocks included.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "kernel_test_util.h"
#include "tessera/core/error.h"
#include "tessera/core/graph.h"
#include "tessera/core/half.h"
#include "tessera/core/ops.h"

namespace tessera::cpu {
namespace {

using testing::fresh_seed;
using testing::random_floats;

// One SET_ROWS node over host buffers: dst [ne0, rows], values [ne0, n], ids [n].
struct SetRowsRun {
  Graph g;
  Tensor* dst;
  Tensor* values;
  Tensor* ids;
  Tensor* out;
  std::vector<std::unique_ptr<Buffer>> buffers;

  SetRowsRun(CpuDevice& device, DType dst_type, DType id_type, int64_t ne0, int64_t rows,
             int64_t n) {
    dst = g.new_tensor(dst_type, {ne0, rows}, "dst");
    values = g.new_tensor(DType::kF32, {ne0, n}, "values");
    ids = g.new_tensor(id_type, {n}, "ids");
    out = ops::set_rows(g, dst, values, ids);
    g.expand(out);
    for (Tensor* t : {dst, values, ids}) {
      BufferType& host = device.buffer_type();
      buffers.push_back(host.allocate(host.alloc_size(*t)));
      buffers.back()->place(*t, 0);
    }
    buffers[0]->place(*out, 0);
  }
  void set_ids(const std::vector<int64_t>& v) {
    std::vector<uint8_t> bytes(ids->n_bytes());
    for (size_t i = 0; i < v.size(); ++i) {
      if (ids->type == DType::kI64) {
        std::memcpy(bytes.data() + 8 * i, &v[i], 8);
      } else {
        const auto x = static_cast<int32_t>(v[i]);
        std::memcpy(bytes.data() + 4 * i, &x, 4);
      }
    }
    ids->buffer->set_tensor(*ids, bytes.data());
  }
};

class SetRowsTest : public ::testing::TestWithParam<Isa> {
 protected:
  CpuBackend backend_{3};
  CpuDevice& device() { return backend_.cpu_device(); }
};

TEST_P(SetRowsTest, IdOutOfRangeThrowsNamingIt) {
  device().set_isa(GetParam());
  device().set_min_work_per_thread(0);  // the ids split over threads
  struct Bad {
    DType id_type;
    DType dst_type;
    int64_t id;
  };
  for (const Bad& bad : {Bad{DType::kI32, DType::kF16, 16}, Bad{DType::kI64, DType::kQ8_0, -1},
                         Bad{DType::kI64, DType::kF32, int64_t{1} << 40}}) {
    SetRowsRun run(device(), bad.dst_type, bad.id_type, 64, 16, 4);
    std::vector<float> v(static_cast<size_t>(run.values->n_elements()), 0.5f);
    run.values->buffer->set_tensor(*run.values, v.data());
    run.set_ids({3, 0, bad.id, 7});
    ASSERT_TRUE(device().supports_op(*run.out));
    try {
      device().compute(run.g.nodes());
      ADD_FAILURE() << "id " << bad.id << " into 16 rows accepted";
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_EQ(e.category(), ErrorCategory::kInvalidArgument) << msg;
      EXPECT_EQ(msg.rfind("[SET_ROWS] row id " + std::to_string(bad.id) + " ", 0), 0u) << msg;
      EXPECT_NE(msg.find("expected 0..15"), std::string::npos) << msg;
    }
  }
}

// Rows `ids` of a [ne0, rows] destination of `type`, written from `v` (one
// row per id) over random prior bytes, on the ref tier and on `isa`: both
// must hold exactly the scalar reference's bytes, the other rows untouched.
void expect_reference_bytes(CpuDevice& device, Isa isa, DType type, int64_t ne0, int64_t rows,
                            const std::vector<float>& v, const std::vector<int64_t>& ids,
                            uint32_t seed) {
  std::mt19937 rng(seed);
  const size_t row = *row_bytes(type, ne0);
  const std::vector<uint8_t> prior = testing::random_bytes(row * static_cast<size_t>(rows), rng);
  const auto n = static_cast<int64_t>(ids.size());
  auto written = [&](Isa tier) {
    device.set_isa(tier);
    SetRowsRun run(device, type, DType::kI64, ne0, rows, n);
    run.dst->buffer->set_tensor(*run.dst, prior.data());
    run.values->buffer->set_tensor(*run.values, v.data());
    run.set_ids(ids);
    device.compute(run.g.nodes());
    std::vector<uint8_t> out(run.dst->n_bytes());
    run.dst->buffer->get_tensor(*run.dst, out.data());
    return out;
  };
  std::vector<uint8_t> want = prior;
  for (size_t i = 0; i < ids.size(); ++i) {
    const float* x = v.data() + static_cast<int64_t>(i) * ne0;
    uint8_t* dst = want.data() + static_cast<size_t>(ids[i]) * row;
    if (type == DType::kF16) {
      fp32_to_fp16_row(x, reinterpret_cast<uint16_t*>(dst), ne0);
    } else {
      quantize_row(type, x, dst, ne0);
    }
  }
  EXPECT_EQ(written(Isa::kRef), want) << "seed " << seed;
  EXPECT_EQ(written(isa), want) << "seed " << seed;
}

TEST_P(SetRowsTest, Q8_0RowsEqualTheReferenceBytes) {
  const uint32_t seed = fresh_seed();
  std::mt19937 rng(seed);
  const int64_t ne0 = 32 * 11;  // 11 blocks: more than one quantizer call
  std::vector<float> v = random_floats(static_cast<size_t>(ne0 * 5), rng);
  // Blocks the quantizer must get right too: all zeros, a NaN, infinities.
  std::fill(v.begin() + 32, v.begin() + 64, 0.0f);
  v[70] = std::numeric_limits<float>::quiet_NaN();
  v[ne0 + 5] = std::numeric_limits<float>::infinity();
  v[2 * ne0 + 40] = -std::numeric_limits<float>::infinity();
  expect_reference_bytes(device(), GetParam(), DType::kQ8_0, ne0, 9, v, {8, 0, 3, 4, 6}, seed);
}

TEST_P(SetRowsTest, F16RowsEqualTheReferenceBits) {
  const uint32_t seed = fresh_seed();
  std::mt19937 rng(seed);
  const int64_t ne0 = 8 * 9 + 5;  // a scalar tail after the 8-wide steps
  std::vector<float> v = random_floats(static_cast<size_t>(ne0 * 4), rng);
  // Values the conversion must round alike: halfway cases, subnormals,
  // overflow, NaN, infinities, signed zero.
  const float special[] = {1.0f + 1.0f / 2048,  1.0f + 3.0f / 2048, 65504.0f, 65520.0f, 1e-7f,
                           -3e-8f, 6.0e-5f, std::numeric_limits<float>::quiet_NaN(),
                           -std::numeric_limits<float>::infinity(), -0.0f};
  std::copy(std::begin(special), std::end(special), v.begin() + 3);
  expect_reference_bytes(device(), GetParam(), DType::kF16, ne0, 7, v, {6, 0, 2, 5}, seed);
}

INSTANTIATE_TEST_SUITE_P(Tiers, SetRowsTest, ::testing::ValuesIn(testing::tiers()),
                         testing::tier_name);

}  // namespace
}  // namespace tessera::cpu
