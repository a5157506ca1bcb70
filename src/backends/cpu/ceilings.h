// The CPU device's ceilings (tessera/ceilings.h), probed with the loops of
// the tier it runs (kernels/probes.h) on `threads` threads started together.
#pragma once

#include "cpu/isa.h"
#include "tessera/backends/ceilings.h"

namespace tessera::cpu {

Ceilings measure_ceilings(Isa isa, int threads);

}  // namespace tessera::cpu
