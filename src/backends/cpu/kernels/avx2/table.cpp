// avx2 tier: AVX2 + FMA + F16C, no VNNI. Integer dots are maddubs (u8 x s8
// pairs to s16) + madd (to s32); signed weights use |w| and sign(a, w) so no
// pair can saturate (2 * 127 * 128 < 32768).
#include <immintrin.h>

#include "backends/cpu/kernels/avx2/avx2.h"
#include "backends/cpu/kernels/avx2/vec.h"
#include "backends/cpu/kernels/x86/attn.h"
#include "backends/cpu/kernels/x86/float_mat.h"
#include "backends/cpu/kernels/x86/norm.h"
#include "backends/cpu/kernels/x86/quantize.h"
#include "backends/cpu/kernels/x86/row_dot.h"

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

constexpr int kTileRows = 2, kTileCols = 4, kRowCols = 4;

template <class Fmt>
void legacy(const MatArgs& a) {
  RowDot<LegacyRow<DotMaddubs, Fmt>::template Fn, kRowCols>::run(a);
}

}  // namespace

extern const Kernels kAvx2Kernels{
    .isa = Isa::kAvx2,
    .quantize_q8 = quantize_q8<Vec>,
    .quantize_q8_k = quantize_q8_k<Vec>,
    .to_f16 = to_f16_row,
    .f32 = {FloatTiles<Vec, LoadF32<Vec>, kTileRows, kTileCols>::run, ActFormat::kF32},
    .f16 = {FloatTiles<Vec, LoadF16<Vec>, kTileRows, kTileCols>::run, ActFormat::kF32},
    .bf16 = {FloatTiles<Vec, LoadBF16<Vec>, kTileRows, kTileCols>::run, ActFormat::kF32},
    .q4_0 = {legacy<FmtQ4_0>, ActFormat::kQ8},
    .q4_1 = {legacy<FmtQ4_1>, ActFormat::kQ8},
    .q5_0 = {legacy<FmtQ5_0>, ActFormat::kQ8},
    .q5_1 = {legacy<FmtQ5_1>, ActFormat::kQ8},
    .q8_0 = {legacy<FmtQ8_0>, ActFormat::kQ8},
    .q4_k = {RowDot<Q4KRow<DotMaddubs>::template Fn, kRowCols>::run, ActFormat::kQ8K},
    .q6_k = {RowDot<Q6KRow<DotMaddubs>::template Fn, kRowCols>::run, ActFormat::kQ8K},
    .q4_0_panel = {avx2::mat_q4_0_panel, ActFormat::kQ8},
    .q8_0_panel = {avx2::mat_q8_0_panel, ActFormat::kQ8},
    .attn_f16 = Attn<Vec>::run,
    .rms_norm = rms_norm_row<Vec>,
    .exp_sum = exp_sum_row<Vec>,
};

}  // namespace tessera::cpu
