// avx512 tier: AVX-512 F/BW/VL with VNNI. Zmm quantizers and float tiles
// (4 rows x 6 columns), ymm vpdpbusd for GGUF-layout quants, zmm vpdpbusd
// panels for the repacked types.
#include "cpu/kernels/avx512/intrin.h"

#include "cpu/kernels/avx2/avx2.h"
#include "cpu/kernels/avx512/avx512.h"
#include "cpu/kernels/avx512/vec.h"
#include "cpu/kernels/x86/table.h"

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

}  // namespace

extern constinit const Kernels kAvx512Kernels =
    X86Table<Vec, DotVnni, TileSizes{4, 6, 4, 4, 16, 4, 6, 6, 4}>::make(
        Isa::kAvx512, PanelFns{.q4_0 = avx512::mat_q4_0_panel,
                               .q8_0 = avx512::mat_q8_0_panel,
                               .iq4_nl = avx512::mat_iq4_nl_panel,
                               .mxfp4 = avx512::mat_mxfp4_panel,
                               .q2_k = avx512::mat_q2_k_panel,
                               .q3_k = avx512::mat_q3_k_panel,
                               .q4_k = avx512::mat_q4_k_panel,
                               .q5_k = avx512::mat_q5_k_panel,
                               .q6_k = avx512::mat_q6_k_panel,
                               .iq4_xs = avx512::mat_iq4_xs_panel});

}  // namespace tessera::cpu
