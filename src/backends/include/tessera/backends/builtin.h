// The backends compiled into this build (CPU always; BLAS and CUDA where the
// build found them), gathered into a Runtime: the one place above the runtime
// that names them.
#pragma once

#include <memory>

#include "tessera/runtime/runtime.h"

namespace tessera {

// A Runtime holding every backend compiled into this build, plus modules
// found by load_default_modules() when `load_modules` is true.
std::unique_ptr<Runtime> make_runtime(bool load_modules = true);

}  // namespace tessera
