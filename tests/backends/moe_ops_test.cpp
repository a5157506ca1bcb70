// MUL_MAT_ID and ADD_ID through the CPU device: an expert id outside
// [0, n) is an Error naming it and where it was, on every tier and whether
// the weights have a kernel (Q4_0, repacked into panels) or not (F32 rows
// read by the reference), with several threads splitting the work. The op
// profile (bench --profile) counts each node, and a MUL_MAT_ID's weight bytes
// as the experts its ids picked, each once.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "kernel_test_util.h"
#include "tessera/core/error.h"
#include "tessera/core/graph.h"
#include "tessera/backends/profile.h"
#include "tessera/core/ops.h"

namespace tessera::cpu {
namespace {

class MoeOpsTest : public ::testing::TestWithParam<Isa> {
 protected:
  CpuBackend backend_{3};
  CpuDevice& device() { return backend_.cpu_device(); }

  // Places every leaf of g in host memory (weights in the device's weights
  // buffer), zeroed, then sets the i32 ids.
  void place(Graph& g, std::initializer_list<Tensor*> leaves, Tensor* weights, Tensor* ids,
             const std::vector<int32_t>& id_values) {
    for (Tensor* t : leaves) {
      BufferType& type = t == weights ? device().weights_buffer_type(*t) : device().buffer_type();
      buffers_.push_back(type.allocate(type.alloc_size(*t)));
      buffers_.back()->place(*t, 0);
      std::vector<uint8_t> zeros(t->n_bytes(), 0);
      t->buffer->set_tensor(*t, zeros.data());
    }
    ids->buffer->set_tensor(*ids, id_values.data());
    for (Tensor* node : g.nodes()) {
      if (node->data != nullptr) continue;
      BufferType& host = device().buffer_type();
      buffers_.push_back(host.allocate(host.alloc_size(*node)));
      buffers_.back()->place(*node, 0);
    }
  }

  void expect_error(Graph& g, const std::string& prefix, const std::string& range) {
    try {
      device().compute(g.nodes());
      ADD_FAILURE() << prefix << ": no Error";
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_EQ(e.category(), ErrorCategory::kInvalidArgument) << msg;
      EXPECT_EQ(msg.rfind(prefix, 0), 0u) << msg;
      EXPECT_NE(msg.find(range), std::string::npos) << msg;
    }
  }

  void expect_bad_id(DType type, int64_t k, int64_t tokens, const std::vector<int32_t>& ids_values,
                     const std::string& prefix);

