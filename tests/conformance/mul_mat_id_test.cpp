// MUL_MAT_ID and ADD_ID, the ops of a mixture of experts: every weight type
// with a dequantizer; decode shapes (one token, its slots broadcast from one
// row), prefill shapes (a row per slot, experts with more columns than a
// GEMM chunk, experts no column picks), ids drawn at random (so one token
// may pick an expert twice), expert weights in the device's weights buffer
// (repacked where the device repacks). An id out of range is an Error.
#include "conformance/op_test.h"

namespace tessera::conformance {
namespace {

std::vector<double> values_of(const Tensor& t, const HostValues& in) {
  std::vector<double> v;
  for_each_index(t.ne, [&](int64_t i0, int64_t i1, int64_t i2, int64_t i3) {
    v.push_back(in.at(t, i0, i1, i2, i3));
  });
  return v;
}

// Naive: dst[i, s, t] = sum_k w[k, i, ids[s, t]] * x[k, s % n_x, t], in double.
std::vector<double> naive_mul_mat_id(const Tensor& node, const HostValues& in) {
  const Tensor& w = *node.src[0];
  const Tensor& x = *node.src[1];
  const Tensor& ids = *node.src[2];
  const std::vector<double> wv = values_of(w, in), xv = values_of(x, in);
  const int64_t k = w.ne[0];
  return elementwise(node, [&](int64_t i, int64_t s, int64_t t, int64_t) {
    const auto e = static_cast<int64_t>(in.at(ids, s, t, 0, 0));
    const double* wr = &wv[static_cast<size_t>((e * w.ne[1] + i) * k)];
    const double* xr = &xv[static_cast<size_t>((t * x.ne[1] + s % x.ne[1]) * k)];
    double sum = 0.0;
    for (int64_t kk = 0; kk < k; ++kk) sum += wr[kk] * xr[kk];
    return sum;
  });
}

struct IdShape {
  const char* name;
  int64_t k_blocks, m, n_expert, n_used, n_x, n_tokens;
};

std::vector<Case> mul_mat_id_cases(DType type) {
  const int64_t block = dtype_info(type).block_size;
  const IdShape shapes[] = {
      // decode: one token, n_used slots reading its one row
      {"decode", 1, 33, 8, 3, 1, 1},
      // decode, an expert's rows in runs per slot (200 = 12.5 panels: a partial last one)
      {"decode_tall", 1, 200, 6, 2, 1, 1},
      // decode of the down projection: a row per slot
      {"decode_rows", 2, 70, 5, 4, 4, 1},
      // one token picking an expert several times: 6 slots over 2 experts
      // (columns of one expert side by side), and 20 (more than a GEMV's 8)
      {"decode_repeats", 1, 150, 2, 6, 1, 1},
      {"decode_many", 1, 40, 2, 20, 1, 1},
      // prefill: a row per slot; 5 experts over 13 x 3 columns (some have none, some > 8)
      {"prefill", 2, 17, 6, 3, 3, 13},
      // broadcast rows over many tokens: 2 experts take ~80 columns each (> a GEMM chunk of 64)
      {"many_columns", 1, 20, 2, 4, 1, 40},
      // every expert, m of one
      {"one_row", 1, 1, 4, 4, 2, 5},
  };
  std::vector<Case> cases;
  for (const IdShape& s : shapes) {
    const int64_t k = block == 1 ? 16 * s.k_blocks + 3 : block * s.k_blocks;
    cases.push_back({fmt::format("{}_{}_k{}_m{}", dtype_name(type), s.name, k, s.m),
                     [=](CaseGraph& c) {
                       Tensor* w = c.weight(type, {k, s.m, s.n_expert});
                       Tensor* x = c.input(DType::kF32, {k, s.n_x, s.n_tokens});
                       Tensor* ids = c.input(DType::kI32, {s.n_used, s.n_tokens},
                                             integers(0, static_cast<int>(s.n_expert) - 1));
                       return ops::mul_mat_id(c.g(), w, x, ids);
                     },
                     kNmseMatMul});
  }
  return cases;
}

class MulMatId : public OpTest {};

TEST_P(MulMatId, MatchesReference_Floats) {
  std::vector<Case> cases;
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16}) {
    auto more = mul_mat_id_cases(t);
    cases.insert(cases.end(), more.begin(), more.end());
  }
  run(cases, naive_mul_mat_id);
}
TEST_P(MulMatId, MatchesReference_LegacyQuants) {
  std::vector<Case> cases;
  for (DType t : {DType::kQ4_0, DType::kQ4_1, DType::kQ5_0, DType::kQ5_1, DType::kQ8_0}) {
    auto more = mul_mat_id_cases(t);
    cases.insert(cases.end(), more.begin(), more.end());
  }
  run(cases, naive_mul_mat_id);
}
TEST_P(MulMatId, MatchesReference_KQuants) {
  std::vector<Case> cases;
  for (DType t : {DType::kQ2_K, DType::kQ3_K, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K}) {
    auto more = mul_mat_id_cases(t);
    cases.insert(cases.end(), more.begin(), more.end());
  }
  run(cases, naive_mul_mat_id);
}
TEST_P(MulMatId, MatchesReference_IQ4) {
  std::vector<Case> cases = mul_mat_id_cases(DType::kIQ4_NL);
  auto more = mul_mat_id_cases(DType::kIQ4_XS);
  cases.insert(cases.end(), more.begin(), more.end());
  run(cases, naive_mul_mat_id);
}
TEST_P(MulMatId, MatchesReference_MXFP4) {
  run(mul_mat_id_cases(DType::kMXFP4), naive_mul_mat_id);
}

INSTANTIATE_TEST_SUITE_P(Conformance, MulMatId, ::testing::ValuesIn(all_targets()), target_name);

// Naive: dst[i0, i1, i2] = a[i0, i1, i2] + b[i0, ids[i1, i2]].
std::vector<double> naive_add_id(const Tensor& node, const HostValues& in) {
  const Tensor& a = *node.src[0];
  const Tensor& b = *node.src[1];
  const Tensor& ids = *node.src[2];
  return elementwise(node, [&](int64_t i0, int64_t i1, int64_t i2, int64_t) {
    const auto id = static_cast<int64_t>(in.at(ids, i1, i2, 0, 0));
    return in.at(a, i0, i1, i2, 0) + in.at(b, i0, id, 0, 0);
  });
}

class AddId : public OpTest {};

TEST_P(AddId, MatchesReference) {
  std::vector<Case> cases;
  // (Plain copies, not structured bindings: clang 14 cannot capture those.)
  for (const std::array<int64_t, 4>& s : std::vector<std::array<int64_t, 4>>{{7, 3, 5, 4}, {64, 4, 1, 32}, {1, 1, 1, 1}}) {
    const int64_t ne0 = s[0], ne1 = s[1], ne2 = s[2], n = s[3];
    cases.push_back({fmt::format("ne{}x{}x{}_n{}", ne0, ne1, ne2, n),
                     [=](CaseGraph& c) {
                       Tensor* a = c.input(DType::kF32, {ne0, ne1, ne2});
                       Tensor* b = c.input(DType::kF32, {ne0, n});
                       Tensor* ids = c.input(DType::kI32, {ne1, ne2}, integers(0, static_cast<int>(n) - 1));
                       return ops::add_id(c.g(), a, b, ids);
                     }});
  }
  run(cases, naive_add_id);
}

INSTANTIATE_TEST_SUITE_P(Conformance, AddId, ::testing::ValuesIn(all_targets()), target_name);

}  // namespace
}  // namespace tessera::conformance
