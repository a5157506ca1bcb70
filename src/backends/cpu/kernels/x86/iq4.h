// The IQ4 levels (kvalues_iq4nl) as the x86 kernels look them up: 16 bytes
// that vpshufb indexes by nibble, signed as they are (avx2 maddubs with the
// sign trick; AMX tdpbssd) or plus 128 (vpdpbusd wants unsigned weights:
// sum (w + 128) a - 128 sum a is the dot, exactly).
#pragma once

#include <array>
#include <cstdint>

#include "tessera/core/quants.h"

namespace tessera::cpu {

inline constexpr std::array<uint8_t, 16> kIq4LevelsU8 = [] {
  std::array<uint8_t, 16> t{};
  for (int i = 0; i < 16; ++i) t[i] = static_cast<uint8_t>(kvalues_iq4nl[i] + 128);
  return t;
}();
inline constexpr int kIq4LevelsOffset = 128;

// MXFP4's levels (kvalues_mxfp4, the doubled e2m1 codes, |w| <= 12) plus 12:
// unsigned and at most 24, for avx2's maddubs and avx512's vpdpbusd alike.
inline constexpr int kMxfp4LevelsOffset = 12;
inline constexpr std::array<uint8_t, 16> kMxfp4LevelsU8 = [] {
  std::array<uint8_t, 16> t{};
  for (int i = 0; i < 16; ++i) t[i] = static_cast<uint8_t>(kvalues_mxfp4[i] + kMxfp4LevelsOffset);
  return t;
}();

}  // namespace tessera::cpu
