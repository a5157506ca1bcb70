// Every matrix kernel of every SIMD tier against a double-precision oracle on
// fresh random inputs: weights quantized by the reference quantizers,
// activations by the reference activation quantizers, so the only difference
// left is float rounding inside the kernel.
//
// Tolerance, from the arithmetic: the integer dot of a block is exact; each
// block term then takes at most 3 roundings (d_w * d_a, the int -> float
// convert, the FMA), and a lane accumulates n terms in sequence before a
// horizontal sum of at most 16 lanes (4 levels). First order, the error is
// below (n + 8) u S with u = 2^-24 and S = sum_k (|d q_k| + |m_k|) |a_k|, the
// magnitudes the kernel actually adds (minimums counted apart, as the kernels
// add them apart). We allow twice that: (n + 8) 2^-23 S.
#include <gtest/gtest.h>

#include <tuple>

#include "backends/cpu/kernels/repack.h"
#include "kernel_test_util.h"
#include "tessera/core/graph.h"

namespace tessera::cpu {
namespace {

using testing::fresh_seed;
using testing::random_floats;

struct WeightCase {
  const char* name;
  DType type;
  bool panels;
  MatKernel Kernels::*kernel;
};

const WeightCase kWeightCases[] = {
    {"f32", DType::kF32, false, &Kernels::f32},
    {"f16", DType::kF16, false, &Kernels::f16},
    {"bf16", DType::kBF16, false, &Kernels::bf16},
    {"q4_0", DType::kQ4_0, false, &Kernels::q4_0},
    {"q4_1", DType::kQ4_1, false, &Kernels::q4_1},
    {"q5_0", DType::kQ5_0, false, &Kernels::q5_0},
    {"q5_1", DType::kQ5_1, false, &Kernels::q5_1},
    {"q8_0", DType::kQ8_0, false, &Kernels::q8_0},
    {"q4_k", DType::kQ4_K, false, &Kernels::q4_k},
    {"q6_k", DType::kQ6_K, false, &Kernels::q6_k},
    {"q4_0_panel", DType::kQ4_0, true, &Kernels::q4_0_panel},
    {"q8_0_panel", DType::kQ8_0, true, &Kernels::q8_0_panel},
    {"iq4_nl_panel", DType::kIQ4_NL, true, &Kernels::iq4_nl_panel},
    {"mxfp4_panel", DType::kMXFP4, true, &Kernels::mxfp4_panel},
    {"f16_panel", DType::kF16, true, &Kernels::f16_panel},
    {"q2_k_panel", DType::kQ2_K, true, &Kernels::q2_k_panel},
    {"q3_k_panel", DType::kQ3_K, true, &Kernels::q3_k_panel},
    {"q4_k_panel", DType::kQ4_K, true, &Kernels::q4_k_panel},
    {"q5_k_panel", DType::kQ5_K, true, &Kernels::q5_k_panel},
    {"q6_k_panel", DType::kQ6_K, true, &Kernels::q6_k_panel},
    {"iq4_xs_panel", DType::kIQ4_XS, true, &Kernels::iq4_xs_panel},
};

class MatKernelTest : public ::testing::TestWithParam<std::tuple<Isa, WeightCase>> {
 protected:
  uint32_t seed_ = fresh_seed();
};

TEST_P(MatKernelTest, MatchesTheOracleWithinTheRoundingBound) {
  SCOPED_TRACE(::testing::Message() << "seed " << seed_);
  const auto [isa, wc] = GetParam();
  const MatKernel& mk = kernels_for(isa).*wc.kernel;
  ASSERT_TRUE(mk) << "tier " << isa_name(isa) << " has no " << wc.name << " kernel";
  std::mt19937 rng(seed_);
  const int64_t bs = dtype_info(wc.type).block_size;
  std::vector<int64_t> ks;
  if (bs == 1 && wc.panels) {
    ks = {32, 96, 1088};  // F16 panels: rows of whole 32-element groups
  } else if (bs == 1) {
    ks = {1, 7, 16, 33, 100, 256, 1100};  // 1100: long accumulations, and a tail
  } else if (bs == kQK) {
    ks = {32, 96, 512};
  } else {
    ks = {256, 768, 2304};  // 2304: GEMM K slices (8 blocks) and a short last one
  }
  // {60, 1}, {70, 1} and {150, 1}: GEMVs over several panels at once (avx2:
  // 2, avx512: 4) taken from runs of panels far apart (10 panels: stride 5 or
  // 2), with the partial panel inside such a group and after them. {16, 16}
  // and {40, 35}: whole AMX column tiles (16 columns), and two of them with a
  // short third.
  const std::pair<int64_t, int64_t> shapes[] = {{1, 1},   {5, 3},   {16, 8},  {17, 9},
                                                {35, 13}, {33, 1},  {1, 12},  {60, 1},
                                                {70, 1},  {150, 1}, {16, 16}, {40, 35}};
  for (int64_t k : ks) {
    for (auto [rows, cols] : shapes) {
      SCOPED_TRACE(::testing::Message() << "k " << k << " rows " << rows << " cols " << cols);
      // Weights: reference-quantized rows, laid out with a padded row stride
      // (row layouts) or packed into panels.
      const std::vector<float> wf = random_floats(static_cast<size_t>(rows * k), rng);
      const std::vector<uint8_t> wq = testing::to_type(wc.type, wf, rows, k);
      std::vector<float> w_scaled, w_min;
      testing::split_parts(wc.type, wq, rows, k, &w_scaled, &w_min);
      const size_t row_bytes = *tessera::row_bytes(wc.type, k);
      std::vector<uint8_t> w;
      MatArgs a;
      a.k = k;
      a.rows = rows;
      a.cols = cols;
      if (wc.panels) {
        Graph g;
        const PanelLayout l = panel_layout(*g.new_tensor(wc.type, {k, rows}));
        w.assign(l.total_bytes(), 0);
        pack_bytes(l, w.data(), wq.data(), 0, wq.size());
        a.w_stride = l.panel_bytes;
      } else {
        a.w_stride = row_bytes + 64;
        w.assign(a.w_stride * static_cast<size_t>(rows), 0xee);
        for (int64_t r = 0; r < rows; ++r) {
          std::memcpy(w.data() + static_cast<size_t>(r) * a.w_stride,
                      wq.data() + static_cast<size_t>(r) * row_bytes, row_bytes);
        }
      }
      a.w = w.data();

      // Activations in the kernel's format, columns at a padded stride, and
      // the values they stand for.
      const std::vector<float> xf = random_floats(static_cast<size_t>(cols * k), rng);
      const std::vector<double> xv = testing::act_values(mk.act, xf, k);
      const bool f32 = mk.act == ActFormat::kF32 || mk.act == ActFormat::kF32Groups;
      const size_t col_bytes = f32 ? static_cast<size_t>(k) * 4
                               : mk.act == ActFormat::kQ8
                                   ? static_cast<size_t>(k / kQK) * sizeof(BlockQ8)
                                   : static_cast<size_t>(k / kQKK) * sizeof(block_q8_K);
      // (Groups of columns are k-major and packed: no padding between columns.)
      a.x_stride = mk.act == ActFormat::kF32Groups ? col_bytes : col_bytes + 64;
      std::vector<uint8_t> x(a.x_stride * static_cast<size_t>(cols), 0);
      for (int64_t c = 0; c < cols; ++c) {
        uint8_t* dst = x.data() + static_cast<size_t>(c) * a.x_stride;
        const float* src = xf.data() + c * k;
        if (mk.act == ActFormat::kF32Groups) {  // element i of column c
          const int64_t g0 = c / kActGroup * kActGroup;
          const int64_t width = std::min(kActGroup, cols - g0);
          auto* group = reinterpret_cast<float*>(x.data()) + g0 * k;
          for (int64_t i = 0; i < k; ++i) group[i * width + (c - g0)] = src[i];
        } else if (mk.act == ActFormat::kF32) {
          std::memcpy(dst, src, col_bytes);
        } else if (mk.act == ActFormat::kQ8) {
          quantize_q8_ref(src, reinterpret_cast<BlockQ8*>(dst), k);
        } else {
          quantize_row_q8_K_ref(src, reinterpret_cast<block_q8_K*>(dst), k);
        }
      }
      a.x = x.data();

      // Outputs with sentinels between columns.
      const float kSentinel = -12345.5f;
      a.out_stride = static_cast<size_t>(rows + 3) * sizeof(float);
      std::vector<float> out(static_cast<size_t>((rows + 3) * cols), kSentinel);
      a.out = out.data();
      mk.run(a);

      // Terms one lane adds in sequence: float rows split k over 8 lanes;
      // F16 panels add all k in one lane (outer product).
      const double n =
          bs == 1 ? static_cast<double>(wc.panels ? k : (k + 7) / 8) : static_cast<double>(k / bs);
      for (int64_t c = 0; c < cols; ++c) {
        for (int64_t r = 0; r < rows + 3; ++r) {
          const float got = out[static_cast<size_t>(c * (rows + 3) + r)];
          if (r >= rows) {
            ASSERT_EQ(got, kSentinel) << "overran into row " << r << " of column " << c;
            continue;
          }
          double want = 0, mag = 0;
          for (int64_t i = 0; i < k; ++i) {
            const size_t wi = static_cast<size_t>(r * k + i);
            const double xi = xv[static_cast<size_t>(c * k + i)];
            want += (static_cast<double>(w_scaled[wi]) + w_min[wi]) * xi;
            mag += (std::fabs(w_scaled[wi]) + std::fabs(w_min[wi])) * std::fabs(xi);
          }
          const double tol = (n + 8) * std::ldexp(1.0, -23) * mag;
          ASSERT_NEAR(got, want, tol) << "row " << r << " column " << c;
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Tiers, MatKernelTest,
                         ::testing::Combine(::testing::ValuesIn(testing::simd_tiers()),
                                            ::testing::ValuesIn(kWeightCases)),
                         [](const auto& param_info) {
                           return std::string(isa_name(std::get<0>(param_info.param))) + "_" +
                                  std::get<1>(param_info.param).name;
                         });

// MXFP4's E8M0 scales over their whole range, the subnormal ends (e = 0, 1)
// included: one block per row, activations whole numbers up to 127 (their
// Q8 scale exactly 1), so every product is an exact float and the kernel's
// result must equal the dequantized dot exactly. (Random weights give e near
// 127 only.)
TEST(Mxfp4Panel, ReadsEveryE8M0ScaleExactly) {
  std::mt19937 rng(fresh_seed());
  const uint8_t es[] = {0, 1, 2, 3, 20, 100, 126, 127, 128, 129, 150, 180, 200, 201, 202, 203};
  constexpr int64_t kRows = 16;
  std::vector<block_mxfp4> w(kRows);
  for (int64_t r = 0; r < kRows; ++r) {
    w[r].e = es[r];
    for (uint8_t& q : w[r].qs) q = static_cast<uint8_t>(rng());
  }
  std::vector<float> x(kQK);
  for (float& v : x) v = static_cast<float>(static_cast<int>(rng() % 255) - 127);
  x[5] = 127;
  BlockQ8 xq;
  quantize_q8_ref(x.data(), &xq, kQK);
  ASSERT_EQ(xq.d, 1.0f);
  Graph g;
  const PanelLayout l = panel_layout(*g.new_tensor(DType::kMXFP4, {kQK, kRows}));
  std::vector<uint8_t> panels(l.total_bytes());
  pack_bytes(l, panels.data(), reinterpret_cast<const uint8_t*>(w.data()), 0,
             w.size() * sizeof(block_mxfp4));
  for (Isa isa : testing::simd_tiers()) {
    SCOPED_TRACE(isa_name(isa));
    std::vector<float> out(kRows, -1.0f);
    MatArgs a;
    a.k = kQK;
    a.w = panels.data();
    a.w_stride = l.panel_bytes;
    a.rows = kRows;
    a.x = reinterpret_cast<const uint8_t*>(&xq);
    a.x_stride = sizeof(BlockQ8);
    a.cols = 1;
    a.out = out.data();
    a.out_stride = kRows * sizeof(float);
    kernels_for(isa).mxfp4_panel.run(a);
    for (int64_t r = 0; r < kRows; ++r) {
      float wf[kQK];
      dequantize_row_mxfp4_ref(&w[r], wf, kQK);
      double want = 0;
      for (int i = 0; i < kQK; ++i) want += static_cast<double>(wf[i]) * x[i];
      EXPECT_EQ(out[r], static_cast<float>(want)) << "row " << r << " e " << int{es[r]};
    }
  }
}

TEST(RefTier, HasQuantizersAndNoMatrixKernels) {
  const Kernels& ref = kernels_for(Isa::kRef);
  EXPECT_EQ(ref.isa, Isa::kRef);
  EXPECT_EQ(ref.quantize_q8, &quantize_q8_ref);
  for (const WeightCase& wc : kWeightCases) EXPECT_FALSE(ref.*wc.kernel) << wc.name;
}

}  // namespace
}  // namespace tessera::cpu
