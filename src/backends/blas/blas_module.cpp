// The BLAS backend as a loadable module (TESSERA_BACKEND_MODULES=ON).
#include "blas/blas_backend.h"
#include "tessera/runtime/runtime.h"

extern "C" __attribute__((visibility("default"))) const tessera::ModuleEntry*
tessera_backend_module() {
  static const tessera::ModuleEntry entry{
      tessera::kBackendInterfaceVersion, "BLAS",
      []() -> std::unique_ptr<tessera::Backend> {
        return std::make_unique<tessera::blas::BlasBackend>();
      }};
  return &entry;
}
