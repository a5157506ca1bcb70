#include "cpu/kernels/kernels.h"

#include "cpu/kernels/amx/amx.h"

namespace tessera::cpu {

// Each defined in its tier's own translation units.
extern const Kernels kRefKernels;
extern const Kernels kAvx2Kernels;
extern const Kernels kAvx512Kernels;

const Kernels& kernels_for(Isa isa) {
  switch (isa) {
    case Isa::kRef:
      return kRefKernels;
    case Isa::kAvx2:
      return kAvx2Kernels;
    case Isa::kAvx512:
      return kAvx512Kernels;
    case Isa::kAmx: {
      static const Kernels amx = [] {
        Kernels k = kAvx512Kernels;
        k.isa = Isa::kAmx;
        k.q4_0_panel.run = amx::mat_q4_0_panel;
        k.q8_0_panel.run = amx::mat_q8_0_panel;
        k.iq4_nl_panel.run = amx::mat_iq4_nl_panel;
        k.iq4_xs_panel.run = amx::mat_iq4_xs_panel;
        k.q2_k_panel.run = amx::mat_q2_k_panel;
        k.q3_k_panel.run = amx::mat_q3_k_panel;
        k.q4_k_panel.run = amx::mat_q4_k_panel;
        k.q5_k_panel.run = amx::mat_q5_k_panel;
        k.q6_k_panel.run = amx::mat_q6_k_panel;
        k.q4_0_panel.gemm_rows = k.q8_0_panel.gemm_rows = k.iq4_nl_panel.gemm_rows = amx::kGemmRows;
        for (MatKernel* m : {&k.q2_k_panel, &k.q3_k_panel, &k.q4_k_panel, &k.q5_k_panel,
                             &k.q6_k_panel, &k.iq4_xs_panel}) {
          m->gemm_rows = amx::kGemmRows;
          m->gemm_cols = amx::kKGemmCols;
        }
        return k;
      }();
      return amx;
    }
  }
  return kRefKernels;
}

}  // namespace tessera::cpu
