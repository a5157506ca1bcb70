// avx2 tier's ceiling probes (kernels/probes.h).
#include <immintrin.h>

#include "cpu/kernels/probes.h"

namespace tessera::cpu::probes::avx2 {

uint64_t read_bytes(const uint8_t* p, size_t bytes) {
  __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
  for (size_t i = 0; i < bytes; i += 128) {
    a0 = _mm256_xor_si256(a0, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i)));
    a1 = _mm256_xor_si256(a1, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 32)));
    a2 = _mm256_xor_si256(a2, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 64)));
    a3 = _mm256_xor_si256(a3, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 96)));
  }
  const __m256i a = _mm256_xor_si256(_mm256_xor_si256(a0, a1), _mm256_xor_si256(a2, a3));
  return static_cast<uint64_t>(_mm256_extract_epi64(a, 0) ^ _mm256_extract_epi64(a, 3));
}

float fma(int64_t rounds) {
  __m256 acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = _mm256_set1_ps(static_cast<float>(c));
  const __m256 m = _mm256_set1_ps(0.999999f), b = _mm256_set1_ps(1e-7f);
  for (int64_t i = 0; i < rounds; ++i) {
    for (int c = 0; c < kChains; ++c) acc[c] = _mm256_fmadd_ps(acc[c], m, b);
  }
  __m256 s = acc[0];
  for (int c = 1; c < kChains; ++c) s = _mm256_add_ps(s, acc[c]);
  return _mm256_cvtss_f32(s);
}

int32_t maddubs(int64_t rounds) {
  __m256i acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = _mm256_set1_epi32(c);
  const __m256i u = _mm256_set1_epi8(3), s = _mm256_set1_epi8(-2), ones = _mm256_set1_epi16(1);
  for (int64_t i = 0; i < rounds; ++i) {
    for (int c = 0; c < kChains; ++c) {
      acc[c] = _mm256_add_epi32(acc[c], _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), ones));
    }
    // The products do not depend on the loop: keep the compiler from hoisting them.
    __asm__ volatile("" : : : "memory");
  }
  __m256i t = acc[0];
  for (int c = 1; c < kChains; ++c) t = _mm256_add_epi32(t, acc[c]);
  return _mm256_extract_epi32(t, 0);
}

}  // namespace tessera::cpu::probes::avx2
