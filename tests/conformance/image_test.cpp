// Image and diffusion helpers: IM2COL (1-D, 2-D; stride, padding, dilation),
// POOL_2D (max, avg, padded), UPSCALE (nearest, up and down), ARANGE and
// TIMESTEP_EMBEDDING.
#include <cfloat>
#include <cmath>

#include "conformance/op_test.h"
#include "tessera/core/op_params.h"

namespace tessera::conformance {
namespace {

using Shape = std::array<int64_t, kMaxDims>;

// ---- naive references ------------------------------------------------------------------

std::vector<double> naive_im2col(const Tensor& node, const HostValues& in) {
  const Tensor& k = *node.src[0];
  const Tensor& a = *node.src[1];
  const Im2ColParams p = Im2ColParams::get(node);
  const bool is_2d = p.is_2d;
  const int64_t s0 = p.s0, p0 = p.p0, d0 = p.d0;
  const int64_t s1 = is_2d ? p.s1 : 1, p1 = is_2d ? p.p1 : 0, d1 = is_2d ? p.d1 : 1;
  const int64_t kw = k.ne[0], kh = is_2d ? k.ne[1] : 1;
  const int64_t iw = a.ne[0], ih = is_2d ? a.ne[1] : 1;
  return elementwise(node, [&](int64_t e, int64_t ow, int64_t i2, int64_t i3) {
    const int64_t oh = is_2d ? i2 : 0, n = is_2d ? i3 : i2;
    const int64_t kx = e % kw, ky = (e / kw) % kh, c = e / (kw * kh);
    const int64_t x = ow * s0 + kx * d0 - p0, y = oh * s1 + ky * d1 - p1;
    if (x < 0 || x >= iw || y < 0 || y >= ih) return 0.0;
    return is_2d ? in.at(a, x, y, c, n) : in.at(a, x, c, n, 0);
  });
}

std::vector<double> naive_pool_2d(const Tensor& node, const HostValues& in) {
  const Tensor& a = *node.src[0];
  const Pool2dParams p = Pool2dParams::get(node);
  const bool is_max = p.op == PoolOp::kMax;
  const int64_t k0 = p.k0, k1 = p.k1, s0 = p.s0, s1 = p.s1, p0 = p.p0, p1 = p.p1;
  return elementwise(node, [&](int64_t ox, int64_t oy, int64_t c, int64_t n) {
    double acc = is_max ? -FLT_MAX : 0.0;
    for (int64_t ky = 0; ky < k1; ++ky) {
      for (int64_t kx = 0; kx < k0; ++kx) {
        const int64_t x = ox * s0 - p0 + kx, y = oy * s1 - p1 + ky;
        if (x < 0 || x >= a.ne[0] || y < 0 || y >= a.ne[1]) continue;
        const double v = in.at(a, x, y, c, n);
        acc = is_max ? std::max(acc, v) : acc + v;
      }
    }
    return is_max ? acc : acc / static_cast<double>(k0 * k1);
  });
}

std::vector<double> naive_upscale(const Tensor& node, const HostValues& in) {
  const Tensor& a = *node.src[0];
  // The op is defined with the size ratio rounded to f32, as ggml's.
  auto src = [&](int64_t i, size_t d) {
    const float ratio = static_cast<float>(node.ne[d]) / static_cast<float>(a.ne[d]);
    return std::min(static_cast<int64_t>(static_cast<float>(i) / ratio), a.ne[d] - 1);
  };
  return elementwise(node, [&](int64_t i0, int64_t i1, int64_t i2, int64_t i3) {
    return in.at(a, src(i0, 0), src(i1, 1), src(i2, 2), src(i3, 3));
  });
}

std::vector<double> naive_arange(const Tensor& node, const HostValues&) {
  const ArangeParams p = ArangeParams::get(node);
  const double start = p.start, step = p.step;
  return elementwise(node, [&](int64_t i, int64_t, int64_t, int64_t) { return start + step * i; });
}

std::vector<double> naive_timestep(const Tensor& node, const HostValues& in) {
  const TimestepEmbeddingParams p = TimestepEmbeddingParams::get(node);
  const int64_t dim = p.dim, half = dim / 2;
  const double log_period = std::log(static_cast<double>(p.max_period));
  return elementwise(node, [&](int64_t j, int64_t i, int64_t, int64_t) {
    if (j >= 2 * half) return 0.0;
    const double t = in.at(*node.src[0], i, 0, 0, 0);
    const double freq =
        std::exp(-log_period * static_cast<double>(j % half) / static_cast<double>(half));
    return j < half ? std::cos(t * freq) : std::sin(t * freq);
  });
}

// ---- cases ----------------------------------------------------------------------------

struct Conv {
  std::string name;
  bool is_2d;
  Shape input, kernel;
  int s0, s1, p0, p1, d0, d1;
};

std::vector<Case> im2col_cases() {
  const Conv convs[] = {
      {"2d_3x3", true, {9, 7, 3, 2}, {3, 3, 3, 4}, 1, 1, 0, 0, 1, 1},
      {"2d_stride_pad_dilate", true, {10, 8, 2, 1}, {3, 2, 2, 5}, 2, 1, 1, 2, 2, 1},
      {"2d_1x1", true, {5, 4, 6, 1}, {1, 1, 6, 2}, 1, 1, 0, 0, 1, 1},
      {"1d", false, {17, 4, 3, 1}, {5, 4, 2, 1}, 2, 0, 2, 0, 1, 0},
      {"1d_dilated", false, {20, 2, 1, 1}, {3, 2, 1, 1}, 1, 0, 0, 0, 3, 0},
  };
  std::vector<Case> cases;
  for (const Conv& cv : convs) {
    for (DType in : {DType::kF32, DType::kF16}) {
      for (DType out : {DType::kF32, DType::kF16}) {
        cases.push_back(
            {fmt::format("{}_{}_to_{}", cv.name, dtype_name(in), dtype_name(out)),
             [=](CaseGraph& c) {
               Tensor* k =
                   c.input(DType::kF16, {cv.kernel[0], cv.kernel[1], cv.kernel[2], cv.kernel[3]});
               Tensor* a = c.input(in, {cv.input[0], cv.input[1], cv.input[2], cv.input[3]});
               return ops::im2col(c.g(), k, a, cv.s0, cv.s1, cv.p0, cv.p1, cv.d0, cv.d1, cv.is_2d,
                                  out);
             }});
      }
    }
  }
  return cases;
}

std::vector<Case> pool_cases() {
  struct Pool {
    std::string name;
    Shape ne;
    int k0, k1, s0, s1, p0, p1;
  };
  const Pool pools[] = {
      {"2x2", {8, 6, 3, 2}, 2, 2, 2, 2, 0, 0},
      {"3x2_s2x1_p1x0", {9, 7, 2, 1}, 3, 2, 2, 1, 1, 0},
      {"overlapping_3x3_p1", {7, 5, 2, 1}, 3, 3, 1, 1, 1, 1},
      {"whole", {5, 4, 1, 1}, 5, 4, 1, 1, 0, 0},
  };
  std::vector<Case> cases;
  for (const Pool& p : pools) {
    for (ops::PoolOp op : {ops::PoolOp::kMax, ops::PoolOp::kAvg}) {
      for (DType type : {DType::kF32, DType::kF16}) {
        cases.push_back({fmt::format("{}_{}_{}", p.name, op == ops::PoolOp::kMax ? "max" : "avg",
                                     dtype_name(type)),
                         [=](CaseGraph& c) {
                           Tensor* a = c.input(type, {p.ne[0], p.ne[1], p.ne[2], p.ne[3]});
                           return ops::pool_2d(c.g(), a, op, p.k0, p.k1, p.s0, p.s1, p.p0, p.p1);
                         }});
      }
    }
  }
  cases.push_back({"permuted_max", [](CaseGraph& c) {
                     Tensor* a = permuted_input(c, DType::kF32, {6, 8, 2, 1}, {1, 0, 2, 3});
                     return ops::pool_2d(c.g(), a, ops::PoolOp::kMax, 2, 3, 2, 2, 1, 1);
                   }});
  return cases;
}

std::vector<Case> upscale_cases() {
  struct Scale {
    Shape from, to;
  };
  const Scale scales[] = {{{5, 3, 2, 1}, {10, 6, 2, 3}},
                          {{6, 4, 3, 2}, {4, 6, 3, 1}},
                          {{1, 1, 1, 1}, {3, 2, 1, 1}},
                          {{7, 3, 1, 1}, {7, 7, 1, 1}}};
  std::vector<Case> cases;
  for (const Scale& s : scales) {
    for (DType type : {DType::kF32, DType::kF16}) {
      cases.push_back(
          {shape_name(type, s.from) + "_to_" + shape_name(type, s.to), [=](CaseGraph& c) {
             Tensor* a = c.input(type, {s.from[0], s.from[1], s.from[2], s.from[3]});
             return ops::upscale(c.g(), a, static_cast<int>(s.to[0]), static_cast<int>(s.to[1]),
                                 static_cast<int>(s.to[2]), static_cast<int>(s.to[3]));
           }});
    }
  }
  cases.push_back({"permuted", [](CaseGraph& c) {
                     Tensor* a = permuted_input(c, DType::kF32, {3, 5, 2, 1}, {1, 0, 2, 3});
                     return ops::upscale(c.g(), a, 10, 6, 2, 1);
                   }});
  return cases;
}

std::vector<Case> arange_cases() {
  std::vector<Case> cases;
  for (const std::array<float, 3> r :
       {std::array<float, 3>{0.0f, 10.0f, 1.0f}, std::array<float, 3>{-1.5f, 2.3f, 0.25f},
        std::array<float, 3>{5.0f, -3.0f, -0.7f}, std::array<float, 3>{0.5f, 0.6f, 1.0f}}) {
    cases.push_back({fmt::format("{}_{}_{}", r[0], r[1], r[2]),
                     [r](CaseGraph& c) { return ops::arange(c.g(), r[0], r[1], r[2]); }});
  }
  return cases;
}

std::vector<Case> timestep_cases() {
  std::vector<Case> cases;
  for (int dim : {32, 15, 1, 2}) {
    cases.push_back({fmt::format("dim{}", dim), [dim](CaseGraph& c) {
                       Tensor* t = c.input(DType::kF32, {5}, uniform(0.0f, 100.0f));
                       return ops::timestep_embedding(c.g(), t, dim, 10000);
                     }});
  }
  return cases;
}

// ---- suites ---------------------------------------------------------------------------

class Im2Col : public OpTest {};
class Pool2d : public OpTest {};
class Upscale : public OpTest {};
class Arange : public OpTest {};
class TimestepEmbedding : public OpTest {};

TEST_P(Im2Col, MatchesReference_OneAndTwoD) {
  run(im2col_cases(), naive_im2col);
}
TEST_P(Pool2d, MatchesReference_MaxAvgPadded) {
  run(pool_cases(), naive_pool_2d);
}
TEST_P(Upscale, MatchesReference_Nearest) {
  run(upscale_cases(), naive_upscale);
}
TEST_P(Arange, MatchesReference_Ranges) {
  run(arange_cases(), naive_arange);
}
TEST_P(TimestepEmbedding, MatchesReference_EvenAndOddDims) {
  run(timestep_cases(), naive_timestep);
}

INSTANTIATE_TEST_SUITE_P(Conformance, Im2Col, ::testing::ValuesIn(all_targets()), target_name);
INSTANTIATE_TEST_SUITE_P(Conformance, Pool2d, ::testing::ValuesIn(all_targets()), target_name);
INSTANTIATE_TEST_SUITE_P(Conformance, Upscale, ::testing::ValuesIn(all_targets()), target_name);
INSTANTIATE_TEST_SUITE_P(Conformance, Arange, ::testing::ValuesIn(all_targets()), target_name);
INSTANTIATE_TEST_SUITE_P(Conformance, TimestepEmbedding, ::testing::ValuesIn(all_targets()),
                         target_name);

}  // namespace
}  // namespace tessera::conformance
