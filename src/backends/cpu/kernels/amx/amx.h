// The amx tier: the avx512 tier's table with its panel GEMMs on AMX-INT8
// tiles (kernels_for builds it from kAvx512Kernels). This folder's
// translation units are built with the avx512 flags plus AMX-TILE/INT8.
#pragma once

#include <cstdint>

#include "cpu/kernels/kernels.h"

namespace tessera::cpu::amx {

// Fewer columns than this go to the avx512 kernels (GEMV shapes: a tile's
// rows would sit mostly empty).
inline constexpr int64_t kMinCols = 9;
// Rows per GEMM chunk: each call gathers its columns' activation scales and
// (Q4_0) unpacks its panels, so fewer, taller calls. TinyLlama-shape pp512 on
// a Sapphire Rapids guest: 256 rows ran 6-8% faster than 64; 512 as 256.
inline constexpr int64_t kGemmRows = 256;
// Columns per GEMM chunk for Q4_K / Q6_K: each call unpacks its panels'
// blocks into B tiles (4-5.5 KiB a block), which 64 columns (MUL_MAT's
// default) reuse only 4 times: that unpacking was 1/6 of the Q4_K GEMM's time.
inline constexpr int64_t kKGemmCols = 256;

// The 64-byte operand of ldtilecfg (palette 1): each tile's rows and bytes
// per row.
struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};
static_assert(sizeof(TileConfig) == 64);

void mat_q4_0_panel(const MatArgs& a);
void mat_q8_0_panel(const MatArgs& a);
void mat_iq4_nl_panel(const MatArgs& a);
void mat_q2_k_panel(const MatArgs& a);  // kpanel.cpp
void mat_q3_k_panel(const MatArgs& a);
void mat_q4_k_panel(const MatArgs& a);
void mat_q5_k_panel(const MatArgs& a);
void mat_q6_k_panel(const MatArgs& a);
void mat_iq4_xs_panel(const MatArgs& a);

}  // namespace tessera::cpu::amx
