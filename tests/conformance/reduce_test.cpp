// Row reductions and normalizations: NORM, RMS_NORM, GROUP_NORM, SUM_ROWS,
// ARGSORT, SOFT_MAX (scale, masks, ALiBi) and DIAG_MASK_INF.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "conformance/op_test.h"
#include "tessera/core/op_params.h"

namespace tessera::conformance {
namespace {

using Shape = std::array<int64_t, kMaxDims>;

// ---- naive references ------------------------------------------------------------------

// Row (i1, i2, i3) of an input as doubles.
std::vector<double> row_of(const Tensor& t, const HostValues& in, int64_t i1, int64_t i2,
                           int64_t i3) {
  std::vector<double> r(static_cast<size_t>(t.ne[0]));
  for (int64_t i0 = 0; i0 < t.ne[0]; ++i0) r[static_cast<size_t>(i0)] = in.at(t, i0, i1, i2, i3);
  return r;
}

// Applies f(row of src0, i1, i2, i3) -> output row to every row of the node.
template <class F>
std::vector<double> by_rows(const Tensor& node, const HostValues& in, F f) {
  std::vector<double> out;
  for_each_index(
      {1, node.ne[1], node.ne[2], node.ne[3]}, [&](int64_t, int64_t i1, int64_t i2, int64_t i3) {
        const std::vector<double> r = f(row_of(*node.src[0], in, i1, i2, i3), i1, i2, i3);
        out.insert(out.end(), r.begin(), r.end());
      });
  return out;
}

std::vector<double> naive_norm(const Tensor& node, const HostValues& in) {
  const double eps = NormParams::get(node).eps;
  const bool rms = node.op == Op::kRmsNorm;
  return by_rows(node, in, [&](std::vector<double> x, int64_t, int64_t, int64_t) {
    const double n = static_cast<double>(x.size());
    const double mean = rms ? 0.0 : std::accumulate(x.begin(), x.end(), 0.0) / n;
    double var = 0.0;
    for (double v : x) var += (v - mean) * (v - mean);
    const double inv = 1.0 / std::sqrt(var / n + eps);
    for (double& v : x) v = (v - mean) * inv;
    return x;
  });
}

std::vector<double> naive_group_norm(const Tensor& node, const HostValues& in) {
  const Tensor& a = *node.src[0];
  const GroupNormParams p = GroupNormParams::get(node);
  const int64_t groups = p.n_groups;
  const double eps = p.eps;
  const int64_t per = (a.ne[2] + groups - 1) / groups;
  std::vector<double> mean(static_cast<size_t>(groups * a.ne[3])), inv(mean.size());
  for (int64_t i3 = 0; i3 < a.ne[3]; ++i3) {
    for (int64_t gi = 0; gi < groups; ++gi) {
      std::vector<double> v;
      for (int64_t c = gi * per; c < std::min((gi + 1) * per, a.ne[2]); ++c) {
        for_each_index({a.ne[0], a.ne[1], 1, 1}, [&](int64_t i0, int64_t i1, int64_t, int64_t) {
          v.push_back(in.at(a, i0, i1, c, i3));
        });
      }
      if (v.empty()) continue;
      const double m = std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
      double var = 0.0;
      for (double x : v) var += (x - m) * (x - m);
      const size_t k = static_cast<size_t>(i3 * groups + gi);
      mean[k] = m;
      inv[k] = 1.0 / std::sqrt(var / static_cast<double>(v.size()) + eps);
    }
  }
  return elementwise(node, [&](int64_t i0, int64_t i1, int64_t i2, int64_t i3) {
    const size_t k = static_cast<size_t>(i3 * groups + i2 / per);
    return (in.at(a, i0, i1, i2, i3) - mean[k]) * inv[k];
  });
}

std::vector<double> naive_sum_rows(const Tensor& node, const HostValues& in) {
  return by_rows(node, in, [](const std::vector<double>& x, int64_t, int64_t, int64_t) {
    return std::vector<double>{std::accumulate(x.begin(), x.end(), 0.0)};
  });
}

std::vector<double> naive_argsort(const Tensor& node, const HostValues& in) {
  const bool descending = ArgsortParams::get(node).order == SortOrder::kDescending;
  return by_rows(node, in, [&](const std::vector<double>& x, int64_t, int64_t, int64_t) {
    std::vector<double> idx(x.size());
    std::iota(idx.begin(), idx.end(), 0.0);
    std::stable_sort(idx.begin(), idx.end(), [&](double l, double r) {
      const double a = x[static_cast<size_t>(l)], b = x[static_cast<size_t>(r)];
      return descending ? a > b : a < b;
    });
    return idx;
  });
}

std::vector<double> naive_soft_max(const Tensor& node, const HostValues& in) {
  const Tensor* mask = node.src[1];
  const SoftMaxParams p = SoftMaxParams::get(node);
  const double scale = p.scale;
  const double max_bias = p.max_bias;
  return by_rows(node, in, [&](std::vector<double> x, int64_t i1, int64_t i2, int64_t i3) {
    const double slope = naive_alibi(max_bias, i2, node.ne[2]);
    for (size_t k = 0; k < x.size(); ++k) {
      x[k] *= scale;
      if (mask)
        x[k] +=
            slope * in.at(*mask, static_cast<int64_t>(k), i1, i2 % mask->ne[2], i3 % mask->ne[3]);
    }
    const double max = *std::max_element(x.begin(), x.end());
    double sum = 0.0;
    for (double& v : x) sum += (v = std::exp(v - max));
    for (double& v : x) v /= sum;
    return x;
  });
}

std::vector<double> naive_diag_mask_inf(const Tensor& node, const HostValues& in) {
  const int64_t n_past = DiagMaskInfParams::get(node).n_past;
  return by_rows(node, in, [&](std::vector<double> x, int64_t i1, int64_t, int64_t) {
    for (size_t k = 0; k < x.size(); ++k) {
      if (static_cast<int64_t>(k) > n_past + i1) x[k] = -INFINITY;
    }
    return x;
  });
}

// ---- cases ----------------------------------------------------------------------------

// Odd shapes in each float type plus a strided and a permuted view.
std::vector<Case> row_cases(const std::string& what, std::function<Tensor*(Graph&, Tensor*)> make,
                            bool f32_only = false, double nmse = kNmseDefault) {
  std::vector<Case> cases;
  const std::pair<DType, Shape> plain[] = {{DType::kF32, {1, 1, 1, 1}},
                                           {DType::kF32, {33, 7, 3, 2}},
                                           {DType::kF32, {16, 4, 1, 1}},
                                           {DType::kF16, {45, 3, 2, 1}},
                                           {DType::kBF16, {17, 5, 1, 1}}};
  for (const auto& type_ne : plain) {
    const DType type = type_ne.first;  // (clang 14 captures no structured bindings)
    const Shape ne = type_ne.second;
    if (f32_only && type != DType::kF32) continue;
    cases.push_back({what + "_" + shape_name(type, ne),
                     [=](CaseGraph& c) {
                       return make(c.g(), c.input(type, {ne[0], ne[1], ne[2], ne[3]}));
                     },
                     nmse});
  }
  cases.push_back({what + "_strided",
                   [=](CaseGraph& c) {
                     return make(c.g(), strided_input(c, DType::kF32, {29, 4, 3, 1}, 3));
                   },
                   nmse});
  cases.push_back(
      {what + "_permuted",
       [=](CaseGraph& c) {
         return make(c.g(), permuted_input(c, DType::kF32, {6, 23, 2, 2}, {1, 0, 3, 2}));
       },
       nmse});
  return cases;
}

std::vector<Case> norm_cases(bool rms) {
  std::vector<Case> cases;
  for (float eps : {1e-6f, 1e-5f, 1e-1f}) {
    auto more = row_cases(fmt::format("eps{}", eps), [=](Graph& g, Tensor* a) {
      return rms ? ops::rms_norm(g, a, eps) : ops::norm(g, a, eps);
    });
    cases.insert(cases.end(), more.begin(), more.end());
  }
  return cases;
}

std::vector<Case> group_norm_cases() {
  std::vector<Case> cases;
  struct G {
    Shape ne;
    int groups;
  };
  // Uneven groups (7 channels in 3), an empty last group (4 in 3), one per channel, one in all.
  for (const G& p :
       {G{{5, 3, 7, 2}, 3}, G{{4, 4, 4, 1}, 3}, G{{6, 5, 8, 1}, 8}, G{{3, 3, 5, 2}, 1}}) {
    cases.push_back(
        {fmt::format("{}_groups{}", shape_name(DType::kF32, p.ne), p.groups), [=](CaseGraph& c) {
           Tensor* a = c.input(DType::kF32, {p.ne[0], p.ne[1], p.ne[2], p.ne[3]});
           return ops::group_norm(c.g(), a, p.groups, 1e-6f);
         }});
  }
  return cases;
}

struct SoftMaxShape {
  std::string name;
  Shape a;
  DType mask_type;  // kI32: no mask
  Shape mask;
  float scale, max_bias;
};

std::vector<Case> soft_max_cases() {
  const SoftMaxShape shapes[] = {
      {"plain", {33, 7, 3, 2}, DType::kI32, {}, 1.0f, 0.0f},
      {"one", {1, 1, 1, 1}, DType::kI32, {}, 1.0f, 0.0f},
      {"scaled", {64, 5, 1, 1}, DType::kI32, {}, 3.0f, 0.0f},
      {"mask_f32_broadcast", {17, 5, 4, 2}, DType::kF32, {17, 5, 1, 1}, 0.125f, 0.0f},
      {"mask_f16_taller_heads2", {17, 5, 4, 2}, DType::kF16, {17, 8, 2, 1}, 0.7f, 0.0f},
      {"alibi_6_heads", {13, 3, 6, 1}, DType::kF16, {13, 3, 1, 1}, 1.0f, 8.0f},
      {"alibi_4_heads_full_mask", {13, 3, 4, 2}, DType::kF32, {13, 3, 4, 2}, 0.5f, 2.5f},
  };
  std::vector<Case> cases;
  for (const SoftMaxShape& s : shapes) {
    cases.push_back({s.name,
                     [s](CaseGraph& c) {
                       Tensor* a = c.input(DType::kF32, {s.a[0], s.a[1], s.a[2], s.a[3]});
                       Tensor* mask =
                           s.mask_type == DType::kI32
                               ? nullptr
                               : c.input(s.mask_type, {s.mask[0], s.mask[1], s.mask[2], s.mask[3]},
                                         mask_values(s.mask[0]));
                       return ops::soft_max(c.g(), a, mask, s.scale, s.max_bias);
                     },
                     kNmseSoftMax});
  }
  cases.push_back({"permuted",
                   [](CaseGraph& c) {
                     Tensor* a = permuted_input(c, DType::kF32, {5, 19, 3, 1}, {1, 0, 2, 3});
                     return ops::soft_max(c.g(), a, nullptr, 1.0f, 0.0f);
                   },
                   kNmseSoftMax});
  return cases;
}

std::vector<Case> diag_mask_cases() {
  std::vector<Case> cases;
  for (int n_past : {0, 2, 40}) {
    auto more = row_cases(
        fmt::format("n_past{}", n_past),
        [n_past](Graph& g, Tensor* a) { return ops::diag_mask_inf(g, a, n_past); },
        /*f32_only=*/true);
    cases.insert(cases.end(), more.begin(), more.end());
  }
  return cases;
}

// ---- suites ---------------------------------------------------------------------------

class Norm : public OpTest {};
class RmsNorm : public OpTest {};
class GroupNorm : public OpTest {};
class SumRows : public OpTest {};
class Argsort : public OpTest {};
class SoftMax : public OpTest {};
class DiagMaskInf : public OpTest {};

TEST_P(Norm, MatchesReference_SeveralEps) {
  run(norm_cases(false), naive_norm);
}
TEST_P(RmsNorm, MatchesReference_SeveralEps) {
  run(norm_cases(true), naive_norm);
}
TEST_P(GroupNorm, MatchesReference_UnevenGroups) {
  run(group_norm_cases(), naive_group_norm);
}
TEST_P(SumRows, MatchesReference_OddShapes) {
  run(row_cases("sum", [](Graph& g, Tensor* a) { return ops::sum_rows(g, a); }), naive_sum_rows);
}
TEST_P(Argsort, MatchesReference_BothOrders) {
  auto cases = row_cases(
      "asc", [](Graph& g, Tensor* a) { return ops::argsort(g, a, ops::SortOrder::kAscending); },
      /*f32_only=*/true, 0.0);
  auto desc = row_cases(
      "desc", [](Graph& g, Tensor* a) { return ops::argsort(g, a, ops::SortOrder::kDescending); },
      /*f32_only=*/true, 0.0);
  cases.insert(cases.end(), desc.begin(), desc.end());
  run(cases, naive_argsort);
}
TEST_P(SoftMax, MatchesReference_MasksAndAlibi) {
  run(soft_max_cases(), naive_soft_max);
}
TEST_P(DiagMaskInf, MatchesReference_SeveralNPast) {
  run(diag_mask_cases(), naive_diag_mask_inf);
}

INSTANTIATE_TEST_SUITE_P(Conformance, Norm, ::testing::ValuesIn(all_targets()), target_name);
INSTANTIATE_TEST_SUITE_P(Conformance, RmsNorm, ::testing::ValuesIn(all_targets()), target_name);
INSTANTIATE_TEST_SUITE_P(Conformance, GroupNorm, ::testing::ValuesIn(all_targets()), target_name);
INSTANTIATE_TEST_SUITE_P(Conformance, SumRows, ::testing::ValuesIn(all_targets()), target_name);
INSTANTIATE_TEST_SUITE_P(Conformance, Argsort, ::testing::ValuesIn(all_targets()), target_name);
INSTANTIATE_TEST_SUITE_P(Conformance, SoftMax, ::testing::ValuesIn(all_targets()), target_name);
INSTANTIATE_TEST_SUITE_P(Conformance, DiagMaskInf, ::testing::ValuesIn(all_targets()), target_name);

}  // namespace
}  // namespace tessera::conformance
