// avx2 tier: Q4_0 / Q8_0 weights in 16-row panels (repack.h) times Q8
// activations. Each 64-byte group of a panel is two ymm of 8 rows x 4 k;
// four activation bytes are broadcast to every lane, so a row's sum stays in
// its own 32-bit lane (outer-product form, as the avx512 tier).
// Q4_0: 16 products of nibble x int8 per s16 lane over a whole block stay
// below 16 * 15 * 127 = 30480, so maddubs results are summed in s16 and
// widened once per block; the -8 offset is subtracted as -8 sum(a).
// Q8_0 (signed): maddubs(|w|, sign(a, w)) and a madd per group.
#include <immintrin.h>

#include <cstring>

#include "backends/cpu/kernels/avx2/avx2.h"
#include "backends/cpu/kernels/repack.h"
#include "backends/cpu/kernels/x86/panels.h"

namespace tessera::cpu::avx2 {
namespace {

constexpr int kGroups = 8;       // 4-k groups per 32-k block
constexpr int kTileColumns = 4;  // register tile: 8 rows x 4 columns per half panel

inline __m256i bcast4(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, sizeof v);
  return _mm256_set1_epi32(v);
}

struct PanelQ4_0 {
  static constexpr size_t kQuantBytes = 256;
  // Group g of half h (rows 8h .. 8h + 7): low nibbles of load g % 4 for g < 4, high for g >= 4.
  static __m256i group(const uint8_t* q, int h, int g) {
    const __m256i v =
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + 64 * (g % 4) + 32 * h));
    const __m256i m = _mm256_set1_epi8(0x0F);
    return g < 4 ? _mm256_and_si256(v, m) : _mm256_and_si256(_mm256_srli_epi16(v, 4), m);
  }
  template <int C>
  static void block(const uint8_t* q, int h, const BlockQ8* const* xb, __m256i s32[C]) {
    __m256i s16[C];
    for (int c = 0; c < C; ++c) s16[c] = _mm256_setzero_si256();
    for (int g = 0; g < kGroups; ++g) {
      const __m256i w = group(q, h, g);
      for (int c = 0; c < C; ++c) {
        s16[c] = _mm256_add_epi16(s16[c], _mm256_maddubs_epi16(w, bcast4(xb[c]->qs + 4 * g)));
      }
    }
    for (int c = 0; c < C; ++c) {
      s32[c] = _mm256_sub_epi32(_mm256_madd_epi16(s16[c], _mm256_set1_epi16(1)),
                                _mm256_set1_epi32(8 * xb[c]->sum));
    }
  }
};

struct PanelQ8_0 {
  static constexpr size_t kQuantBytes = 512;
  template <int C>
  static void block(const uint8_t* q, int h, const BlockQ8* const* xb, __m256i s32[C]) {
    for (int c = 0; c < C; ++c) s32[c] = _mm256_setzero_si256();
    for (int g = 0; g < kGroups; ++g) {
      const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + 64 * g + 32 * h));
      const __m256i aw = _mm256_sign_epi8(w, w);
      for (int c = 0; c < C; ++c) {
        const __m256i sa = _mm256_sign_epi8(bcast4(xb[c]->qs + 4 * g), w);
        s32[c] = _mm256_add_epi32(
            s32[c], _mm256_madd_epi16(_mm256_maddubs_epi16(aw, sa), _mm256_set1_epi16(1)));
      }
    }
  }
};

// One panel (16 rows), blocks [b0, b1), times columns x[0 .. C).
template <class P, int C>
void panel_tile(const PanelSpan& p, const BlockQ8* const* x, float* const* out) {
  __m256 acc[2][C];
  for (int h = 0; h < 2; ++h) {
    for (int c = 0; c < C; ++c) acc[h][c] = _mm256_setzero_ps();
  }
  for (int64_t b = p.b0; b < p.b1; ++b) {
    const uint8_t* q = p.quants + static_cast<size_t>(b) * P::kQuantBytes;
    prefetch_block<P::kQuantBytes>(p.scales, q, b);
    const BlockQ8* xb[C];
    for (int c = 0; c < C; ++c) xb[c] = x[c] + b;
    for (int h = 0; h < 2; ++h) {
      const __m256 dw = _mm256_cvtph_ps(
          _mm_loadu_si128(reinterpret_cast<const __m128i*>(p.scales + 32 * b + 16 * h)));
      __m256i s[C];
      P::template block<C>(q, h, xb, s);
      for (int c = 0; c < C; ++c) {
        acc[h][c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s[c]),
                                    _mm256_mul_ps(dw, _mm256_set1_ps(xb[c]->d)), acc[h][c]);
      }
    }
  }
  for (int c = 0; c < C; ++c) {
    alignas(32) float tmp[kPanelRows];
    _mm256_store_ps(tmp, acc[0][c]);
    _mm256_store_ps(tmp + 8, acc[1][c]);
    for (int r = 0; r < p.valid; ++r) out[c][r] = p.accumulate ? out[c][r] + tmp[r] : tmp[r];
  }
}

template <class P>
struct Tiles {
  static constexpr int kMaxCols = kTileColumns;
  template <int C>
  static void tile(const PanelSpan& p, const BlockQ8* const* x, float* const* out) {
    panel_tile<P, C>(p, x, out);
  }
};

}  // namespace

void mat_q4_0_panel(const MatArgs& a) {
  PanelLoop<Tiles<PanelQ4_0>>::run(a);
}
void mat_q8_0_panel(const MatArgs& a) {
  PanelLoop<Tiles<PanelQ8_0>>::run(a);
}

}  // namespace tessera::cpu::avx2
