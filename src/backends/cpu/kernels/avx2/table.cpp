// avx2 tier: AVX2 + FMA + F16C, no VNNI. Integer dots are maddubs (u8 x s8
// pairs to s16) + madd (to s32); signed weights use |w| and sign(a, w) so no
// pair can saturate (2 * 127 * 128 < 32768).
#include <immintrin.h>

#include "cpu/kernels/avx2/avx2.h"
#include "cpu/kernels/avx2/vec.h"
#include "cpu/kernels/x86/table.h"

namespace tessera::cpu {
namespace {

struct DotMaddubs {
  // u8 <= 63 for every caller but signed Q8_0 (|w| <= 128 against a in [-127, 127]).
  static __m256i dot(__m256i acc, __m256i u8, __m256i s8) {
    const __m256i pairs = _mm256_maddubs_epi16(u8, s8);
    return _mm256_add_epi32(acc, _mm256_madd_epi16(pairs, _mm256_set1_epi16(1)));
  }
  static __m256i dot_scaled(__m256i acc, __m256i u8, __m256i s8, int lo, int hi) {
    const __m256i scale = _mm256_set_m128i(_mm_set1_epi16(static_cast<int16_t>(hi)),
                                           _mm_set1_epi16(static_cast<int16_t>(lo)));
    return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u8, s8), scale));
  }
};

}  // namespace

extern constinit const Kernels kAvx2Kernels =
    X86Table<Vec, DotMaddubs, TileSizes{4, 3, 4, 2, 6, 2, 6, 6, 2}>::make(
        Isa::kAvx2, PanelFns{.q4_0 = avx2::mat_q4_0_panel,
                             .q8_0 = avx2::mat_q8_0_panel,
                             .iq4_nl = avx2::mat_iq4_nl_panel,
                             .mxfp4 = avx2::mat_mxfp4_panel,
                             .q2_k = avx2::mat_q2_k_panel,
                             .q3_k = avx2::mat_q3_k_panel,
                             .q4_k = avx2::mat_q4_k_panel,
                             .q5_k = avx2::mat_q5_k_panel,
                             .q6_k = avx2::mat_q6_k_panel,
                             .iq4_xs = avx2::mat_iq4_xs_panel});

}  // namespace tessera::cpu
