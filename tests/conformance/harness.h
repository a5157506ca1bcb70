// The conformance harness: runs one op case on a target (a device, and for
// CPU0 one ISA tier) and compares it with a reference, the way ggml's
// test-backend-ops does (docs/ops.md, "Conformance harness").
//
// A case builds a small graph with exactly one compute node (plus views of
// its inputs). Inputs are random (uniform in [-1, 1] unless the case says
// otherwise) from a fresh seed per case, printed on failure; set
// TESSERA_TEST_SEED to replay one. Every tensor gets its own slot in its
// buffer, and every byte between slots is a sentinel that must survive the
// compute; outputs start as NaN bytes so unwritten elements fail. Inputs must
// be unchanged afterwards.
//
// The reference: on CPU0's ref tier, a naive double-precision implementation
// in the test file (rounded to the output type); on every other target, the
// CPU0 ref tier. Error is NMSE = sum (a - b)^2 / sum a^2 against ggml's limits;
// any NaN, or an infinity where the reference has none of that sign, fails.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <optional>
#include <ostream>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "backends/cpu/isa.h"
#include "tessera/backends/builtin.h"
#include "tessera/core/graph.h"
#include "tessera/core/ops.h"

namespace tessera::conformance {

// NMSE limits as ggml uses them.
inline constexpr double kNmseDefault = 1e-7;
inline constexpr double kNmseCopy = 1e-6;
inline constexpr double kNmseSoftMax = 1e-6;
inline constexpr double kNmseMatMul = 5e-4;

// Where a case runs: a device of make_runtime(false), and for CPU0 an ISA tier.
struct Target {
  std::string device;
  std::optional<cpu::Isa> isa;
  std::string name() const;  // "CPU0_avx2", "BLAS0"
  bool is_reference() const { return isa == cpu::Isa::kRef; }
};
std::vector<Target> all_targets();
inline void PrintTo(const Target& t, std::ostream* os) {
  *os << t.name();
}
inline std::string target_name(const ::testing::TestParamInfo<Target>& info) {
  return info.param.name();
}

// Fills an input's values (as floats; i32 and i64 inputs take them rounded).
using Gen = std::function<void(std::mt19937& rng, std::span<float> values)>;
Gen uniform(float lo = -1.0f, float hi = 1.0f);
Gen away_from_zero(float lo = 0.5f, float hi = 1.0f);  // |x| in [lo, hi], random sign
Gen integers(int lo, int hi);                          // uniform in [lo, hi]
// Attention masks of rows of n: uniform [-1, 1], about a fifth -inf, never a
// whole row (element 0 stays finite).
Gen mask_values(int64_t n);

// What a case's build function gets: makes inputs (leaf tensors) in a graph.
class CaseGraph {
 public:
  explicit CaseGraph(Graph& g) : g_(g) {}
  Graph& g() { return g_; }
  Tensor* input(DType type, std::initializer_list<int64_t> ne, Gen gen = uniform());
  // An input placed in the device's weights buffer type (may be repacked).
  Tensor* weight(DType type, std::initializer_list<int64_t> ne, Gen gen = uniform());
  const std::vector<std::pair<Tensor*, Gen>>& inputs() const { return inputs_; }
  bool is_weight(const Tensor* t) const {
    return std::find(weights_.begin(), weights_.end(), t) != weights_.end();
  }

 private:
  Graph& g_;
  std::vector<std::pair<Tensor*, Gen>> inputs_;
  std::vector<const Tensor*> weights_;
};

// Element values of a case's inputs (leaves and views of them) as uploaded.
class HostValues {
 public:
  virtual ~HostValues() = default;
  virtual double at(const Tensor& t, int64_t i0, int64_t i1, int64_t i2, int64_t i3) const = 0;
};

// The naive reference: the node's values in row-major order of its shape.
using Naive = std::function<std::vector<double>(const Tensor& node, const HostValues& in)>;

struct Case {
  std::string name;
  std::function<Tensor*(CaseGraph&)> build;
  double max_nmse = kNmseDefault;
};

// Runs every case on `target`, each against its reference. A case the target
// does not support is skipped (a GTEST_SKIP when all are); the CPU ref tier
// must support every case.
void run_cases(const Target& target, const std::vector<Case>& cases, const Naive& naive);

// Helpers for naive references.
// Row-major index loop over a shape: f(i0, i1, i2, i3).
template <class F>
void for_each_index(const std::array<int64_t, kMaxDims>& ne, F f) {
  for (int64_t i3 = 0; i3 < ne[3]; ++i3)
    for (int64_t i2 = 0; i2 < ne[2]; ++i2)
      for (int64_t i1 = 0; i1 < ne[1]; ++i1)
        for (int64_t i0 = 0; i0 < ne[0]; ++i0) f(i0, i1, i2, i3);
}
// The node's values computed element by element: out[flat] = f(i0, i1, i2, i3).
template <class F>
std::vector<double> elementwise(const Tensor& node, F f) {
  std::vector<double> out;
  out.reserve(static_cast<size_t>(node.n_elements()));
  for_each_index(node.ne, [&](int64_t i0, int64_t i1, int64_t i2, int64_t i3) {
    out.push_back(f(i0, i1, i2, i3));
  });
  return out;
}

// ALiBi slope of head h of n (ggml's formula), in double: heads below the
// largest power of two n2 <= n take 2^(-max_bias (h+1) / n2), the rest
// 2^(-max_bias (2(h-n2)+1) / (2 n2)); 1 when max_bias <= 0.
inline double naive_alibi(double max_bias, int64_t h, int64_t n) {
  if (max_bias <= 0.0) return 1.0;
  const int64_t n2 = int64_t{1} << static_cast<int>(std::floor(std::log2(static_cast<double>(n))));
  const double step =
      h < n2 ? max_bias / static_cast<double>(n2) : max_bias / 2.0 / static_cast<double>(n2);
  const int64_t power = h < n2 ? h + 1 : 2 * (h - n2) + 1;
  return std::pow(2.0, -step * static_cast<double>(power));
}

// Shape-readable case names: "f32_33x7x3x2".
std::string shape_name(DType type, const std::array<int64_t, kMaxDims>& ne);

// A permuted view of a fresh input: an input of shape `ne` permuted by axes
// (so the result has shape ne permuted), for "non-contiguous" cases.
Tensor* permuted_input(CaseGraph& c, DType type, std::array<int64_t, kMaxDims> ne,
                       std::array<int, kMaxDims> axes, Gen gen = uniform());
// A view of the first ne[0] elements of each row of a wider input (row stride
// of `pad` extra elements): rows not contiguous with each other.
Tensor* strided_input(CaseGraph& c, DType type, std::array<int64_t, kMaxDims> ne, int64_t pad,
                      Gen gen = uniform());

}  // namespace tessera::conformance
