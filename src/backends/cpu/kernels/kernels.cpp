#include "backends/cpu/kernels/kernels.h"

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
  }
  return kRefKernels;
}

}  // namespace tessera::cpu
