// Elementwise ops: ADD, SUB, MUL, DIV (broadcast), SCALE, SQR, SQRT, CLAMP,
// the UNARY functions, SWIGLU and GEGLU, over f32/f16/bf16, odd and broadcast shapes,
// permuted and strided views.
#include <algorithm>
#include <cmath>
#include <utility>

#include "conformance/op_test.h"
#include "tessera/core/op_params.h"

namespace tessera::conformance {
namespace {

using Shape = std::array<int64_t, kMaxDims>;

// ---- naive references ------------------------------------------------------------------

double binary_value(Op op, double x, double y) {
  switch (op) {
    case Op::kAdd:
      return x + y;
    case Op::kSub:
      return x - y;
    case Op::kMul:
      return x * y;
    case Op::kDiv:
      return x / y;
    default:
      ADD_FAILURE() << "not a binary op";
      return 0.0;
  }
}

std::vector<double> naive_binary(const Tensor& node, const HostValues& in) {
  const Tensor& a = *node.src[0];
  const Tensor& b = *node.src[1];
  return elementwise(node, [&](int64_t i0, int64_t i1, int64_t i2, int64_t i3) {
    return binary_value(node.op, in.at(a, i0, i1, i2, i3),
                        in.at(b, i0 % b.ne[0], i1 % b.ne[1], i2 % b.ne[2], i3 % b.ne[3]));
  });
}

double sigmoid(double x) {
  return 1.0 / (1.0 + std::exp(-x));
}
double hardsigmoid(double x) {
  return std::min(1.0, std::max(0.0, (x + 3.0) / 6.0));
}

double unary_value(UnaryOp op, double x, double p) {
  switch (op) {
    case UnaryOp::kGelu: {
      const double c = std::sqrt(2.0 / M_PI);
      return 0.5 * x * (1.0 + std::tanh(c * (x + 0.044715 * x * x * x)));
    }
    case UnaryOp::kGeluQuick:
      return x * sigmoid(1.702 * x);
    case UnaryOp::kSilu:
      return x * sigmoid(x);
    case UnaryOp::kRelu:
      return x > 0.0 ? x : 0.0;
    case UnaryOp::kLeakyRelu:
      return x > 0.0 ? x : p * x;
    case UnaryOp::kHardSigmoid:
      return hardsigmoid(x);
    case UnaryOp::kHardSwish:
      return x * hardsigmoid(x);
    case UnaryOp::kTanh:
      return std::tanh(x);
    case UnaryOp::kSigmoid:
      return 1.0 / (1.0 + std::exp(-x));
    case UnaryOp::kCount:
      break;
  }
  return NAN;
}

std::vector<double> naive_map(const Tensor& node, const HostValues& in) {
  const Tensor& a = *node.src[0];
  return elementwise(node, [&](int64_t i0, int64_t i1, int64_t i2, int64_t i3) {
    const double x = in.at(a, i0, i1, i2, i3);
    switch (node.op) {
      case Op::kScale: {
        const ScaleParams p = ScaleParams::get(node);
        return double(p.s) * x + p.bias;
      }
      case Op::kSqr:
        return x * x;
      case Op::kSqrt:
        return std::sqrt(x);
      case Op::kClamp: {
        const ClampParams p = ClampParams::get(node);
        return std::min<double>(p.max, std::max<double>(p.min, x));
      }
      case Op::kUnary: {
        const UnaryParams p = UnaryParams::get(node);
        return unary_value(p.op, x, p.param);
      }
      case Op::kSwiglu:
        return x * sigmoid(x) * in.at(*node.src[1], i0, i1, i2, i3);
      case Op::kGeglu:
        return unary_value(UnaryOp::kGelu, x, 0.0) * in.at(*node.src[1], i0, i1, i2, i3);
      case Op::kSwigluOai: {
        const SwigluOaiParams p = SwigluOaiParams::get(node);
        const double g = std::min<double>(x, p.limit);
        const double u = std::clamp<double>(in.at(*node.src[1], i0, i1, i2, i3), -p.limit, p.limit);
        return g / (1.0 + std::exp(-static_cast<double>(p.alpha) * g)) * (u + 1.0);
      }
      default:
        ADD_FAILURE() << "not a map op";
        return 0.0;
    }
  });
}

// ---- cases ----------------------------------------------------------------------------

Tensor* make_binary(Graph& g, Op op, Tensor* a, Tensor* b) {
  switch (op) {
    case Op::kAdd:
      return ops::add(g, a, b);
    case Op::kSub:
      return ops::sub(g, a, b);
    case Op::kMul:
      return ops::mul(g, a, b);
    default:
      return ops::div(g, a, b);
  }
}

std::vector<Case> binary_cases(Op op) {
  // Divisors stay away from zero so the quotient's error stays bounded.
  const Gen gb = op == Op::kDiv ? away_from_zero() : uniform();
  struct Pair {
    Shape a, b;
  };
  const Pair shapes[] = {
      {{1, 1, 1, 1}, {1, 1, 1, 1}},   {{33, 5, 3, 2}, {33, 5, 3, 2}},
      {{33, 5, 3, 2}, {33, 1, 1, 1}}, {{33, 5, 3, 2}, {1, 5, 1, 2}},
      {{16, 4, 6, 3}, {16, 4, 2, 1}}, {{17, 3, 1, 1}, {1, 1, 1, 1}},
      {{65, 2, 1, 1}, {13, 1, 1, 1}},
  };
  const std::pair<DType, DType> types[] = {{DType::kF32, DType::kF32},
                                           {DType::kF16, DType::kF16},
                                           {DType::kF16, DType::kF32},
                                           {DType::kBF16, DType::kBF16},
                                           {DType::kF32, DType::kF16}};
  std::vector<Case> cases;
  for (size_t s = 0; s < std::size(shapes); ++s) {
    for (const auto& types_ab : types) {
      const DType ta = types_ab.first, tb = types_ab.second;  // (clang 14 captures no bindings)
      if (s > 2 && ta != DType::kF32) continue;  // broadcast grids in f32 only
      const Pair p = shapes[s];
      cases.push_back({shape_name(ta, p.a) + "_by_" + shape_name(tb, p.b), [=](CaseGraph& c) {
                         Tensor* a = c.input(ta, {p.a[0], p.a[1], p.a[2], p.a[3]});
                         Tensor* b = c.input(tb, {p.b[0], p.b[1], p.b[2], p.b[3]}, gb);
                         return make_binary(c.g(), op, a, b);
                       }});
    }
  }
  cases.push_back({"permuted_f32_by_row", [=](CaseGraph& c) {
                     Tensor* a = permuted_input(c, DType::kF32, {5, 33, 3, 2}, {1, 0, 2, 3});
                     return make_binary(c.g(), op, a, c.input(DType::kF32, {33}, gb));
                   }});
  cases.push_back({"strided_f16_by_strided_f32", [=](CaseGraph& c) {
                     Tensor* a = strided_input(c, DType::kF16, {19, 4, 3, 1}, 5);
                     Tensor* b = strided_input(c, DType::kF32, {19, 4, 1, 1}, 2, gb);
                     return make_binary(c.g(), op, a, b);
                   }});
  return cases;
}

// Cases for a one-input op: odd shapes in each float type, a permuted and a strided view.
std::vector<Case> map_cases(const std::string& what, std::function<Tensor*(Graph&, Tensor*)> make,
                            Gen gen = uniform()) {
  std::vector<Case> cases;
  const std::pair<DType, Shape> plain[] = {{DType::kF32, {1, 1, 1, 1}},
                                           {DType::kF32, {33, 7, 3, 2}},
                                           {DType::kF16, {31, 5, 2, 1}},
                                           {DType::kBF16, {17, 3, 1, 1}}};
  for (const auto& type_ne : plain) {
    const DType type = type_ne.first;  // (clang 14 captures no structured bindings)
    const Shape ne = type_ne.second;
    cases.push_back({what + "_" + shape_name(type, ne), [=](CaseGraph& c) {
                       return make(c.g(), c.input(type, {ne[0], ne[1], ne[2], ne[3]}, gen));
                     }});
  }
  cases.push_back(
      {what + "_permuted_f32", [=](CaseGraph& c) {
         return make(c.g(), permuted_input(c, DType::kF32, {6, 17, 3, 2}, {2, 0, 1, 3}, gen));
       }});
  cases.push_back({what + "_strided_f16", [=](CaseGraph& c) {
                     return make(c.g(), strided_input(c, DType::kF16, {35, 3, 2, 1}, 3, gen));
                   }});
  return cases;
}

std::vector<Case> unary_cases() {
  std::vector<Case> cases;
  for (int u = 0; u < static_cast<int>(UnaryOp::kCount); ++u) {
    const auto op = static_cast<UnaryOp>(u);
    // The hard* functions are piecewise beyond +-3: cover their flat parts too.
    // (and the sigmoid its tails, where 1 / (1 + e^-x) saturates).
    const bool hard = op == UnaryOp::kHardSigmoid || op == UnaryOp::kHardSwish || op == UnaryOp::kSigmoid;
    auto more = map_cases(
        std::string(unary_op_name(op)),
        [op](Graph& g, Tensor* a) { return ops::unary(g, a, op, 0.1f); },
        hard ? uniform(-4.0f, 4.0f) : uniform());
    cases.insert(cases.end(), more.begin(), more.end());
  }
  return cases;
}

// Cases for a gated activation (SWIGLU, GEGLU): each float type, a lone
// element, odd rows, and gate and up as the halves of one fused projection.
using GatedOp = Tensor* (*)(Graph&, Tensor*, Tensor*);

std::vector<Case> gated_cases(GatedOp make, Gen gen = uniform()) {
  std::vector<Case> cases;
  for (DType type : {DType::kF32, DType::kF16, DType::kBF16}) {
    for (const Shape ne : {Shape{1, 1, 1, 1}, Shape{45, 7, 2, 1}}) {
      cases.push_back({shape_name(type, ne), [=](CaseGraph& c) {
                         return make(c.g(), c.input(type, {ne[0], ne[1], ne[2], ne[3]}, gen),
                                     c.input(type, {ne[0], ne[1], ne[2], ne[3]}));
                       }});
    }
  }
  // Gate and up as the two halves of one fused projection's rows.
  cases.push_back({"halves_of_fused_f32", [=](CaseGraph& c) {
                     const int64_t n = 37, rows = 5;
                     Tensor* fused = c.input(DType::kF32, {2 * n, rows}, gen);
                     Graph& g = c.g();
                     Tensor* gate = ops::view(g, fused, {n, rows}, {fused->nb[1]}, 0);
                     Tensor* up = ops::view(g, fused, {n, rows}, {fused->nb[1]}, n * sizeof(float));
                     return make(g, gate, up);
                   }});
  cases.push_back(
      {"permuted_f32", [=](CaseGraph& c) {
         Tensor* gate = permuted_input(c, DType::kF32, {6, 17, 3, 2}, {2, 0, 1, 3}, gen);
         Tensor* up = c.input(DType::kF32, {gate->ne[0], gate->ne[1], gate->ne[2], gate->ne[3]});
         return make(c.g(), gate, up);
       }});
  return cases;
}

// ---- suites ---------------------------------------------------------------------------

class Add : public OpTest {};
class Sub : public OpTest {};
class Mul : public OpTest {};
class Div : public OpTest {};
class Scale : public OpTest {};
class Sqr : public OpTest {};
class Sqrt : public OpTest {};
class Clamp : public OpTest {};
class Unary : public OpTest {};
class Swiglu : public OpTest {};
class Geglu : public OpTest {};
class SwigluOai : public OpTest {};

TEST_P(Add, MatchesReference_BroadcastGrid) {
  run(binary_cases(Op::kAdd), naive_binary);
}
TEST_P(Sub, MatchesReference_BroadcastGrid) {
  run(binary_cases(Op::kSub), naive_binary);
}
TEST_P(Mul, MatchesReference_BroadcastGrid) {
  run(binary_cases(Op::kMul), naive_binary);
}
TEST_P(Div, MatchesReference_BroadcastGrid) {
  run(binary_cases(Op::kDiv), naive_binary);
}

TEST_P(Scale, MatchesReference_WithAndWithoutBias) {
  auto cases = map_cases("s", [](Graph& g, Tensor* a) { return ops::scale(g, a, 0.37f); });
  auto biased =
      map_cases("s_bias", [](Graph& g, Tensor* a) { return ops::scale(g, a, -1.7f, 0.25f); });
  cases.insert(cases.end(), biased.begin(), biased.end());
  run(cases, naive_map);
}
TEST_P(Sqr, MatchesReference_OddShapes) {
  run(map_cases("sqr", [](Graph& g, Tensor* a) { return ops::sqr(g, a); }), naive_map);
}
TEST_P(Sqrt, MatchesReference_PositiveInputs) {
  run(map_cases(
          "sqrt", [](Graph& g, Tensor* a) { return ops::sqrt(g, a); }, uniform(0.01f, 1.0f)),
      naive_map);
}
TEST_P(Clamp, MatchesReference_OddShapes) {
  run(map_cases("clamp", [](Graph& g, Tensor* a) { return ops::clamp(g, a, -0.3f, 0.6f); }),
      naive_map);
}
TEST_P(Unary, MatchesReference_EveryFunction) {
  run(unary_cases(), naive_map);
}
TEST_P(Swiglu, MatchesReference_FusedHalves) {
  run(gated_cases(ops::swiglu), naive_map);
}
// GELU's tanh form bends most within a few units of 0; gates reach +-4 to
// cover its nearly linear and nearly zero tails too.
TEST_P(Geglu, MatchesReference_FusedHalves) {
  run(gated_cases(ops::geglu, uniform(-4.0f, 4.0f)), naive_map);
}

// gpt-oss's alpha 1.702 and limit 7: gates to +-10 cross the clamp (and the
// sigmoid's tails); ups to +-10 cross theirs too; another alpha and limit.
Tensor* swiglu_oai_gpt_oss(Graph& g, Tensor* gate, Tensor* up) {
  return ops::swiglu_oai(g, gate, up, 1.702f, 7.0f);
}
TEST_P(SwigluOai, MatchesReference_ClampedBothSides) {
  std::vector<Case> cases = gated_cases(swiglu_oai_gpt_oss, uniform(-10.0f, 10.0f));
  for (const std::pair<float, float>& p : {std::pair{1.702f, 7.0f}, std::pair{0.5f, 2.0f}}) {
    const float alpha = p.first, limit = p.second;  // (clang 14 cannot capture structured bindings)
    cases.push_back({fmt::format("ups_clamped_alpha{}_limit{}", alpha, limit), [=](CaseGraph& c) {
                       Tensor* gate = c.input(DType::kF32, {33, 4}, uniform(-10.0f, 10.0f));
                       Tensor* up = c.input(DType::kF32, {33, 4}, uniform(-10.0f, 10.0f));
                       return ops::swiglu_oai(c.g(), gate, up, alpha, limit);
                     }});
  }
  run(cases, naive_map);
}

INSTANTIATE_TEST_SUITE_P(Conformance, Add, ::testing::ValuesIn(all_targets()), target_name);
INSTANTIATE_TEST_SUITE_P(Conformance, Sub, ::testing::ValuesIn(all_targets()), target_name);
INSTANTIATE_TEST_SUITE_P(Conformance, Mul, ::testing::ValuesIn(all_targets()), target_name);
INSTANTIATE_TEST_SUITE_P(Conformance, Div, ::testing::ValuesIn(all_targets()), target_name);
INSTANTIATE_TEST_SUITE_P(Conformance, Scale, ::testing::ValuesIn(all_targets()), target_name);
INSTANTIATE_TEST_SUITE_P(Conformance, Sqr, ::testing::ValuesIn(all_targets()), target_name);
INSTANTIATE_TEST_SUITE_P(Conformance, Sqrt, ::testing::ValuesIn(all_targets()), target_name);
INSTANTIATE_TEST_SUITE_P(Conformance, Clamp, ::testing::ValuesIn(all_targets()), target_name);
INSTANTIATE_TEST_SUITE_P(Conformance, Unary, ::testing::ValuesIn(all_targets()), target_name);
INSTANTIATE_TEST_SUITE_P(Conformance, Swiglu, ::testing::ValuesIn(all_targets()), target_name);
INSTANTIATE_TEST_SUITE_P(Conformance, Geglu, ::testing::ValuesIn(all_targets()), target_name);
INSTANTIATE_TEST_SUITE_P(Conformance, SwigluOai, ::testing::ValuesIn(all_targets()), target_name);

}  // namespace
}  // namespace tessera::conformance