  std::vector<std::unique_ptr<Buffer>> buffers_;
};

// MUL_MAT_ID over 4 experts of `type` (k columns, 32 rows) for `tokens`
// tokens of 2 slots each, given ids: compute must fail with `prefix`.
void MoeOpsTest::expect_bad_id(DType type, int64_t k, int64_t tokens, const std::vector<int32_t>& ids_values,
                               const std::string& prefix) {
  Graph g;
  Tensor* w = g.new_tensor(type, {k, 32, 4}, "experts");
  Tensor* x = g.new_tensor(DType::kF32, {k, 1, tokens}, "x");
  Tensor* ids = g.new_tensor(DType::kI32, {2, tokens}, "ids");
  Tensor* out = ops::mul_mat_id(g, w, x, ids);
  g.expand(out);
  place(g, {w, x, ids}, w, ids, ids_values);
  ASSERT_TRUE(device().supports_op(*out));
  expect_error(g, prefix, "expected 0..3");
}

TEST_P(MoeOpsTest, MulMatIdRefusesAnExpertIdOutOfRange) {
  device().set_isa(GetParam());
  device().set_min_work_per_thread(0);
  for (DType type : {DType::kQ4_0, DType::kF32}) {
    for (int32_t bad : {4, -1, 1 << 30}) {
      SCOPED_TRACE(::testing::Message() << dtype_name(type) << " id " << bad);
      expect_bad_id(type, 64, 3, {0, 1, 2, 3, bad, 0},
                    "[MUL_MAT_ID] expert id " + std::to_string(bad) + " at [0, 2]");
    }
  }
}

// One token takes MUL_MAT_ID's one-phase path, where every slot plans.
TEST_P(MoeOpsTest, MulMatIdRefusesAnExpertIdOutOfRangeInOneToken) {
  device().set_isa(GetParam());
  device().set_min_work_per_thread(0);
  for (DType type : {DType::kQ4_K, DType::kF32}) {
    SCOPED_TRACE(dtype_name(type));
    expect_bad_id(type, 256, 1, {3, 7}, "[MUL_MAT_ID] expert id 7 at [1, 0]");
  }
}

TEST_P(MoeOpsTest, AddIdRefusesARowIdOutOfRange) {
  device().set_isa(GetParam());
  device().set_min_work_per_thread(0);
  Graph g;
  Tensor* a = g.new_tensor(DType::kF32, {8, 2, 3}, "a");
  Tensor* b = g.new_tensor(DType::kF32, {8, 5}, "bias");
  Tensor* ids = g.new_tensor(DType::kI32, {2, 3}, "ids");
  Tensor* out = ops::add_id(g, a, b, ids);
  g.expand(out);
  place(g, {a, b, ids}, nullptr, ids, {0, 4, 1, 2, 3, 5});
  ASSERT_TRUE(device().supports_op(*out));
  expect_error(g, "[ADD_ID] row id 5 at [1, 2]", "expected 0..4");
}

// The builders check shapes: ids for another number of tokens, a count of
// slots that is not a multiple of the input's rows, i64 ids.
TEST(MoeOpsBuild, ShapesAreChecked) {
  Graph g;
  Tensor* w = g.new_tensor(DType::kQ8_0, {64, 32, 4}, "experts");
  Tensor* x = g.new_tensor(DType::kF32, {64, 2, 3}, "x");
  auto refused = [&](Tensor* ids) {
    try {
      ops::mul_mat_id(g, w, x, ids);
    } catch (const Error& e) {
      return std::string(e.what()).rfind("[MUL_MAT_ID]", 0) == 0;
    }
    return false;
  };
  EXPECT_TRUE(refused(g.new_tensor(DType::kI32, {2, 4}, "ids")));  // 4 tokens, x has 3
  EXPECT_TRUE(refused(g.new_tensor(DType::kI32, {3, 3}, "ids")));  // 3 slots over 2 rows
  EXPECT_TRUE(refused(g.new_tensor(DType::kI64, {2, 3}, "ids")));
  EXPECT_FALSE(refused(g.new_tensor(DType::kI32, {4, 3}, "ids")));
}

TEST_P(MoeOpsTest, OpProfileCountsNodesAndThePickedExpertsBytes) {
  device().set_isa(GetParam());
  device().set_min_work_per_thread(0);
  Graph g;
  Tensor* w = g.new_tensor(DType::kQ4_0, {64, 32, 4}, "experts");
  Tensor* x = g.new_tensor(DType::kF32, {64, 1, 3}, "x");
  Tensor* ids = g.new_tensor(DType::kI32, {2, 3}, "ids");
  Tensor* moe = ops::mul_mat_id(g, w, x, ids);
  Tensor* sum = ops::add(g, moe, moe);
  g.expand(sum);
  place(g, {w, x, ids}, w, ids, {1, 2, 2, 1, 1, 2});  // experts 1 and 2 only
  auto* set = reinterpret_cast<SetOpProfileFn>(backend_.proc_address(kOpProfileProc));
  ASSERT_NE(set, nullptr);
  OpProfile profile;
  set(device(), &profile);
  device().compute(g.nodes());
  device().compute(g.nodes());
  set(device(), nullptr);
  device().compute(g.nodes());  // not counted
  EXPECT_EQ(profile.graphs, 2);
  ASSERT_EQ(profile.ops.size(), 2u);
  const OpProfileRow& mm = profile.ops.at("MUL_MAT_ID q4_0");
  EXPECT_EQ(mm.calls, 2);
  EXPECT_EQ(mm.weight_bytes, 2.0 * 2.0 * static_cast<double>(w->nb[2]));
  const OpProfileRow& add = profile.ops.at("ADD");
  EXPECT_EQ(add.calls, 2);
  EXPECT_EQ(add.weight_bytes, 0.0);
  for (const OpProfileRow* r : {&mm, &add}) {
    EXPECT_GT(r->seconds, 0.0);
    EXPECT_LE(r->busy_mean_seconds, r->busy_max_seconds);
    EXPECT_LE(r->busy_max_seconds, r->seconds);
  }
  EXPECT_GE(profile.compute_seconds, mm.seconds + add.seconds);
}

INSTANTIATE_TEST_SUITE_P(Tiers, MoeOpsTest, ::testing::ValuesIn(testing::tiers()), testing::tier_name);

}  // namespace
}  // namespace tessera::cpu
