// avx512 tier's ceiling probes (kernels/probes.h).
#include <immintrin.h>

#include "cpu/kernels/probes.h"

namespace tessera::cpu::probes::avx512 {

uint64_t read_bytes(const uint8_t* p, size_t bytes) {
  __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0;
  for (size_t i = 0; i < bytes; i += 256) {
    a0 = _mm512_xor_si512(a0, _mm512_load_si512(p + i));
    a1 = _mm512_xor_si512(a1, _mm512_load_si512(p + i + 64));
    a2 = _mm512_xor_si512(a2, _mm512_load_si512(p + i + 128));
    a3 = _mm512_xor_si512(a3, _mm512_load_si512(p + i + 192));
  }
  const __m512i a = _mm512_xor_si512(_mm512_xor_si512(a0, a1), _mm512_xor_si512(a2, a3));
  return static_cast<uint64_t>(_mm_cvtsi128_si64(_mm512_castsi512_si128(a)));
}

float fma(int64_t rounds) {
  __m512 acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = _mm512_set1_ps(static_cast<float>(c));
  const __m512 m = _mm512_set1_ps(0.999999f), b = _mm512_set1_ps(1e-7f);
  for (int64_t i = 0; i < rounds; ++i) {
    for (int c = 0; c < kChains; ++c) acc[c] = _mm512_fmadd_ps(acc[c], m, b);
  }
  __m512 s = acc[0];
  for (int c = 1; c < kChains; ++c) s = _mm512_add_ps(s, acc[c]);
  return _mm512_reduce_add_ps(s);
}

int32_t dpbusd(int64_t rounds) {
  __m512i acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = _mm512_set1_epi32(c);
  const __m512i u = _mm512_set1_epi8(3), s = _mm512_set1_epi8(-2);
  for (int64_t i = 0; i < rounds; ++i) {
    for (int c = 0; c < kChains; ++c) acc[c] = _mm512_dpbusd_epi32(acc[c], u, s);
  }
  // Lane 0 of the vector sum: the lanes have wrapped long before (vector adds
  // wrap; a scalar reduction of them would be signed overflow).
  __m512i t = acc[0];
  for (int c = 1; c < kChains; ++c) t = _mm512_add_epi32(t, acc[c]);
  return _mm_cvtsi128_si32(_mm512_castsi512_si128(t));
}

float dpbf16(int64_t rounds) {
  __m512 acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = _mm512_set1_ps(static_cast<float>(c));
  const __m512bh a = _mm512_cvtne2ps_pbh(_mm512_set1_ps(0.5f), _mm512_set1_ps(0.25f));
  const __m512bh b = _mm512_cvtne2ps_pbh(_mm512_set1_ps(1e-3f), _mm512_set1_ps(-1e-3f));
  for (int64_t i = 0; i < rounds; ++i) {
    for (int c = 0; c < kChains; ++c) acc[c] = _mm512_dpbf16_ps(acc[c], a, b);
  }
  __m512 s = acc[0];
  for (int c = 1; c < kChains; ++c) s = _mm512_add_ps(s, acc[c]);
  return _mm512_reduce_add_ps(s);
}

}  // namespace tessera::cpu::probes::avx512
