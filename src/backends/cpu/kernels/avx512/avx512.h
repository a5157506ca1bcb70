// The avx512 tier's kernels, defined in this folder's translation units
// (built with the AVX-512 F/BW/VL/VNNI/BF16 flags); table.cpp gathers them.
#pragma once

#include "cpu/kernels/kernels.h"

namespace tessera::cpu::avx512 {

void mat_q4_0_panel(const MatArgs& a);
void mat_q8_0_panel(const MatArgs& a);
void mat_iq4_nl_panel(const MatArgs& a);
void mat_mxfp4_panel(const MatArgs& a);
void mat_q2_k_panel(const MatArgs& a);  // kpanel.cpp
void mat_q3_k_panel(const MatArgs& a);
void mat_q4_k_panel(const MatArgs& a);
void mat_q5_k_panel(const MatArgs& a);
void mat_q6_k_panel(const MatArgs& a);
void mat_iq4_xs_panel(const MatArgs& a);
// The same with four GEMV streams: the amx tier's (kpanel.cpp says why).
void mat_q2_k_panel_x4(const MatArgs& a);
void mat_q3_k_panel_x4(const MatArgs& a);
void mat_q4_k_panel_x4(const MatArgs& a);
void mat_q5_k_panel_x4(const MatArgs& a);
void mat_q6_k_panel_x4(const MatArgs& a);
void mat_iq4_xs_panel_x4(const MatArgs& a);

}  // namespace tessera::cpu::avx512
