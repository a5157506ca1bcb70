// avx512 tier: AVX-512 F/BW/VL with VNNI. Zmm quantizers and float tiles
// (4 rows x 6 columns), ymm vpdpbusd for GGUF-layout quants, zmm vpdpbusd
// panels for repacked Q4_0 / Q8_0.
#include "backends/cpu/kernels/avx512/intrin.h"

#include "backends/cpu/kernels/avx512/avx512.h"
#include "backends/cpu/kernels/avx512/vec.h"
#include "backends/cpu/kernels/x86/attn.h"
#include "backends/cpu/kernels/x86/float_mat.h"
#include "backends/cpu/kernels/x86/norm.h"
#include "backends/cpu/kernels/x86/quantize.h"
#include "backends/cpu/kernels/x86/row_dot.h"

namespace tessera::cpu {
namespace {

struct DotVnni {
  static __m256i dot(__m256i acc, __m256i u8, __m256i s8) {
    return _mm256_dpbusd_epi32(acc, u8, s8);
  }
  static __m256i dot_scaled(__m256i acc, __m256i u8, __m256i s8, int lo, int hi) {
    const __m256i scale = _mm256_set_m128i(_mm_set1_epi32(hi), _mm_set1_epi32(lo));
    return _mm256_add_epi32(
        acc, _mm256_mullo_epi32(_mm256_dpbusd_epi32(_mm256_setzero_si256(), u8, s8), scale));
  }
};

constexpr int kTileRows = 4, kTileCols = 6, kRowCols = 4;

template <class Fmt>
void legacy(const MatArgs& a) {
  RowDot<LegacyRow<DotVnni, Fmt>::template Fn, kRowCols>::run(a);
}

}  // namespace

extern const Kernels kAvx512Kernels{
    .isa = Isa::kAvx512,
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
    .q4_k = {RowDot<Q4KRow<DotVnni>::template Fn, kRowCols>::run, ActFormat::kQ8K},
    .q6_k = {RowDot<Q6KRow<DotVnni>::template Fn, kRowCols>::run, ActFormat::kQ8K},
    .q4_0_panel = {avx512::mat_q4_0_panel, ActFormat::kQ8},
    .q8_0_panel = {avx512::mat_q8_0_panel, ActFormat::kQ8},
    .attn_f16 = Attn<Vec>::run,
    .rms_norm = rms_norm_row<Vec>,
    .exp_sum = exp_sum_row<Vec>,
};

}  // namespace tessera::cpu
