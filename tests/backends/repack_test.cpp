// The CPU weights buffer: Q4_0 / Q8_0 / IQ4_NL / Q2_K / Q3_K / Q4_K / Q5_K / Q6_K / IQ4_XS / F16
// repacked into
// 16-row panels give back exactly the bytes they were given, whole and for any range (checked
// against a plain mirror after random partial writes), for odd row counts and 3-D tensors; views
// read through their root; padding is counted in alloc_size; read_row_f32 equals the reference
// dequantizer; other types pass through.
#include <gtest/gtest.h>

#include <memory>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/kernels/panel_groups.h"
#include "backends/cpu/kernels/repack.h"
#include "kernel_test_util.h"
#include "tessera/core/graph.h"

namespace tessera::cpu {
namespace {

using testing::fresh_seed;
using testing::random_bytes;

struct Case {
  DType type;
  std::array<int64_t, 4> ne;
};

class RepackTest : public ::testing::TestWithParam<Case> {
 protected:
  CpuBackend backend_{1};
  BufferType& weights() { return backend_.cpu_device().weights_buffer_type(); }
  uint32_t seed_ = fresh_seed();
};

TEST_P(RepackTest, RoundTripsWholeAndRandomRanges) {
  SCOPED_TRACE(::testing::Message() << "seed " << seed_);
  const Case c = GetParam();
  std::mt19937 rng(seed_);
  Graph g;
  Tensor* t = g.new_tensor(c.type, {c.ne[0], c.ne[1], c.ne[2], c.ne[3]}, "w");
  const size_t n = t->n_bytes();
  const size_t padded_rows = static_cast<size_t>((c.ne[1] + 15) / 16 * 16);
  EXPECT_EQ(weights().alloc_size(*t),
            padded_rows * t->nb[1] * static_cast<size_t>(c.ne[2] * c.ne[3]));
  auto buf = weights().allocate(weights().alloc_size(*t));
  buf->place(*t, 0);
  ASSERT_TRUE(is_repacked(*t));

  std::vector<uint8_t> mirror = random_bytes(n, rng);
  buf->set_tensor(*t, mirror.data());
  std::vector<uint8_t> out(n);
  buf->get_tensor(*t, out.data());
  ASSERT_EQ(out, mirror);
  // The layout really differs from the original (it is not a plain copy).
  EXPECT_NE(std::memcmp(buf->base(), mirror.data(), std::min<size_t>(n, 64)), 0);

  std::uniform_int_distribution<size_t> pos(0, n);
  for (int i = 0; i < 200; ++i) {
    size_t a = pos(rng), b = pos(rng);
    if (a > b) std::swap(a, b);
    if (i % 2 == 0) {  // write [a, b)
      const std::vector<uint8_t> patch = random_bytes(b - a, rng);
      buf->set_tensor(*t, patch.data(), a, b - a);
      std::copy(patch.begin(), patch.end(), mirror.begin() + static_cast<ptrdiff_t>(a));
    } else {  // read [a, b)
      std::vector<uint8_t> part(b - a);
      buf->get_tensor(*t, part.data(), a, b - a);
      ASSERT_TRUE(std::equal(part.begin(), part.end(), mirror.begin() + static_cast<ptrdiff_t>(a)))
          << "range [" << a << ", " << b << ")";
    }
  }
  buf->get_tensor(*t, out.data());
  EXPECT_EQ(out, mirror);

  // read_row_f32 decodes panels exactly as the reference decodes the bytes.
  const int64_t k = c.ne[0];
  std::vector<float> got(static_cast<size_t>(k)), want(static_cast<size_t>(k));
  for (int64_t i3 = 0; i3 < c.ne[3]; ++i3) {
    for (int64_t i2 = 0; i2 < c.ne[2]; ++i2) {
      for (int64_t i1 = 0; i1 < c.ne[1]; ++i1) {
        const size_t off = static_cast<size_t>(i1) * t->nb[1] + static_cast<size_t>(i2) * t->nb[2] +
                           static_cast<size_t>(i3) * t->nb[3];
        // Random bytes may hold f16 NaN scales: compare bit patterns.
        dequantize_row(c.type, mirror.data() + off, want.data(), k);
        read_row_f32(*t, i1, i2, i3, got.data());
        ASSERT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0)
            << "row " << i1 << ", " << i2 << ", " << i3;
      }
    }
  }

