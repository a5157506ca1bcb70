// Shared by SOFT_MAX and FLASH_ATTN_EXT.
#pragma once

#include <cmath>
#include <cstdint>

namespace tessera::cpu {

// ALiBi slope of head h of n_head (ggml's formula): heads below the largest
// power of two n2 <= n_head take m0^(h+1), the rest m1^(2(h-n2)+1), with
// m0 = 2^(-max_bias/n2), m1 = 2^(-max_bias/(2 n2)). 1 when max_bias <= 0.
inline float alibi_slope(float max_bias, int64_t h, int64_t n_head) {
  if (max_bias <= 0.0f) return 1.0f;
  const auto n2 = static_cast<int64_t>(1)
                  << static_cast<int>(std::floor(std::log2(static_cast<double>(n_head))));
  const float m0 = std::pow(2.0f, -max_bias / static_cast<float>(n2));
  const float m1 = std::pow(2.0f, -(max_bias / 2.0f) / static_cast<float>(n2));
  return h < n2 ? std::pow(m0, static_cast<float>(h + 1))
                : std::pow(m1, static_cast<float>(2 * (h - n2) + 1));
}

}  // namespace tessera::cpu
