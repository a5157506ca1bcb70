// AVX-VNNI probe (kernels/probes.h): built with -mavxvnni, run only where
// has_avx_vnni().
#include <immintrin.h>

#include "cpu/kernels/probes.h"

namespace tessera::cpu::probes::avx2 {

int32_t avx_vnni(int64_t rounds) {
  __m256i acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = _mm256_set1_epi32(c);
  const __m256i u = _mm256_set1_epi8(3), s = _mm256_set1_epi8(-2);
  for (int64_t i = 0; i < rounds; ++i) {
    for (int c = 0; c < kChains; ++c) acc[c] = _mm256_dpbusd_avx_epi32(acc[c], u, s);
  }
  __m256i t = acc[0];
  for (int c = 1; c < kChains; ++c) t = _mm256_add_epi32(t, acc[c]);
  return _mm256_extract_epi32(t, 0);
}

}  // namespace tessera::cpu::probes::avx2