  buf->clear(0x5a);
  buf->get_tensor(*t, out.data());
  EXPECT_EQ(out, std::vector<uint8_t>(n, 0x5a));
}

TEST_P(RepackTest, ViewsReadAndWriteThroughTheirRoot) {
  SCOPED_TRACE(::testing::Message() << "seed " << seed_);
  const Case c = GetParam();
  std::mt19937 rng(seed_);
  Graph g;
  Tensor* t = g.new_tensor(c.type, {c.ne[0], c.ne[1], c.ne[2], c.ne[3]}, "w");
  // Rows first .. ne1 - 1 of the first matrix, as a view.
  const int64_t first = c.ne[1] > 1 ? 1 : 0;
  const size_t offset = static_cast<size_t>(first) * t->nb[1];
  Tensor* v = g.new_view(Op::kView, t, c.type, {c.ne[0], c.ne[1] - first, 1, 1}, t->nb, offset);
  auto buf = weights().allocate(weights().alloc_size(*t));
  buf->place(*t, 0);
  buf->place(*v, 0);
  EXPECT_FALSE(is_repacked(*v));
  EXPECT_TRUE(is_view_of_repacked(*v));
  std::vector<uint8_t> mirror = random_bytes(t->n_bytes(), rng);
  buf->set_tensor(*t, mirror.data());
  std::vector<uint8_t> out(v->n_bytes());
  buf->get_tensor(*v, out.data());
  EXPECT_TRUE(std::equal(out.begin(), out.end(), mirror.begin() + static_cast<ptrdiff_t>(offset)));
  const std::vector<uint8_t> patch = random_bytes(7, rng);
  buf->set_tensor(*v, patch.data(), 3, patch.size());
  std::copy(patch.begin(), patch.end(), mirror.begin() + static_cast<ptrdiff_t>(offset + 3));
  std::vector<uint8_t> all(t->n_bytes());
  buf->get_tensor(*t, all.data());
  EXPECT_EQ(all, mirror);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, RepackTest,
    ::testing::Values(Case{DType::kQ4_0, {32, 1, 1, 1}}, Case{DType::kQ4_0, {64, 16, 1, 1}},
                      Case{DType::kQ4_0, {96, 17, 1, 1}}, Case{DType::kQ4_0, {160, 35, 3, 1}},
                      Case{DType::kQ4_0, {64, 5, 2, 3}}, Case{DType::kQ8_0, {32, 1, 1, 1}},
                      Case{DType::kQ8_0, {64, 16, 1, 1}}, Case{DType::kQ8_0, {96, 33, 1, 1}},
                      Case{DType::kQ8_0, {128, 7, 2, 2}}, Case{DType::kF16, {32, 1, 1, 1}},
                      Case{DType::kF16, {64, 17, 1, 1}}, Case{DType::kF16, {96, 35, 2, 1}},
                      Case{DType::kQ4_K, {256, 1, 1, 1}}, Case{DType::kQ4_K, {512, 17, 1, 1}},
                      Case{DType::kQ4_K, {768, 35, 2, 1}}, Case{DType::kIQ4_NL, {32, 1, 1, 1}},
                      Case{DType::kIQ4_NL, {96, 17, 1, 1}}, Case{DType::kIQ4_NL, {160, 35, 2, 1}},
                      Case{DType::kMXFP4, {32, 1, 1, 1}}, Case{DType::kMXFP4, {96, 17, 1, 1}},
                      Case{DType::kMXFP4, {160, 35, 2, 3}},
                      Case{DType::kIQ4_XS, {256, 1, 1, 1}}, Case{DType::kIQ4_XS, {512, 17, 1, 1}},
                      Case{DType::kIQ4_XS, {768, 33, 1, 2}}, Case{DType::kQ5_K, {256, 1, 1, 1}},
                      Case{DType::kQ5_K, {512, 17, 1, 1}}, Case{DType::kQ5_K, {768, 33, 2, 1}},
                      Case{DType::kQ6_K, {256, 1, 1, 1}}, Case{DType::kQ6_K, {512, 16, 1, 1}},
                      Case{DType::kQ6_K, {768, 33, 1, 2}}, Case{DType::kQ3_K, {256, 1, 1, 1}},
                      Case{DType::kQ3_K, {512, 17, 1, 1}}, Case{DType::kQ3_K, {768, 33, 2, 1}},
                      Case{DType::kQ2_K, {256, 1, 1, 1}}, Case{DType::kQ2_K, {512, 16, 1, 1}},
                      Case{DType::kQ2_K, {768, 35, 1, 2}}),
    [](const auto& param_info) {
      const Case& c = param_info.param;
      return std::string(dtype_name(c.type)) + "_" + std::to_string(c.ne[0]) + "x" +
             std::to_string(c.ne[1]) + "x" + std::to_string(c.ne[2]) + "x" +
             std::to_string(c.ne[3]);
    });

TEST(RepackBuffer, LargeTensorsRoundTripOnSeveralThreads) {
  // 72 MiB of Q8_0 (more than two 32 MiB shares: repack.cpp's transfer splits
  // it into runs of whole panels on several threads), with an odd row count
  // so the last run ends in a partial panel; then a range that starts and ends
  // mid-row.
  const uint32_t seed = fresh_seed();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  std::mt19937 rng(seed);
  CpuBackend backend{1};
  BufferType& weights = backend.cpu_device().weights_buffer_type();
  Graph g;
  Tensor* t = g.new_tensor(DType::kQ8_0, {4096, 17413}, "w");
  auto buf = weights.allocate(weights.alloc_size(*t));
  buf->place(*t, 0);
  ASSERT_TRUE(is_repacked(*t));
  const size_t n = t->n_bytes();
  ASSERT_GT(n, size_t{72} << 20);
  const std::vector<uint8_t> mirror = random_bytes(n, rng);
  buf->set_tensor(*t, mirror.data());
  std::vector<uint8_t> out(n);
  buf->get_tensor(*t, out.data());
  EXPECT_TRUE(out == mirror);
  const size_t a = 1000, size = n - 3000;
  std::vector<uint8_t> part(size);
  buf->get_tensor(*t, part.data(), a, size);
  EXPECT_EQ(std::memcmp(part.data(), mirror.data() + a, size), 0);
}

TEST(RepackBuffer, OtherTypesAreStoredAsTheyAre) {
  CpuBackend backend(1);
  BufferType& weights = backend.cpu_device().weights_buffer_type();
  EXPECT_FALSE(weights.is_host());
  EXPECT_TRUE(backend.cpu_device().supports_buffer_type(weights));
  std::mt19937 rng(fresh_seed());
  // F16 rows of 100 elements: not whole 32-element groups, so not repacked.
  for (DType type : {DType::kF32, DType::kF16, DType::kQ4_1, DType::kQ5_0}) {
    Graph g;
    Tensor* t = g.new_tensor(type, {type == DType::kF16 ? 100 : 256, 3}, "w");
    EXPECT_EQ(weights.alloc_size(*t), t->n_bytes());
    auto buf = weights.allocate(weights.alloc_size(*t));
    buf->place(*t, 0);
    EXPECT_FALSE(is_repacked(*t));
    const std::vector<uint8_t> in = random_bytes(t->n_bytes(), rng);
    buf->set_tensor(*t, in.data());
    EXPECT_EQ(std::memcmp(t->data, in.data(), in.size()), 0) << dtype_name(type);
  }
}

// A [k, 18] tensor of `type` in the weights buffer, set to bytes 7 i + 3:
// its second panel holds rows 16 and 17.
struct Numbered {
  CpuBackend backend{1};
  Graph g;
  Tensor* t;
  std::unique_ptr<Buffer> buf;
  std::vector<uint8_t> in;
  PanelLayout l;

