// Helpers shared by the quantizers that reproduce ggml's searches bit for bit
// (quants_k_quantize.cpp, quants_iq4.cpp).
//
// Byte equality with ggml needs the same float operations in the same order,
// one rounding per operation. ggml-quants.c is compiled as C with GCC's default
// -ffp-contract=fast, but for baseline x86-64 (no FMA instructions), so nothing
// is fused there; a tessera built with -march=native must not fuse either, so
// the files that include this header turn contraction off for themselves.
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

namespace tessera::quant_search {

// Sub-blocks whose largest magnitude is below this count as all zero.
constexpr float kGroupMaxEps = 1e-15f;

// Round to nearest, ties to even, by adding 1.5 * 2^23 and reading the low
// mantissa bits; valid for |v| <= 2^22 - 1 (out of range gives garbage, as in ggml).
inline int nearest_int(float v) {
  const float biased = v + 12582912.0f;
  int32_t bits;
  std::memcpy(&bits, &biased, sizeof bits);
  return (bits & 0x007fffff) - 0x00400000;
}

inline int clamp_int(int v, int lo, int hi) {
  return v < lo ? lo : (v > hi ? hi : v);
}

}  // namespace tessera::quant_search
