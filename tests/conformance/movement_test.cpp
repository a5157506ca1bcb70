// Data movement: GET_ROWS (every type with a dequantizer, from weights and
// activations), CPY/DUP/CONT (float conversions, quantizing and dequantizing
// copies, permuted sources, strided destinations, reshaping copies), SET_ROWS
// (every float type and the 32-block quantized types, i32 and i64 ids,
// broadcast ids, strided destinations and values), CONCAT, REPEAT, ACC and PAD.
#include <algorithm>
#include <numeric>

#include "conformance/op_test.h"
#include "tessera/core/op_params.h"

namespace tessera::conformance {
namespace {

using Shape = std::array<int64_t, kMaxDims>;

// ---- naive references ------------------------------------------------------------------

// Values of `t` (an input or a view of one) in row-major order of its shape.
std::vector<double> flat_values(const Tensor& t, const HostValues& in) {
  return elementwise(
      t, [&](int64_t i0, int64_t i1, int64_t i2, int64_t i3) { return in.at(t, i0, i1, i2, i3); });
}

std::vector<double> naive_get_rows(const Tensor& node, const HostValues& in) {
  const Tensor& a = *node.src[0];
  const Tensor& ids = *node.src[1];
  return elementwise(node, [&](int64_t i0, int64_t i1, int64_t i2, int64_t i3) {
    const auto row = static_cast<int64_t>(in.at(ids, i1, i2, i3, 0));
    return in.at(a, i0, row, i2, i3);
  });
}

// CPY, DUP, CONT: the source's elements in flat order.
std::vector<double> naive_copy(const Tensor& node, const HostValues& in) {
  return flat_values(*node.src[0], in);
}

// SET_ROWS: the destination's prior values, with row ids[i, i2 % ne2', i3 % ne3']
// of each (i2, i3) replaced by values row i. (For quantized destinations the
// harness then rounds every row through the type: the written rows become
// quantize_row of the values, the others stay as they were.)
std::vector<double> naive_set_rows(const Tensor& node, const HostValues& in) {
  const Tensor& values = *node.src[0];
  const Tensor& ids = *node.src[1];
  std::vector<double> out = flat_values(*node.src[2], in);
  for_each_index(values.ne, [&](int64_t i0, int64_t i1, int64_t i2, int64_t i3) {
    const auto row = static_cast<int64_t>(in.at(ids, i1, i2 % ids.ne[1], i3 % ids.ne[2], 0));
    const int64_t flat = ((i3 * node.ne[2] + i2) * node.ne[1] + row) * node.ne[0] + i0;
    out[static_cast<size_t>(flat)] = in.at(values, i0, i1, i2, i3);
  });
  return out;
}

std::vector<double> naive_concat(const Tensor& node, const HostValues& in) {
  const Tensor& a = *node.src[0];
  const Tensor& b = *node.src[1];
  const auto dim = static_cast<size_t>(ConcatParams::get(node).dim);
  return elementwise(node, [&](int64_t i0, int64_t i1, int64_t i2, int64_t i3) {
    Shape i{i0, i1, i2, i3};
    if (i[dim] < a.ne[dim]) return in.at(a, i0, i1, i2, i3);
    i[dim] -= a.ne[dim];
    return in.at(b, i[0], i[1], i[2], i[3]);
  });
}

std::vector<double> naive_repeat(const Tensor& node, const HostValues& in) {
  const Tensor& a = *node.src[0];
  return elementwise(node, [&](int64_t i0, int64_t i1, int64_t i2, int64_t i3) {
    return in.at(a, i0 % a.ne[0], i1 % a.ne[1], i2 % a.ne[2], i3 % a.ne[3]);
  });
}

std::vector<double> naive_pad(const Tensor& node, const HostValues& in) {
  const Tensor& a = *node.src[0];
  return elementwise(node, [&](int64_t i0, int64_t i1, int64_t i2, int64_t i3) {
    const bool inside = i0 < a.ne[0] && i1 < a.ne[1] && i2 < a.ne[2] && i3 < a.ne[3];
    return inside ? in.at(a, i0, i1, i2, i3) : 0.0;
  });
}

// ACC: a's values, then b added at byte offset + i0*4 + i1*nb1 + i2*nb2 + i3*nb3.
std::vector<double> naive_acc(const Tensor& node, const HostValues& in) {
  const Tensor& a = *node.src[0];
  const Tensor& b = *node.src[1];
  std::vector<double> out = flat_values(a, in);
  const AccParams p = AccParams::get(node);
  const int64_t nb1 = p.nb1, nb2 = p.nb2, nb3 = p.nb3;
  const int64_t offset = p.offset;
  for_each_index(b.ne, [&](int64_t i0, int64_t i1, int64_t i2, int64_t i3) {
    const int64_t byte = offset + i0 * 4 + i1 * nb1 + i2 * nb2 + i3 * nb3;
    out[static_cast<size_t>(byte / 4)] += in.at(b, i0, i1, i2, i3);
  });
  return out;
}

// ---- cases ----------------------------------------------------------------------------

// Every type tessera can dequantize; rows of 2 K-quant super-blocks or 3 blocks.
const DType kReadableTypes[] = {DType::kF32,  DType::kF16,  DType::kBF16,   DType::kQ8_0,
                                DType::kQ4_0, DType::kQ4_1, DType::kQ5_0,   DType::kQ5_1,
                                DType::kQ2_K, DType::kQ3_K, DType::kQ4_K,   DType::kQ5_K,
                                DType::kQ6_K, DType::kQ8_K, DType::kIQ4_NL, DType::kIQ4_XS};

int64_t row_len(DType type) {
  const int64_t block = dtype_info(type).block_size;
  return block == 1 ? 37 : block == 256 ? 512 : 96;
}

std::vector<Case> get_rows_cases() {
  std::vector<Case> cases;
  for (DType type : kReadableTypes) {
    const int64_t n = row_len(type);
    // As a token embedding (a weight, maybe repacked) and as an activation in batches.
    cases.push_back({std::string(dtype_name(type)) + "_weight", [=](CaseGraph& c) {
                       Tensor* a = c.weight(type, {n, 11});
                       return ops::get_rows(c.g(), a, c.input(DType::kI32, {6}, integers(0, 10)));
                     }});
    cases.push_back(
        {std::string(dtype_name(type)) + "_batched", [=](CaseGraph& c) {
           Tensor* a = c.input(type, {n, 5, 3, 2});
           return ops::get_rows(c.g(), a, c.input(DType::kI32, {4, 3, 2}, integers(0, 4)));
         }});
  }
  cases.push_back({"i32", [](CaseGraph& c) {
                     Tensor* a = c.input(DType::kI32, {9, 7}, integers(-1000, 1000));
                     return ops::get_rows(c.g(), a, c.input(DType::kI32, {5}, integers(0, 6)));
                   }});
  cases.push_back({"one_row_of_one", [](CaseGraph& c) {
                     return ops::get_rows(c.g(), c.input(DType::kF32, {1, 1}),
                                          c.input(DType::kI32, {1}, integers(0, 0)));
                   }});
  cases.push_back({"strided_f16_rows", [](CaseGraph& c) {
                     Tensor* a = strided_input(c, DType::kF16, {21, 8, 1, 1}, 4);
                     return ops::get_rows(c.g(), a, c.input(DType::kI32, {9}, integers(0, 7)));
                   }});
  return cases;
}

Case copy_case(std::string name, DType from, Shape src, DType to, Shape dst) {
  return {std::move(name) + "_" + shape_name(from, src) + "_to_" + shape_name(to, dst),
          [=](CaseGraph& c) {
            Tensor* a = c.input(from, {src[0], src[1], src[2], src[3]});
            Tensor* b = c.input(to, {dst[0], dst[1], dst[2], dst[3]});
            return ops::cpy(c.g(), a, b);
          },
          kNmseCopy};
}

std::vector<Case> cpy_cases() {
  std::vector<Case> cases;
  const DType floats[] = {DType::kF32, DType::kF16, DType::kBF16};
  for (DType from : floats) {
    for (DType to : floats)
      cases.push_back(copy_case("float", from, {33, 7, 3, 1}, to, {33, 7, 3, 1}));
  }
  cases.push_back(copy_case("reshaping", DType::kF32, {12, 5, 2, 1}, DType::kF16, {20, 6, 1, 1}));
  cases.push_back(copy_case("one", DType::kF16, {1, 1, 1, 1}, DType::kF32, {1, 1, 1, 1}));
  // Quantizing copies, into every type with a quantizer; then back out.
  for (DType to : {DType::kQ8_0, DType::kQ4_0, DType::kQ4_1, DType::kQ5_0, DType::kQ5_1,
                   DType::kQ4_K, DType::kQ6_K, DType::kQ8_K}) {
    const int64_t n = row_len(to);
    cases.push_back(copy_case("quantize", DType::kF32, {n, 5, 2, 1}, to, {n, 5, 2, 1}));
    cases.push_back(copy_case("dequantize", to, {n, 3, 1, 1}, DType::kF32, {n, 3, 1, 1}));
  }
  cases.push_back(copy_case("quantize", DType::kF16, {64, 3, 1, 1}, DType::kQ8_0, {64, 3, 1, 1}));
  cases.push_back(
      copy_case("quantize_reshaping", DType::kF32, {32, 6, 1, 1}, DType::kQ4_0, {64, 3, 1, 1}));
  cases.push_back(
      copy_case("dequantize_reshaping", DType::kQ8_0, {64, 3, 1, 1}, DType::kF16, {16, 12, 1, 1}));
  cases.push_back(
      copy_case("raw_blocks", DType::kQ4_0, {64, 3, 2, 1}, DType::kQ4_0, {64, 3, 2, 1}));
  cases.push_back(copy_case("raw_i32", DType::kI32, {7, 3, 1, 1}, DType::kI32, {3, 7, 1, 1}));
  // Permuted source (a transposing copy) into each float type and Q8_0.
  for (DType to : {DType::kF32, DType::kF16, DType::kBF16, DType::kQ8_0}) {
    cases.push_back({"permuted_f32_to_" + std::string(dtype_name(to)),
                     [=](CaseGraph& c) {
                       Tensor* a = permuted_input(c, DType::kF32, {5, 64, 3, 1}, {1, 0, 2, 3});
                       return ops::cpy(c.g(), a, c.input(to, {64, 5, 3, 1}));
                     },
                     kNmseCopy});
  }
  // A KV-cache write: a permuted f32 batch into rows n_past.. of an f16 cache view.
  cases.push_back({"kv_cache_write_f16",
                   [](CaseGraph& c) {
                     const int64_t d = 24, heads = 3, tokens = 5, ctx = 16, n_past = 7;
                     Tensor* k = c.input(DType::kF32, {d, heads, tokens});
                     Tensor* cache = c.input(DType::kF16, {d, ctx, heads});
                     Graph& g = c.g();
                     Tensor* dst = ops::view(g, cache, {d, tokens, heads},
                                             {cache->nb[1], cache->nb[2]}, n_past * cache->nb[1]);
                     return ops::cpy(g, ops::permute(g, k, 0, 2, 1, 3), dst);
                   },
                   kNmseCopy});
  cases.push_back({"into_strided_view_bf16",
                   [](CaseGraph& c) {
                     Tensor* a = c.input(DType::kF32, {19, 4, 2});
                     Tensor* b = c.input(DType::kBF16, {23, 4, 2});
                     Graph& g = c.g();
                     return ops::cpy(
                         g, a,
                         ops::view(g, b, {19, 4, 2}, {b->nb[1], b->nb[2]}, 2 * sizeof(uint16_t)));
                   },
                   kNmseCopy});
  return cases;
}

// Row ids for SET_ROWS: each run of n (one (i2, i3) slice of the ids) the first
// n of a random permutation of 0..rows-1, so no row is written twice.
Gen distinct_rows(int64_t n, int64_t rows) {
  return [n, rows](std::mt19937& rng, std::span<float> v) {
    if (n <= 0) return;
    std::vector<int64_t> perm(static_cast<size_t>(rows));
    for (size_t at = 0; at < v.size(); at += static_cast<size_t>(n)) {
      std::iota(perm.begin(), perm.end(), int64_t{0});
      std::shuffle(perm.begin(), perm.end(), rng);
      for (int64_t i = 0; i < n; ++i) {
        v[at + static_cast<size_t>(i)] = static_cast<float>(perm[static_cast<size_t>(i)]);
      }
    }
  };
}

// n f32 rows into dst (random prior content) through ids [n, ids2, ids3].
Case set_rows_case(DType type, DType id_type, Shape dst, int64_t n, int64_t ids2, int64_t ids3) {
  return {
      fmt::format("{}_{}_ids_{}x{}x{}", shape_name(type, dst), dtype_name(id_type), n, ids2, ids3),
      [=](CaseGraph& c) {
        Tensor* d = c.input(type, {dst[0], dst[1], dst[2], dst[3]});
        Tensor* v = c.input(DType::kF32, {dst[0], n, dst[2], dst[3]});
        Tensor* ids = c.input(id_type, {n, ids2, ids3}, distinct_rows(n, dst[1]));
        return ops::set_rows(c.g(), d, v, ids);
      },
      kNmseCopy};
}

std::vector<Case> set_rows_cases() {
  std::vector<Case> cases;
  for (DType type : {DType::kF32, DType::kF16, DType::kBF16, DType::kQ8_0, DType::kQ4_0,
                     DType::kQ4_1, DType::kQ5_0, DType::kQ5_1}) {
    // Float rows of odd length (vector tails); quantized rows of 3 blocks.
    const int64_t ne0 = dtype_info(type).quantized ? 96 : 37;
    for (DType id_type : {DType::kI32, DType::kI64}) {
      cases.push_back(set_rows_case(type, id_type, {ne0, 16, 1, 1}, 1, 1, 1));
      cases.push_back(set_rows_case(type, id_type, {ne0, 37, 2, 1}, 7, 2, 1));
      // ids broadcast over dims 2 and 3, and one id slice per (i2, i3).
      cases.push_back(set_rows_case(type, id_type, {ne0, 16, 3, 2}, 5, 1, 1));
      cases.push_back(set_rows_case(type, id_type, {ne0, 16, 3, 2}, 5, 3, 2));
    }
  }
  cases.push_back(set_rows_case(DType::kQ8_0, DType::kI64, {64, 16, 3, 2}, 5, 1, 2));
  cases.push_back(set_rows_case(DType::kF16, DType::kI32, {64, 16, 3, 2}, 16, 3, 1));
  // A KV-cache write: into a view of 64 elements of each 96-element cell, one
  // block (f16: one element) in, so rows are not adjacent; from a permuted
  // (element-strided) batch of f32 rows.
  for (DType type : {DType::kF16, DType::kQ8_0}) {
    cases.push_back(
        {fmt::format("kv_cache_view_{}", dtype_name(type)),
         [=](CaseGraph& c) {
           const int64_t d = 64, cells = 20, heads = 2, tokens = 6;
           Tensor* cache = c.input(type, {d + 32, cells, heads});
           Graph& g = c.g();
           Tensor* dst =
               ops::view(g, cache, {d, cells, heads}, {cache->nb[1], cache->nb[2]}, cache->nb[0]);
           Tensor* v = permuted_input(c, DType::kF32, {tokens, d, heads, 1}, {1, 0, 2, 3});
           Tensor* ids = c.input(DType::kI64, {tokens, heads}, distinct_rows(tokens, cells));
           return ops::set_rows(g, dst, v, ids);
         },
         kNmseCopy});
  }
  cases.push_back({"no_rows",
                   [](CaseGraph& c) {
                     Tensor* d = c.input(DType::kF16, {33, 4});
                     Tensor* v = c.input(DType::kF32, {33, 0});
                     Tensor* ids = c.input(DType::kI32, {0});
                     return ops::set_rows(c.g(), d, v, ids);
                   },
                   kNmseCopy});
  return cases;
}

// DUP and CONT of permuted and transposed views, each float type and i32.
std::vector<Case> contiguous_cases(bool dup) {
  std::vector<Case> cases;
  const std::array<int, kMaxDims> perms[] = {
      {1, 0, 2, 3}, {0, 2, 1, 3}, {2, 0, 1, 3}, {3, 2, 1, 0}};
  for (DType type : {DType::kF32, DType::kF16, DType::kBF16, DType::kI32}) {
    for (const auto& axes : perms) {
      const Gen gen = type == DType::kI32 ? integers(-100, 100) : uniform();
      cases.push_back(
          {fmt::format("{}_perm{}{}{}{}", dtype_name(type), axes[0], axes[1], axes[2], axes[3]),
           [=](CaseGraph& c) {
             Tensor* a = permuted_input(c, type, {7, 5, 3, 2}, axes, gen);
             return dup ? ops::dup(c.g(), a) : ops::cont(c.g(), a);
           },
           kNmseCopy});
    }
  }
  cases.push_back({"strided_f32",
                   [=](CaseGraph& c) {
                     Tensor* a = strided_input(c, DType::kF32, {33, 5, 2, 1}, 7);
                     return dup ? ops::dup(c.g(), a) : ops::cont(c.g(), a);
                   },
                   kNmseCopy});
  return cases;
}

std::vector<Case> concat_cases() {
  std::vector<Case> cases;
  for (int dim = 0; dim < kMaxDims; ++dim) {
    for (DType type : {DType::kF32, DType::kF16, DType::kI32}) {
      const Gen gen = type == DType::kI32 ? integers(-100, 100) : uniform();
      Shape nb{5, 4, 3, 2};
      nb[static_cast<size_t>(dim)] = 3;
      cases.push_back({fmt::format("dim{}_{}", dim, dtype_name(type)), [=](CaseGraph& c) {
                         Tensor* a = c.input(type, {5, 4, 3, 2}, gen);
                         Tensor* b = c.input(type, {nb[0], nb[1], nb[2], nb[3]}, gen);
                         return ops::concat(c.g(), a, b, dim);
                       }});
    }
  }
  cases.push_back({"dim1_permuted_b", [](CaseGraph& c) {
                     Tensor* a = c.input(DType::kF32, {6, 2, 3});
                     Tensor* b = permuted_input(c, DType::kF32, {5, 6, 3, 1}, {1, 0, 2, 3});
                     return ops::concat(c.g(), a, b, 1);
                   }});
  return cases;
}

std::vector<Case> repeat_cases() {
  std::vector<Case> cases;
  struct Pair {
    Shape from, to;
  };
  const Pair shapes[] = {{{1, 1, 1, 1}, {7, 3, 2, 1}},
                         {{3, 1, 2, 1}, {9, 4, 2, 3}},
                         {{5, 4, 3, 2}, {5, 4, 3, 2}},
                         {{17, 1, 1, 1}, {17, 5, 1, 1}}};
  for (const Pair& p : shapes) {
    for (DType type : {DType::kF32, DType::kF16, DType::kI32}) {
      const Gen gen = type == DType::kI32 ? integers(-100, 100) : uniform();
      cases.push_back(
          {shape_name(type, p.from) + "_to_" + shape_name(type, p.to), [=](CaseGraph& c) {
             Tensor* a = c.input(type, {p.from[0], p.from[1], p.from[2], p.from[3]}, gen);
             Tensor* like = c.g().new_tensor(type, {p.to[0], p.to[1], p.to[2], p.to[3]});
             return ops::repeat(c.g(), a, like);
           }});
    }
  }
  cases.push_back({"permuted", [](CaseGraph& c) {
                     Tensor* a = permuted_input(c, DType::kF32, {3, 4, 1, 1}, {1, 0, 2, 3});
                     return ops::repeat(c.g(), a, c.g().new_tensor(DType::kF32, {8, 6, 2}));
                   }});
  return cases;
}

std::vector<Case> acc_cases() {
  std::vector<Case> cases;
  // b into a window of a [17, 6, 3, 2] at row 1, column 2, with a's strides.
  cases.push_back({"window", [](CaseGraph& c) {
                     Tensor* a = c.input(DType::kF32, {17, 6, 3, 2});
                     Tensor* b = c.input(DType::kF32, {5, 2, 2, 1});
                     return ops::acc(c.g(), a, b, a->nb[1], a->nb[2], a->nb[3], (17 + 2) * 4);
                   }});
  cases.push_back({"every_other_row_permuted_b", [](CaseGraph& c) {
                     Tensor* a = c.input(DType::kF32, {9, 8, 2});
                     Tensor* b = permuted_input(c, DType::kF32, {4, 9, 2, 1}, {1, 0, 2, 3});
                     return ops::acc(c.g(), a, b, 2 * a->nb[1], a->nb[2], a->nb[3], 0);
                   }});
  cases.push_back({"whole", [](CaseGraph& c) {
                     Tensor* a = c.input(DType::kF32, {33, 5});
                     Tensor* b = c.input(DType::kF32, {33, 5});
                     return ops::acc(c.g(), a, b, a->nb[1], a->nb[2], a->nb[3], 0);
                   }});
  cases.push_back({"one", [](CaseGraph& c) {
                     Tensor* a = c.input(DType::kF32, {1});
                     return ops::acc(c.g(), a, c.input(DType::kF32, {1}), 4, 4, 4, 0);
                   }});
  return cases;
}

std::vector<Case> pad_cases() {
  std::vector<Case> cases;
  cases.push_back({"f32_all_dims", [](CaseGraph& c) {
                     return ops::pad(c.g(), c.input(DType::kF32, {7, 5, 3, 2}), 2, 1, 0, 3);
                   }});
  cases.push_back({"f16_dim0", [](CaseGraph& c) {
                     return ops::pad(c.g(), c.input(DType::kF16, {5, 3}), 3, 0, 0, 0);
                   }});
  cases.push_back(
      {"i32", [](CaseGraph& c) {
         return ops::pad(c.g(), c.input(DType::kI32, {4, 4}, integers(-9, 9)), 1, 2, 1, 0);
       }});
  cases.push_back({"permuted", [](CaseGraph& c) {
                     Tensor* a = permuted_input(c, DType::kF32, {6, 7, 2, 1}, {1, 0, 2, 3});
                     return ops::pad(c.g(), a, 1, 1, 1, 1);
                   }});
  cases.push_back({"none", [](CaseGraph& c) {
                     return ops::pad(c.g(), c.input(DType::kF32, {33, 2}), 0, 0, 0, 0);
                   }});
  return cases;
}

// ---- suites ---------------------------------------------------------------------------

class GetRows : public OpTest {};
class Cpy : public OpTest {};
class SetRows : public OpTest {};
class Dup : public OpTest {};
class Cont : public OpTest {};
class Concat : public OpTest {};
class Repeat : public OpTest {};
class Acc : public OpTest {};
class Pad : public OpTest {};

TEST_P(GetRows, MatchesReference_EveryReadableType) {
  run(get_rows_cases(), naive_get_rows);
}
TEST_P(Cpy, MatchesReference_ConvertQuantizePermute) {
  run(cpy_cases(), naive_copy);
}
TEST_P(SetRows, MatchesReference_StoredTypesAndBroadcastIds) {
  run(set_rows_cases(), naive_set_rows);
}
TEST_P(Dup, MatchesReference_PermutedViews) {
  run(contiguous_cases(true), naive_copy);
}
TEST_P(Cont, MatchesReference_PermutedViews) {
  run(contiguous_cases(false), naive_copy);
}
TEST_P(Concat, MatchesReference_EveryDim) {
  run(concat_cases(), naive_concat);
}
TEST_P(Repeat, MatchesReference_Tiles) {
  run(repeat_cases(), naive_repeat);
}
TEST_P(Acc, MatchesReference_Views) {
  run(acc_cases(), naive_acc);
}
TEST_P(Pad, MatchesReference_TrailingZeros) {
  run(pad_cases(), naive_pad);
}

INSTANTIATE_TEST_SUITE_P(Conformance, GetRows, ::testing::ValuesIn(all_targets()), target_name);
INSTANTIATE_TEST_SUITE_P(Conformance, Cpy, ::testing::ValuesIn(all_targets()), target_name);
INSTANTIATE_TEST_SUITE_P(Conformance, SetRows, ::testing::ValuesIn(all_targets()), target_name);
INSTANTIATE_TEST_SUITE_P(Conformance, Dup, ::testing::ValuesIn(all_targets()), target_name);
INSTANTIATE_TEST_SUITE_P(Conformance, Cont, ::testing::ValuesIn(all_targets()), target_name);
INSTANTIATE_TEST_SUITE_P(Conformance, Concat, ::testing::ValuesIn(all_targets()), target_name);
INSTANTIATE_TEST_SUITE_P(Conformance, Repeat, ::testing::ValuesIn(all_targets()), target_name);
INSTANTIATE_TEST_SUITE_P(Conformance, Acc, ::testing::ValuesIn(all_targets()), target_name);
INSTANTIATE_TEST_SUITE_P(Conformance, Pad, ::testing::ValuesIn(all_targets()), target_name);

}  // namespace
}  // namespace tessera::conformance