  explicit Numbered(DType type, int64_t k = 64)
      : t(g.new_tensor(type, {k, 18}, "w")), in(t->n_bytes()) {
    BufferType& weights = backend.cpu_device().weights_buffer_type();
    buf = weights.allocate(weights.alloc_size(*t));
    buf->place(*t, 0);
    for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<uint8_t>(i * 7 + 3);
    buf->set_tensor(*t, in.data());
    l = panel_layout(*t);
  }
  const uint8_t* second_panel() const { return static_cast<const uint8_t*>(t->data) + l.panel_bytes; }
};

TEST(RepackBuffer, F16PanelsHoldSixteenRowsPerK) {
  // Element k of row r at panel + 32 k + 2 (r % 16) (repack.h, g = 2).
  const Numbered n(DType::kF16);
  ASSERT_TRUE(is_repacked(*n.t));
  EXPECT_EQ(n.l.panels, 2);
  EXPECT_EQ(n.l.panel_bytes, 16u * 64 * 2);
  const uint8_t* panel = n.second_panel();
  const int64_t r = 17;
  for (size_t k = 0; k < 64; ++k) {
    const size_t src = static_cast<size_t>(r) * 128 + 2 * k;
    EXPECT_EQ(panel[32 * k + 2 * 1], n.in[src]) << k;
    EXPECT_EQ(panel[32 * k + 2 * 1 + 1], n.in[src + 1]) << k;
  }
}

TEST(RepackBuffer, PanelsAreContiguousAlongK) {
  // Row r's block b: scale at panel + 2 (16 b + r % 16), quant byte j at
  // panel + 32 blocks + 16 qb b + 64 (j / 4) + 4 (r % 16) + j % 4 (repack.h).
  const Numbered n(DType::kQ8_0);
  const std::vector<uint8_t>& in = n.in;
  EXPECT_EQ(n.l.panels, 2);
  EXPECT_EQ(n.l.panel_bytes, 16u * 2 * 34);
  const int64_t r = 17, b = 1;
  const size_t src = static_cast<size_t>(r) * 68 + static_cast<size_t>(b) * 34;
  const uint8_t* panel = n.second_panel();  // rows 16 .. 31
  EXPECT_EQ(panel[2 * (16 * b + 1)], in[src]);
  EXPECT_EQ(panel[2 * (16 * b + 1) + 1], in[src + 1]);
  for (size_t j = 0; j < 32; ++j) {
    EXPECT_EQ(panel[32 * 2 + 16 * 32 * b + 64 * (j / 4) + 4 * 1 + j % 4], in[src + 2 + j]) << j;
  }
}

TEST(RepackBuffer, KQuantPanelsSplitScalesFromQuants) {
  // Q4_K, Q5_K (d, dmin leading), IQ4_XS (d, scales_h leading), Q6_K, Q3_K (d trailing) and Q2_K
  // (d, dmin trailing): scale byte s
  // of row r's block b at panel + 32 sb b + 32 (s / 2) + 2 (r % 16) + s % 2, quant byte j (the
  // block's other bytes in order) at panel + 16 sb blocks + 16 qb b + 64 (j / 4) + 4 (r % 16) + j %
  // 4 (repack.h), its group j / 4 moved where panel_groups.h says (Q6_K, Q5_K, Q3_K).
  struct K {
    DType type;
    size_t block, scale_at, sb;
  };
  for (const K k : {K{DType::kQ4_K, 144, 0, 4}, K{DType::kQ5_K, 176, 0, 4},
                    K{DType::kIQ4_XS, 136, 0, 4}, K{DType::kQ6_K, 210, 208, 2},
                    K{DType::kQ3_K, 110, 108, 2}, K{DType::kQ2_K, 84, 80, 4}}) {
    SCOPED_TRACE(dtype_name(k.type));
    const Numbered n(k.type, 512);
    ASSERT_TRUE(is_repacked(*n.t));
    const size_t qb = k.block - k.sb, blocks = 2;
    EXPECT_EQ(n.l.panel_bytes, 16 * blocks * k.block);
    const size_t r = 17, b = 1;
    const size_t src = r * blocks * k.block + b * k.block;
    const uint8_t* panel = n.second_panel();
    for (size_t s = 0; s < k.sb; ++s) {
      EXPECT_EQ(panel[32 * k.sb / 2 * b + 32 * (s / 2) + 2 * 1 + s % 2], n.in[src + k.scale_at + s])
          << s;
    }
    const size_t quant_at = k.scale_at == 0 ? k.sb : 0;
    for (size_t j = 0; j < qb; ++j) {
      uint8_t want = n.in[src + quant_at + j];
      if (k.type == DType::kQ6_K && j < groups::kQ6KTripleBytes) {  // its triples re-encoded
        const groups::Q6KMember m = groups::q6k_member(static_cast<int>(j));
        const auto byte = [&](int which) {
          return n.in[src + quant_at + static_cast<size_t>(groups::q6k_member_byte(m.first, which))];
        };
        const groups::Q6KTriple e = groups::q6k_encode(byte(0), byte(1), byte(2));
        want = m.which == 0 ? e.a : m.which == 1 ? e.b : e.c;
      }
      EXPECT_EQ(panel[16 * k.sb * blocks + 16 * qb * b + 64 * groups::panel_group(k.type, j / 4) +
                      4 * 1 + j % 4],
                want)
          << j;
    }
  }
}

}  // namespace
// Every Q6_K triple (ql0, ql1, qh) decodes back from its encoding, and the
// encoding's low 6 bits and top crumbs are the four weights the reference
// dequantizer reads from the GGUF bits.
TEST(RepackBuffer, Q6KTriplesRoundTripAndHoldTheFourWeights) {
  int bad = 0;
  for (int x = 0; x < (1 << 24); ++x) {
    const auto ql0 = static_cast<uint8_t>(x), ql1 = static_cast<uint8_t>(x >> 8),
               qh = static_cast<uint8_t>(x >> 16);
    const groups::Q6KTriple e = groups::q6k_encode(ql0, ql1, qh);
    const groups::Q6KTriple d = groups::q6k_decode(e.a, e.b, e.c);
    const int v[4] = {(ql0 & 0xF) | (qh & 3) << 4, (ql1 & 0xF) | (qh >> 2 & 3) << 4,
                      ql0 >> 4 | (qh >> 4 & 3) << 4, ql1 >> 4 | (qh >> 6 & 3) << 4};
    const int v3 = e.a >> 6 | (e.b >> 6) << 2 | (e.c >> 6) << 4;
    if (d.a != ql0 || d.b != ql1 || d.c != qh || (e.a & 63) != v[0] || (e.b & 63) != v[1] ||
        (e.c & 63) != v[2] || v3 != v[3]) {
      if (++bad <= 5) ADD_FAILURE() << "triple " << x;
    }
  }
  EXPECT_EQ(bad, 0);
  // Members: quant byte j's triple and place.
  for (int j = 0; j < groups::kQ6KTripleBytes; ++j) {
    const groups::Q6KMember m = groups::q6k_member(j);
    EXPECT_EQ(groups::q6k_member_byte(m.first, m.which), j) << j;
  }
}

