// The one place that names the backends compiled into this build.
#include "cpu/cpu_backend.h"
#include "tessera/backends/builtin.h"

#if TESSERA_HAVE_BLAS
#include "blas/blas_backend.h"
#endif
#if TESSERA_HAVE_CUDA
#include "cuda/cuda_backend.h"
#endif

namespace tessera {

std::unique_ptr<Runtime> make_runtime(bool load_modules) {
  auto runtime = std::make_unique<Runtime>();
#if TESSERA_HAVE_CUDA
  runtime->add_backend(std::make_unique<cuda::CudaBackend>());
#endif
#if TESSERA_HAVE_BLAS
  runtime->add_backend(std::make_unique<blas::BlasBackend>());
#endif
  runtime->add_backend(std::make_unique<cpu::CpuBackend>());
  if (load_modules) runtime->load_default_modules();
  return runtime;
}

}  // namespace tessera
