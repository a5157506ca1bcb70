// supports_op is exact in the other direction too: the CPU refuses nodes it
// cannot compute (wrong types, shapes or params, made by hand past the
// builders), and the builders refuse bad inputs with an Error naming the op.
#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "tessera/backends/builtin.h"
#include "tessera/core/error.h"
#include "tessera/core/graph.h"
#include "tessera/core/op_params.h"
#include "tessera/core/ops.h"
#include "tessera/runtime/runtime.h"

namespace tessera {
namespace {

class CpuRefuses : public ::testing::Test {
 protected:
  std::unique_ptr<Runtime> rt_ = make_runtime(false);
  Device& cpu_ = rt_->device("CPU0");
  Graph g_;
  Tensor* f32_ = g_.new_tensor(DType::kF32, {32, 4, 2}, "f32");
  Tensor* i32_ = g_.new_tensor(DType::kI32, {32, 4, 2}, "i32");
  Tensor* ids_ = g_.new_tensor(DType::kI32, {3, 2}, "ids");
  Tensor* pos_ = g_.new_tensor(DType::kI32, {2}, "pos");

  // A copy of `valid` (same op, shape, sources, params) to break by hand.
  Tensor* clone(const Tensor& valid) {
    Tensor* t = g_.new_node(valid.op, valid.type, valid.ne, {});
    t->src = valid.src;
    t->params = valid.params;
    return t;
  }
  // A copy of `valid` whose params P are changed by `edit`: decoded, edited and
  // written back, so only the edited fields differ from valid's.
  template <class P, class Edit>
  Tensor* edited(const Tensor& valid, Edit edit) {
    Tensor* t = clone(valid);
    P p = P::get(*t);
    edit(p);
    p.set(*t);
    return t;
  }
  void expect_refused(const Tensor& node, const std::string& why) {
    EXPECT_FALSE(cpu_.supports_op(node)) << "CPU0 accepts " << op_name(node.op) << ": " << why;
  }
};

TEST_F(CpuRefuses, WrongTypes) {
  expect_refused(*g_.new_node(Op::kAdd, DType::kI32, i32_->ne, {i32_, i32_}), "i32 add");
  expect_refused(*g_.new_node(Op::kNorm, DType::kI32, i32_->ne, {i32_}), "i32 norm");
  expect_refused(*g_.new_node(Op::kSoftMax, DType::kF32, i32_->ne, {i32_, nullptr}), "i32 softmax");
  Tensor* iq_rows = g_.new_tensor(DType::kIQ2_XXS, {256, 4, 2}, "iq2");
  expect_refused(*g_.new_node(Op::kGetRows, DType::kF32, {256, 3, 2, 1}, {iq_rows, ids_}),
                 "rows of a type without a dequantizer");
  Tensor* iq = g_.new_tensor(DType::kIQ2_XXS, {256, 4}, "iq2");
  Tensor* f_ids = g_.new_tensor(DType::kF32, {3, 2}, "float ids");
  expect_refused(*g_.new_node(Op::kGetRows, DType::kF32, {32, 3, 2, 1}, {f32_, f_ids}), "f32 ids");
  expect_refused(*g_.new_node(Op::kMulMat, DType::kF32, {4, 2, 1, 1},
                              {iq, g_.new_tensor(DType::kF32, {256, 2})}),
                 "iq2_xxs weights");
  expect_refused(*g_.new_node(Op::kMulMat, DType::kF32, {4, 4, 2, 1}, {f32_, i32_}), "i32 input");
  Tensor* im = ops::im2col(g_, g_.new_tensor(DType::kF32, {3, 4, 2}), f32_, 1, 1, 0, 0, 1, 1, false,
                           DType::kF32);
  Tensor* im_i32 = clone(*im);
  im_i32->type = DType::kI32;
  expect_refused(*im_i32, "im2col into i32");
}

TEST_F(CpuRefuses, CopiesItCannotMake) {
  auto copy = [&](Tensor* a, Tensor* b) {
    Tensor* t = g_.new_node(Op::kCpy, b->type, b->ne, {a, b});
    t->nb = b->nb;
    t->view_src = b;
    return t;
  };
  expect_refused(
      *copy(g_.new_tensor(DType::kF32, {256, 2}), g_.new_tensor(DType::kIQ2_XXS, {256, 2})),
      "into a type without a quantizer");
  expect_refused(*copy(g_.new_tensor(DType::kQ4_0, {64, 2}), g_.new_tensor(DType::kQ8_0, {64, 2})),
                 "between two quantized types");
  expect_refused(*copy(f32_, i32_), "f32 into i32");
  expect_refused(*copy(f32_, g_.new_tensor(DType::kF32, {31, 8})), "element counts differ");
  // A quantized destination whose blocks are not contiguous within a row.
  Tensor* q = g_.new_tensor(DType::kQ8_0, {64, 2}, "q8");
  q->nb[0] *= 2;
  expect_refused(*copy(g_.new_tensor(DType::kF32, {64, 2}), q), "into strided q8_0 blocks");
}

TEST_F(CpuRefuses, SetRowsItCannotMake) {
  Tensor* dst = g_.new_tensor(DType::kQ8_0, {64, 16, 2}, "cache");
  Tensor* values = g_.new_tensor(DType::kF32, {64, 3, 2}, "values");
  Tensor* ids = g_.new_tensor(DType::kI64, {3, 2}, "ids");
  Tensor* valid = ops::set_rows(g_, dst, values, ids);
  ASSERT_TRUE(cpu_.supports_op(*valid)) << "control: a valid set_rows";
  auto broken = [&](Tensor* d, Tensor* v, Tensor* i) {
    Tensor* t = clone(*valid);
    t->type = d->type;
    t->ne = d->ne;
    t->nb = d->nb;
    t->src[0] = v;
    t->src[1] = i;
    t->src[2] = d;
    return t;
  };
  expect_refused(*broken(g_.new_tensor(DType::kIQ2_XXS, {256, 16, 2}),
                         g_.new_tensor(DType::kF32, {256, 3, 2}), ids),
                 "into a type without a quantizer");
  expect_refused(*broken(g_.new_tensor(DType::kI32, {64, 16, 2}), values, ids), "into i32");
  expect_refused(*broken(dst, g_.new_tensor(DType::kF16, {64, 3, 2}), ids), "f16 values");
  expect_refused(*broken(dst, values, g_.new_tensor(DType::kF32, {3, 2})), "f32 ids");
  expect_refused(*broken(dst, values, g_.new_tensor(DType::kI32, {4, 2})), "4 ids for 3 rows");
  expect_refused(*broken(dst, values, g_.new_tensor(DType::kI32, {3, 3})),
                 "ids that do not broadcast over 2 slices");
  expect_refused(*broken(dst, g_.new_tensor(DType::kF32, {32, 3, 2}), ids), "shorter rows");
  Tensor* strided = g_.new_tensor(DType::kQ8_0, {64, 16, 2}, "strided");
  strided->nb[0] *= 2;
  expect_refused(*broken(strided, values, ids), "into strided q8_0 blocks");
  Tensor* mismatched = clone(*valid);
  mismatched->type = DType::kF16;
  expect_refused(*mismatched, "a node whose type is not its destination's");
}

TEST_F(CpuRefuses, BadParamsAndShapes) {
  ops::RopeParams p;
  p.n_dims = 32;
  Tensor* rope = ops::rope(g_, f32_, pos_, nullptr, p);
  ASSERT_TRUE(cpu_.supports_op(*rope)) << "control: a valid rope";
  expect_refused(*edited<RopeParams>(*rope, [](RopeParams& e) { e.n_dims = 31; }), "odd n_dims");
  expect_refused(*edited<RopeParams>(*rope, [](RopeParams& e) { e.n_dims = 34; }),
                 "n_dims beyond the head dim");
  // 8 is ggml's multi-section (M-RoPE) mode, which no backend here runs.
  expect_refused(
      *edited<RopeParams>(*rope, [](RopeParams& e) { e.mode = static_cast<RopeMode>(8); }),
      "an unknown rope mode");
  Tensor* fpos = clone(*rope);
  fpos->src[1] = g_.new_tensor(DType::kF32, {2});
  expect_refused(*fpos, "f32 positions");

  Tensor* unary = ops::unary(g_, f32_, UnaryOp::kSilu);
  expect_refused(
      *edited<UnaryParams>(*unary, [](UnaryParams& e) { e.op = static_cast<UnaryOp>(99); }),
      "unary function 99");

  Tensor* sm = ops::soft_max(g_, f32_, g_.new_tensor(DType::kF16, {32, 4}), 1.0f, 0.0f);
  Tensor* short_mask = clone(*sm);
  short_mask->src[1] = g_.new_tensor(DType::kF16, {32, 3});
  expect_refused(*short_mask, "a mask with fewer rows than the scores");

  Tensor* cat = ops::concat(g_, f32_, f32_, 1);
  expect_refused(*edited<ConcatParams>(*cat, [](ConcatParams& e) { e.dim = 7; }), "concat dim 7");
  Tensor* cat_mixed = clone(*cat);
  cat_mixed->src[1] = g_.new_tensor(DType::kF16, {32, 4, 2});
  expect_refused(*cat_mixed, "concat of f32 and f16");

  Tensor* pad = ops::pad(g_, f32_, 1, 0, 0, 0);
  expect_refused(*edited<PadParams>(*pad, [](PadParams& e) { e.after[0] = -1; }),
                 "negative padding");

  Tensor* b = g_.new_tensor(DType::kF32, {8, 2});
  Tensor* acc = ops::acc(g_, f32_, b, f32_->nb[1], f32_->nb[2], f32_->nb[3], 0);
  ASSERT_TRUE(cpu_.supports_op(*acc)) << "control: a valid acc";
  // Rows of 8 floats 8 bytes apart.
  expect_refused(*edited<AccParams>(*acc, [](AccParams& e) { e.nb1 = 8; }),
                 "acc rows that overlap");
  const auto past_end = static_cast<int32_t>(f32_->n_bytes()) - 16;
  expect_refused(*edited<AccParams>(*acc, [&](AccParams& e) { e.offset = past_end; }),
                 "acc view past the end");

  Tensor* sorted = ops::argsort(g_, f32_, ops::SortOrder::kAscending);
  expect_refused(*edited<ArgsortParams>(
                     *sorted, [](ArgsortParams& e) { e.order = static_cast<SortOrder>(5); }),
                 "sort order 5");

  Tensor* pool = ops::pool_2d(g_, f32_, ops::PoolOp::kMax, 2, 2, 2, 2, 0, 0);
  expect_refused(
      *edited<Pool2dParams>(*pool, [](Pool2dParams& e) { e.op = static_cast<PoolOp>(3); }),
      "pool op 3");
  // 1 is ggml's bilinear mode, which no backend here runs.
  expect_refused(
      *edited<UpscaleParams>(*ops::upscale(g_, f32_, 64, 8, 2, 1),
                             [](UpscaleParams& e) { e.mode = static_cast<UpscaleMode>(1); }),
      "bilinear upscale");
  expect_refused(*edited<GroupNormParams>(*ops::group_norm(g_, f32_, 2, 1e-5f),
                                          [](GroupNormParams& e) { e.n_groups = 0; }),
                 "zero groups");

  Tensor* q = g_.new_tensor(DType::kF32, {16, 3, 4});
  Tensor* kv = g_.new_tensor(DType::kF16, {16, 9, 2});
  Tensor* fa = ops::flash_attn_ext(g_, q, kv, kv, nullptr, 0.25f);
  ASSERT_TRUE(cpu_.supports_op(*fa)) << "control: a valid flash attention";
  Tensor* fa_iq = clone(*fa);
  fa_iq->src[1] = g_.new_tensor(DType::kIQ2_XXS, {256, 9, 2});
  expect_refused(*fa_iq, "iq2_xxs keys");
  Tensor* fa_heads = clone(*fa);
  fa_heads->src[1] = fa_heads->src[2] = g_.new_tensor(DType::kF16, {16, 9, 3});
  expect_refused(*fa_heads, "4 heads over 3 kv heads");
}

// Builders check their inputs: an Error naming the op, saying what was expected.
void expect_op_error(const std::function<void()>& build, const std::string& op) {
  try {
    build();
    ADD_FAILURE() << "[" << op << "] accepted a bad input";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_EQ(e.category(), ErrorCategory::kInvalidArgument) << msg;
    EXPECT_EQ(msg.rfind("[" + op + "]", 0), 0u) << msg;
    EXPECT_NE(msg.find("expected"), std::string::npos) << msg;
  }
}

TEST(OpBuilders, RefuseBadInputsNamingTheOp) {
  Graph g;
  Tensor* a = g.new_tensor(DType::kF32, {32, 4, 5});
  Tensor* i32 = g.new_tensor(DType::kI32, {32, 4, 5});
  Tensor* pos = g.new_tensor(DType::kI32, {5});
  ops::RopeParams p;
  p.n_dims = 32;
  expect_op_error([&] { ops::rope(g, a, g.new_tensor(DType::kF32, {5}), nullptr, p); }, "ROPE");
  expect_op_error([&] { ops::rope(g, a, g.new_tensor(DType::kI32, {4}), nullptr, p); }, "ROPE");
  p.n_dims = 33;
  expect_op_error([&] { ops::rope(g, a, pos, nullptr, p); }, "ROPE");
  p.n_dims = 32;
  expect_op_error([&] { ops::rope(g, a, pos, g.new_tensor(DType::kF32, {15}), p); }, "ROPE");
  expect_op_error([&] { ops::soft_max(g, i32, nullptr, 1.0f, 0.0f); }, "SOFT_MAX");
  expect_op_error(
      [&] {
        ops::soft_max(g, a, g.new_tensor(DType::kF16, {31, 4}), 1.0f, 0.0f);
      },
      "SOFT_MAX");
  expect_op_error([&] { ops::soft_max(g, a, nullptr, 1.0f, 8.0f); }, "SOFT_MAX");
  expect_op_error([&] { ops::diag_mask_inf(g, a, -1); }, "DIAG_MASK_INF");
  Tensor* q = g.new_tensor(DType::kF32, {16, 3, 4});
  expect_op_error(
      [&] {
        ops::flash_attn_ext(g, q, g.new_tensor(DType::kF16, {16, 9, 3}),
                            g.new_tensor(DType::kF16, {16, 9, 3}), nullptr, 1.0f);
      },
      "FLASH_ATTN_EXT");
  expect_op_error(
      [&] {
        ops::flash_attn_ext(g, q, g.new_tensor(DType::kF16, {8, 9, 2}),
                            g.new_tensor(DType::kF16, {16, 9, 2}), nullptr, 1.0f);
      },
      "FLASH_ATTN_EXT");
  expect_op_error([&] { ops::concat(g, a, g.new_tensor(DType::kF32, {31, 4, 5}), 1); }, "CONCAT");
  expect_op_error([&] { ops::concat(g, a, a, 4); }, "CONCAT");
  expect_op_error([&] { ops::repeat(g, a, g.new_tensor(DType::kF32, {48, 4, 5})); }, "REPEAT");
  expect_op_error(
      [&] {
        ops::acc(g, a, g.new_tensor(DType::kF32, {8, 2}), 16, a->nb[2], a->nb[3], 0);
      },
      "ACC");
  expect_op_error(
      [&] {
        ops::acc(g, a, g.new_tensor(DType::kF32, {8, 2}), a->nb[1], a->nb[2], a->nb[3], 2);
      },
      "ACC");
  expect_op_error([&] { ops::pad(g, a, -1, 0, 0, 0); }, "PAD");
  expect_op_error([&] { ops::arange(g, 0.0f, 1.0f, 0.0f); }, "ARANGE");
  expect_op_error([&] { ops::arange(g, 2.0f, 1.0f, 1.0f); }, "ARANGE");
  expect_op_error([&] { ops::timestep_embedding(g, a, 16, 10000); }, "TIMESTEP_EMBEDDING");
  expect_op_error([&] { ops::sum_rows(g, i32); }, "SUM_ROWS");
  expect_op_error([&] { ops::argsort(g, a, static_cast<ops::SortOrder>(3)); }, "ARGSORT");
  expect_op_error(  // no input column per token: refused, not a division by zero
      [&] {
        ops::mul_mat_id(g, g.new_tensor(DType::kF32, {8, 4, 3}), g.new_tensor(DType::kF32, {8, 0, 2}),
                        g.new_tensor(DType::kI32, {2, 2}));
      },
      "MUL_MAT_ID");
  Tensor* img = g.new_tensor(DType::kF32, {9, 7, 3, 2});
  expect_op_error(
      [&] {
        ops::im2col(g, g.new_tensor(DType::kF16, {3, 3, 4, 2}), img, 1, 1, 0, 0, 1, 1, true,
                    DType::kF32);
      },
      "IM2COL");
  expect_op_error(
      [&] {
        ops::im2col(g, g.new_tensor(DType::kF16, {3, 3, 3, 2}), img, 1, 1, 0, 0, 1, 1, true,
                    DType::kQ8_0);
      },
      "IM2COL");
  expect_op_error(
      [&] {
        ops::im2col(g, g.new_tensor(DType::kF16, {13, 3, 3, 2}), img, 1, 1, 0, 0, 1, 1, true,
                    DType::kF32);
      },
      "IM2COL");
  expect_op_error([&] { ops::pool_2d(g, img, ops::PoolOp::kAvg, 10, 2, 1, 1, 0, 0); }, "POOL_2D");
  expect_op_error([&] { ops::pool_2d(g, img, ops::PoolOp::kAvg, 2, 2, 0, 1, 0, 0); }, "POOL_2D");
  expect_op_error([&] { ops::upscale(g, img, 0, 7, 3, 2); }, "UPSCALE");
  expect_op_error([&] { ops::group_norm(g, a, 0, 1e-5f); }, "GROUP_NORM");
  expect_op_error([&] { ops::group_norm(g, i32, 2, 1e-5f); }, "GROUP_NORM");
  Tensor* cache = g.new_tensor(DType::kF16, {32, 16, 6, 2});
  Tensor* rows = g.new_tensor(DType::kF32, {32, 3, 6, 2});
  Tensor* ids = g.new_tensor(DType::kI64, {3, 3, 1});
  Tensor* one_id = g.new_tensor(DType::kI32, {1});
  ASSERT_NO_THROW(ops::set_rows(g, cache, rows, ids)) << "control: a valid set_rows";
  expect_op_error(
      [&] {
        ops::set_rows(g, g.new_tensor(DType::kIQ2_XXS, {256, 4}),
                      g.new_tensor(DType::kF32, {256, 1}), one_id);
      },
      "SET_ROWS");
  expect_op_error([&] { ops::set_rows(g, i32, a, g.new_tensor(DType::kI32, {4, 5})); }, "SET_ROWS");
  expect_op_error(
      [&] {
        ops::set_rows(g, cache, g.new_tensor(DType::kF16, {32, 3, 6, 2}), ids);
      },
      "SET_ROWS");
  expect_op_error(
      [&] {
        ops::set_rows(g, cache, rows, g.new_tensor(DType::kF32, {3, 3}));
      },
      "SET_ROWS");
  expect_op_error(
      [&] {
        ops::set_rows(g, cache, rows, g.new_tensor(DType::kI32, {4, 3}));
      },
      "SET_ROWS");
  expect_op_error(
      [&] {
        ops::set_rows(g, cache, rows, g.new_tensor(DType::kI32, {3, 4}));
      },
      "SET_ROWS");
  expect_op_error(
      [&] {
        ops::set_rows(g, cache, rows, g.new_tensor(DType::kI32, {3, 1, 1, 2}));
      },
      "SET_ROWS");
  expect_op_error(
      [&] {
        ops::set_rows(g, cache, g.new_tensor(DType::kF32, {31, 3, 6, 2}), ids);
      },
      "SET_ROWS");
  Tensor* strided_q8 = g.new_tensor(DType::kQ8_0, {64, 4});
  strided_q8->nb[0] *= 2;
  expect_op_error(
      [&] {
        ops::set_rows(g, strided_q8, g.new_tensor(DType::kF32, {64, 1}), one_id);
      },
      "SET_ROWS");
}

}  // namespace
}  // namespace tessera
