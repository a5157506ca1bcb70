// Input checks shared by the graph builders (src/core/ops*.cpp): each failure
// is an Error(kInvalidArgument) reading "[OP] found X, expected Y".
#pragma once

#include <string>
#include <string_view>

#include "tessera/core/error.h"
#include "tessera/core/tensor.h"

namespace tessera::ops::detail {

[[noreturn]] inline void bad_input(Op op, std::string_view found, std::string_view expected) {
  fail(ErrorCategory::kInvalidArgument, "[{}] found {}, expected {}", op_name(op), found, expected);
}
[[noreturn]] inline void bad_input(Op op, const Tensor& t, std::string_view expected) {
  bad_input(op, t.describe(), expected);
}
inline void expect(bool ok, Op op, const Tensor& t, std::string_view expected) {
  if (!ok) bad_input(op, t, expected);
}
// A param value (shown as "name v") that fails a check.
inline void expect_param(bool ok, Op op, std::string_view name, long long value,
                         std::string_view expected) {
  if (!ok) bad_input(op, fmt::format("{} {}", name, value), expected);
}

inline bool is_float(DType t) {
  return t == DType::kF32 || t == DType::kF16 || t == DType::kBF16;
}
inline bool is_plain(DType t) {
  return dtype_info(t).block_size == 1;
}
inline bool is_vector(const Tensor& t) {
  return t.ne[1] == 1 && t.ne[2] == 1 && t.ne[3] == 1;
}

}  // namespace tessera::ops::detail
