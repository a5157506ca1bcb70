#include <immintrin.h>

#include "probes.h"

namespace tessera::bench {

uint64_t read_bytes_avx512(const uint8_t* p, size_t bytes) {
  __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0;
  for (size_t i = 0; i < bytes; i += 256) {
    a0 = _mm512_xor_si512(a0, _mm512_load_si512(p + i));
    a1 = _mm512_xor_si512(a1, _mm512_load_si512(p + i + 64));
    a2 = _mm512_xor_si512(a2, _mm512_load_si512(p + i + 128));
    a3 = _mm512_xor_si512(a3, _mm512_load_si512(p + i + 192));
  }
  const __m512i a = _mm512_xor_si512(_mm512_xor_si512(a0, a1), _mm512_xor_si512(a2, a3));
  alignas(64) uint64_t lanes[8];
  _mm512_store_si512(lanes, a);
  return lanes[0] ^ lanes[3] ^ lanes[7];
}

float fma_chains_avx512(int64_t iters) {
  __m512 acc[kProbeChains];
  for (int c = 0; c < kProbeChains; ++c) acc[c] = _mm512_set1_ps(static_cast<float>(c));
  const __m512 m = _mm512_set1_ps(0.999999f), b = _mm512_set1_ps(1e-7f);
  for (int64_t i = 0; i < iters; ++i) {
    for (int c = 0; c < kProbeChains; ++c) acc[c] = _mm512_fmadd_ps(acc[c], m, b);
  }
  __m512 s = acc[0];
  for (int c = 1; c < kProbeChains; ++c) s = _mm512_add_ps(s, acc[c]);
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, s);
  return lanes[0] + lanes[15];
}

int32_t dpbusd_chains_avx512(int64_t iters) {
  __m512i acc[kProbeChains];
  for (int c = 0; c < kProbeChains; ++c) acc[c] = _mm512_set1_epi32(c);
  const __m512i u = _mm512_set1_epi8(3), s = _mm512_set1_epi8(-2);
  for (int64_t i = 0; i < iters; ++i) {
    for (int c = 0; c < kProbeChains; ++c) acc[c] = _mm512_dpbusd_epi32(acc[c], u, s);
  }
  __m512i t = acc[0];
  for (int c = 1; c < kProbeChains; ++c) t = _mm512_add_epi32(t, acc[c]);
  alignas(64) int32_t lanes[16];
  _mm512_store_si512(lanes, t);
  return lanes[0] + lanes[15];
}

}  // namespace tessera::bench
