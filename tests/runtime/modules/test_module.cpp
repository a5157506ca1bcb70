// Backend modules for the loader tests, one per kind, chosen at compile time
// by TESSERA_TEST_MODULE_KIND: good, bad_version, throws, no_entry.
#include <memory>
#include <string_view>

#include "backends/cpu/cpu_backend.h"
#include "tessera/core/error.h"
#include "tessera/runtime/runtime.h"

namespace {

constexpr std::string_view kKind = TESSERA_TEST_MODULE_KIND;

// A CPU backend under its own name, so it can sit beside the built-in CPU.
class TestBackend final : public tessera::Backend {
 public:
  std::string_view name() const override { return "TESTMOD"; }
  size_t device_count() const override { return 1; }

 protected:
  tessera::Device& device_at(size_t) override { return cpu_.device(0); }

 private:
  tessera::cpu::CpuBackend cpu_{1};
};

[[maybe_unused]] std::unique_ptr<tessera::Backend> create() {
  if (kKind == "throws") {
    tessera::fail(tessera::ErrorCategory::kDevice, "[TESTMOD] no device answered");
  }
  return std::make_unique<TestBackend>();
}

}  // namespace

#if !TESSERA_TEST_MODULE_NO_ENTRY
extern "C" __attribute__((visibility("default"))) const tessera::ModuleEntry*
tessera_backend_module() {
  static const tessera::ModuleEntry entry{
      kKind == "bad_version" ? tessera::kBackendInterfaceVersion + 1
                             : tessera::kBackendInterfaceVersion,
      "TESTMOD", create};
  return &entry;
}
#endif
