// The op params layout is ggml's and every backend decodes it: each builder's
// raw slots are pinned here, and each params struct reads back what it wrote.
#include "tessera/core/op_params.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <bit>
#include <initializer_list>

#include "tessera/core/graph.h"
#include "tessera/core/ops.h"

namespace tessera {
namespace {

int32_t f(float v) {
  return std::bit_cast<int32_t>(v);
}

// node's params are `want` followed by zeros.
void expect_slots(const Tensor& node, std::initializer_list<int32_t> want) {
  std::array<int32_t, kMaxOpParams> expected{};
  std::copy(want.begin(), want.end(), expected.begin());
  EXPECT_EQ(node.params, expected) << op_name(node.op);
}

// P::get then set onto a blank node gives back node's params exactly.
template <class P>
void expect_round_trip(const Tensor& node) {
  Tensor copy;
  P::get(node).set(copy);
  EXPECT_EQ(copy.params, node.params) << op_name(node.op);
}

TEST(OpParams, BuildersWriteGgmlSlots) {
  Graph g;
  Tensor* a = g.new_tensor(DType::kF32, {8, 4, 2});
  Tensor* img = g.new_tensor(DType::kF32, {9, 7, 3, 2});

  Tensor* scale = ops::scale(g, a, 2.0f, 0.5f);
  expect_slots(*scale, {f(2.0f), f(0.5f)});
  expect_round_trip<ScaleParams>(*scale);
  Tensor* clamp = ops::clamp(g, a, -1.0f, 3.0f);
  expect_slots(*clamp, {f(-1.0f), f(3.0f)});
  expect_round_trip<ClampParams>(*clamp);
  Tensor* leaky = ops::unary(g, a, UnaryOp::kLeakyRelu, 0.1f);
  expect_slots(*leaky, {static_cast<int32_t>(UnaryOp::kLeakyRelu), f(0.1f)});
  expect_round_trip<UnaryParams>(*leaky);

  expect_slots(*ops::norm(g, a, 1e-5f), {f(1e-5f)});
  expect_slots(*ops::rms_norm(g, a, 1e-6f), {f(1e-6f)});
  expect_round_trip<NormParams>(*ops::rms_norm(g, a, 1e-6f));
  Tensor* gn = ops::group_norm(g, img, 2, 1e-6f);
  expect_slots(*gn, {2, f(1e-6f)});
  expect_round_trip<GroupNormParams>(*gn);

  RopeParams rp;
  rp.n_dims = 8;
  rp.mode = RopeMode::kNeox;
  rp.n_ctx_orig = 4096;
  rp.freq_base = 5e5f;
  rp.freq_scale = 0.25f;
  rp.ext_factor = 1.0f;
  rp.attn_factor = 1.5f;
  rp.beta_fast = 16.0f;
  rp.beta_slow = 2.0f;
  Tensor* rope = ops::rope(g, a, g.new_tensor(DType::kI32, {2}), nullptr, rp);
  // Slots 0 and 3 are ggml's legacy n_past and n_ctx.
  expect_slots(*rope, {0, 8, 2, 0, 4096, f(5e5f), f(0.25f), f(1.0f), f(1.5f), f(16.0f), f(2.0f)});
  expect_round_trip<RopeParams>(*rope);

  Tensor* sm = ops::soft_max(g, a, g.new_tensor(DType::kF16, {8, 4}), 0.125f, 8.0f);
  expect_slots(*sm, {f(0.125f), f(8.0f)});
  expect_round_trip<SoftMaxParams>(*sm);
  Tensor* diag = ops::diag_mask_inf(g, a, 3);
  expect_slots(*diag, {3});
  expect_round_trip<DiagMaskInfParams>(*diag);
  Tensor* kv = g.new_tensor(DType::kF16, {8, 9, 2});
  Tensor* fa = ops::flash_attn_ext(g, a, kv, kv, nullptr, 0.25f, 0.0f, 30.0f);
  expect_slots(*fa, {f(0.25f), f(0.0f), f(30.0f)});
  expect_round_trip<FlashAttnExtParams>(*fa);

  Tensor* cat = ops::concat(g, a, a, 1);
  expect_slots(*cat, {1});
  expect_round_trip<ConcatParams>(*cat);
  Tensor* acc = ops::acc(g, a, g.new_tensor(DType::kF32, {4, 2}), 32, 128, 256, 16);
  expect_slots(*acc, {32, 128, 256, 16});
  expect_round_trip<AccParams>(*acc);
  Tensor* pad = ops::pad(g, a, 1, 2, 0, 3);
  expect_slots(*pad, {0, 1, 0, 2, 0, 0, 0, 3});  // (before, after) per dim
  expect_round_trip<PadParams>(*pad);

  Tensor* ar = ops::arange(g, 0.0f, 10.0f, 2.0f);
  expect_slots(*ar, {f(0.0f), f(10.0f), f(2.0f)});
  expect_round_trip<ArangeParams>(*ar);
  Tensor* ts = ops::timestep_embedding(g, g.new_tensor(DType::kF32, {3}), 16, 10000);
  expect_slots(*ts, {16, 10000});
  expect_round_trip<TimestepEmbeddingParams>(*ts);
  Tensor* sorted = ops::argsort(g, a, ops::SortOrder::kDescending);
  expect_slots(*sorted, {1});
  expect_round_trip<ArgsortParams>(*sorted);

  Tensor* col = ops::im2col(g, g.new_tensor(DType::kF16, {3, 3, 3, 4}), img, 1, 2, 1, 0, 1, 1, true,
                            DType::kF16);
  expect_slots(*col, {1, 2, 1, 0, 1, 1, 1});
  expect_round_trip<Im2ColParams>(*col);
  Tensor* pool = ops::pool_2d(g, img, ops::PoolOp::kAvg, 2, 3, 2, 1, 1, 0);
  expect_slots(*pool, {1, 2, 3, 2, 1, 1, 0});
  expect_round_trip<Pool2dParams>(*pool);
  Tensor* up = ops::upscale(g, img, 18, 14, 3, 2);
  expect_slots(*up, {0});  // nearest
  expect_round_trip<UpscaleParams>(*up);
}

}  // namespace
}  // namespace tessera
