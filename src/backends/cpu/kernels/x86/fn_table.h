// A constexpr table of kernel entry points, e.g. tiles by size. Everything a
// tier's translation unit instantiates stays in an anonymous namespace: a
// shared instantiation (std::array<...>::operator[], std::min<long>) built with
// one tier's flags could be the copy the linker keeps for every caller.
#pragma once

#include <cstddef>
#include <cstdint>

namespace tessera::cpu {
namespace {

template <class Fn, size_t N>
struct FnTable {
  Fn at[N];
};

inline int64_t min_i64(int64_t a, int64_t b) {
  return a < b ? a : b;
}

}  // namespace
}  // namespace tessera::cpu