TEST(RepackBuffer, ReorderedPanelsFollowTheKernelsReadingOrder) {
  // The GGUF groups (4 quant bytes each) in the order the Q6_K, Q5_K and Q3_K
  // kernels read a block sit in the panel one after another (panel_groups.h).
  std::vector<size_t> q6k = {48, 49, 50, 51};  // int8 scales
  for (size_t hh = 0; hh < 2; ++hh) {
    for (size_t t = 0; t < 8; ++t) {  // qh, then the two ql groups of step t
      for (size_t j : {32 + 8 * hh + t, 16 * hh + t, 16 * hh + 8 + t}) q6k.push_back(j);
    }
  }
  std::vector<size_t> q5k = {0, 1, 2};  // packed scales and mins
  for (size_t t = 0; t < 8; ++t) {      // qh t beside the first qs groups
    q5k.push_back(3 + t);
    q5k.push_back(11 + t);
  }
  for (size_t j = 19; j < 43; ++j) q5k.push_back(j);
  std::vector<size_t> q3k = {24, 25, 26};  // packed scales
  for (size_t t = 0; t < 8; ++t) {         // hmask t beside qs (first half)
    q3k.push_back(t);
    q3k.push_back(8 + t);
  }
  for (size_t j = 16; j < 24; ++j) q3k.push_back(j);
  for (const auto& [type, order] :
       {std::pair{DType::kQ6_K, q6k}, std::pair{DType::kQ5_K, q5k}, std::pair{DType::kQ3_K, q3k}}) {
    SCOPED_TRACE(dtype_name(type));
    for (size_t i = 0; i < order.size(); ++i) EXPECT_EQ(groups::panel_group(type, order[i]), i) << i;
  }
  for (size_t j = 0; j < 35; ++j) EXPECT_EQ(groups::panel_group(DType::kQ4_K, j), j);
}

}  // namespace tessera::cpu
