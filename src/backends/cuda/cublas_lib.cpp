#include "cuda/cublas_lib.h"

#include <dlfcn.h>

#include <string>

#include "tessera/core/error.h"

namespace tessera::cuda {
namespace {

// cuBLAS's soname for the toolkit this backend is built with.
#define TESSERA_STR2(x) #x
#define TESSERA_STR(x) TESSERA_STR2(x)
constexpr const char* kCublasLibrary = "libcublas.so." TESSERA_STR(CUBLAS_VER_MAJOR);

template <class F>
void bind(void* lib, const char* name, F& fn) {
  fn = reinterpret_cast<F>(dlsym(lib, name));
  if (fn == nullptr) {
    fail(ErrorCategory::kUnsupported, "[cuBLAS] {} has no {}: {}", kCublasLibrary, name,
         dlerror());
  }
}

Cublas load() {
  // Never closed: handles created from it live until the process ends.
  void* lib = dlopen(kCublasLibrary, RTLD_NOW | RTLD_LOCAL);
  std::string first_error = lib == nullptr ? dlerror() : "";
#ifdef TESSERA_CUBLAS_DIR
  // Where the toolkit this was built with keeps it, when the loader's path lacks it.
  if (lib == nullptr) {
    lib = dlopen((std::string(TESSERA_CUBLAS_DIR) + "/" + kCublasLibrary).c_str(),
                 RTLD_NOW | RTLD_LOCAL);
  }
#endif
  if (lib == nullptr) {
    fail(ErrorCategory::kUnsupported,
         "[cuBLAS] cannot open {} ({}); install the CUDA toolkit's cuBLAS or add its folder to "
         "LD_LIBRARY_PATH",
         kCublasLibrary, first_error);
  }
  Cublas c;
  bind(lib, "cublasCreate_v2", c.create);
  bind(lib, "cublasDestroy_v2", c.destroy);
  bind(lib, "cublasSetStream_v2", c.set_stream);
  bind(lib, "cublasSetWorkspace_v2", c.set_workspace);
  bind(lib, "cublasSetMathMode", c.set_math_mode);
  bind(lib, "cublasGemmEx", c.gemm_ex);
  bind(lib, "cublasGetStatusString", c.status_string);
  return c;
}

}  // namespace

const Cublas& cublas() {
  // A throwing initializer leaves the static to be tried again on the next
  // call (std::call_once would not: libstdc++'s hangs the next caller).
  static const Cublas loaded = load();
  return loaded;
}

void check_cublas(cublasStatus_t status, int device, const char* what) {
  if (status == CUBLAS_STATUS_SUCCESS) return;
  const char* msg = cublas().status_string ? cublas().status_string(status) : "?";
  fail(ErrorCategory::kDevice, "[CUDA{}] {}: {} (cublasStatus {})", device, what, msg,
       static_cast<int>(status));
}

}  // namespace tessera::cuda
