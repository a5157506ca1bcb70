// Runtime: owns the backends of one program (no process-wide registry: a
// program may make two). Backends come from code compiled in, added with
// add_backend, or from shared modules loaded at run time through one
// exported entry point.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/runtime/device.h"

namespace tessera {

// Bumped whenever Backend, Device, Stream, BufferType, Buffer, Event or
// Tensor change in a way a compiled module would notice.
inline constexpr uint32_t kBackendInterfaceVersion = 1;

// What a backend module exports, as `extern "C" const ModuleEntry*
// tessera_backend_module()`. `create` may throw; the module is then refused.
struct ModuleEntry {
  uint32_t interface_version;
  const char* name;
  std::unique_ptr<Backend> (*create)();
};
inline constexpr const char* kModuleEntryPoint = "tessera_backend_module";

struct ModuleReport {
  std::filesystem::path path;
  bool loaded = false;
  std::string reason;  // why refused, or "" when loaded
};

class Runtime {
 public:
  Runtime();
  ~Runtime();
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  // Takes ownership. Throws Error(kInvalidArgument) if a backend of the same
  // name (case-insensitive) is already present.
  Backend& add_backend(std::unique_ptr<Backend> backend);

  // Loads one module. Never throws for a bad module: the report says why it
  // was refused, and the runtime carries on without it.
  const ModuleReport& load_module(const std::filesystem::path& path);
  // Loads every `libtessera-backend-*.so` in `dir` (missing dir: nothing).
  void load_modules_from(const std::filesystem::path& dir);
  // The executable's folder, then each folder of TESSERA_BACKEND_PATH (':'-separated).
  void load_default_modules();

  std::span<const std::unique_ptr<Backend>> backends() const { return backends_; }
  std::span<const ModuleReport> modules() const { return modules_; }

  // Case-insensitive; nullptr when absent.
  Backend* find_backend(std::string_view name) const;
  // Every device: GPUs and accelerators first, CPUs last (the scheduler's
  // priority order); in each group, in backend order.
  std::vector<Device*> devices() const;
  // By name ("CPU0", case-insensitive). Throws Error(kInvalidArgument) naming
  // the devices there are.
  Device& device(std::string_view name) const;
  // The same lookup; nullptr when absent.
  Device* find_device(std::string_view name) const;

 private:
  struct LoadedModule;
  // Modules outlive the backends they created: destroyed after backends_.
  std::vector<std::unique_ptr<LoadedModule>> loaded_;
  std::vector<std::unique_ptr<Backend>> backends_;
  std::vector<ModuleReport> modules_;
};

}  // namespace tessera
