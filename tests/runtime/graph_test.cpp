// Tensor descriptors and graph building: shapes, strides, views, order.
#include <gtest/gtest.h>

#include "tessera/core/error.h"
#include "tessera/core/graph.h"
#include "tessera/core/ops.h"

namespace tessera {
namespace {

TEST(TensorTest, ContiguousStridesFollowTheBlockLayout) {
  Graph g;
  Tensor* f = g.new_tensor(DType::kF32, {5, 3, 2});
  EXPECT_EQ(f->nb, (std::array<size_t, 4>{4, 20, 60, 120}));
  EXPECT_EQ(f->n_bytes(), 120u);
  EXPECT_EQ(f->n_dims(), 3);
  EXPECT_TRUE(f->is_contiguous());
  Tensor* q = g.new_tensor(DType::kQ4_0, {64, 3});
  EXPECT_EQ(q->nb[0], 18u);
  EXPECT_EQ(q->nb[1], 36u);
  EXPECT_EQ(q->n_bytes(), 108u);
  EXPECT_EQ(q->row_size(), 36u);
}

TEST(TensorTest, BadShapesAreRefusedWithTheName) {
  Graph g;
  try {
    g.new_tensor(DType::kQ8_0, {33, 2}, "w");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'w'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("32"), std::string::npos) << e.what();
  }
  EXPECT_THROW(g.new_tensor(DType::kF32, {1, 2, 3, 4, 5}), Error);
  EXPECT_THROW(g.new_tensor(DType::kF32, {-1}), Error);
}

TEST(TensorTest, ViewsPermutesAndTransposes) {
  Graph g;
  Tensor* a = g.new_tensor(DType::kF32, {4, 3, 2}, "a");
  Tensor* t = ops::transpose(g, a);
  EXPECT_EQ(t->ne, (std::array<int64_t, 4>{3, 4, 2, 1}));
  EXPECT_EQ(t->nb[0], 16u);
  EXPECT_EQ(t->nb[1], 4u);
  EXPECT_TRUE(t->is_transposed());
  EXPECT_FALSE(t->is_contiguous());
  EXPECT_EQ(t->view_src, a);
  EXPECT_EQ(t->n_bytes(), a->n_bytes());  // same extent, other order

  Tensor* p = ops::permute(g, a, 2, 0, 1, 3);  // dim0 -> 2, dim1 -> 0, dim2 -> 1
  EXPECT_EQ(p->ne, (std::array<int64_t, 4>{3, 2, 4, 1}));
  EXPECT_EQ(p->nb, (std::array<size_t, 4>{16, 48, 4, 96}));
  EXPECT_TRUE(p->is_permuted());
  EXPECT_THROW(ops::permute(g, a, 0, 0, 1, 2), Error);

  Tensor* r = ops::reshape(g, a, {12, 2});
  EXPECT_TRUE(r->is_contiguous());
  EXPECT_THROW(ops::reshape(g, a, {5, 5}), Error);
  EXPECT_THROW(ops::reshape(g, t, {24}), Error);  // not contiguous

  // A view of a view points at the original bytes with the summed offset.
  Tensor* v1 = ops::view(g, a, {4, 2}, {16}, 16);
  Tensor* v2 = ops::view(g, v1, {2}, {}, 8);
  EXPECT_EQ(v2->view_src, a);
  EXPECT_EQ(v2->view_offset, 24u);
  EXPECT_THROW(ops::view(g, a, {4, 4}, {16}, 64), Error);  // past the end
}

TEST(GraphTest, ExpandOrdersSourcesFirstAndOnce) {
  Graph g;
  Tensor* x = g.new_tensor(DType::kF32, {8}, "x");
  Tensor* w = g.new_tensor(DType::kF32, {8}, "w");
  Tensor* a = ops::mul(g, x, w);
  Tensor* b = ops::silu(g, a);
  Tensor* c = ops::add(g, a, b);  // a is read twice
  g.expand(c);
  g.expand(c);  // idempotent
  ASSERT_EQ(g.nodes().size(), 3u);
  EXPECT_EQ(g.nodes()[0], a);
  EXPECT_EQ(g.nodes()[1], b);
  EXPECT_EQ(g.nodes()[2], c);
  ASSERT_EQ(g.leafs().size(), 2u);
  EXPECT_EQ(g.leafs()[0], x);
}

TEST(GraphTest, OpBuildersCheckShapes) {
  Graph g;
  Tensor* w = g.new_tensor(DType::kQ8_0, {64, 10});
  Tensor* x = g.new_tensor(DType::kF32, {64, 3, 4});
  Tensor* y = ops::mul_mat(g, w, x);
  EXPECT_EQ(y->ne, (std::array<int64_t, 4>{10, 3, 4, 1}));
  EXPECT_EQ(y->type, DType::kF32);
  EXPECT_THROW(ops::mul_mat(g, w, g.new_tensor(DType::kF32, {32, 3})), Error);
  EXPECT_THROW(ops::add(g, x, g.new_tensor(DType::kF32, {64, 2})), Error);  // 3 % 2 != 0
  EXPECT_NO_THROW(ops::add(g, x, g.new_tensor(DType::kF32, {64})));
  EXPECT_THROW(ops::get_rows(g, w, g.new_tensor(DType::kF32, {2})), Error);  // ids not i32
}

}  // namespace
}  // namespace tessera
