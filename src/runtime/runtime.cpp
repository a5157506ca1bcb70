#include "tessera/runtime/runtime.h"

#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <system_error>

#include "tessera/core/error.h"

namespace tessera {
namespace {

bool iequals(std::string_view a, std::string_view b) {
  return a.size() == b.size() &&
         std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) ==
                  std::tolower(static_cast<unsigned char>(y));
         });
}

std::filesystem::path executable_dir() {
  std::error_code ec;
  const auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::filesystem::path() : exe.parent_path();
}

}  // namespace

// A dlopen handle, closed when the last backend it made is gone.
struct Runtime::LoadedModule {
  void* handle = nullptr;
  explicit LoadedModule(void* h) : handle(h) {}
  ~LoadedModule() {
    if (handle != nullptr) dlclose(handle);
  }
  LoadedModule(const LoadedModule&) = delete;
  LoadedModule& operator=(const LoadedModule&) = delete;
};

Runtime::Runtime() = default;

Runtime::~Runtime() {
  backends_.clear();  // before the modules whose code they run
  loaded_.clear();
}

Backend& Runtime::add_backend(std::unique_ptr<Backend> backend) {
  TESSERA_CHECK(backend != nullptr);
  if (find_backend(backend->name()) != nullptr) {
    fail(ErrorCategory::kInvalidArgument, "[runtime] backend {} is already registered",
         backend->name());
  }
  backends_.push_back(std::move(backend));
  return *backends_.back();
}

const ModuleReport& Runtime::load_module(const std::filesystem::path& path) {
  ModuleReport& report = modules_.emplace_back();
  report.path = path;
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* err = dlerror();
    report.reason = fmt::format("cannot open: {}", err ? err : "unknown dlopen error");
    return report;
  }
  auto module = std::make_unique<LoadedModule>(handle);
  using EntryFn = const ModuleEntry* (*)();
  auto entry_fn = reinterpret_cast<EntryFn>(dlsym(handle, kModuleEntryPoint));
  if (entry_fn == nullptr) {
    report.reason = fmt::format("no entry point '{}'", kModuleEntryPoint);
    return report;
  }
  const ModuleEntry* entry = entry_fn();
  if (entry == nullptr || entry->create == nullptr) {
    report.reason = "entry point returned no module description";
    return report;
  }
  if (entry->interface_version != kBackendInterfaceVersion) {
    report.reason = fmt::format("interface version {}, this build needs {}",
                                entry->interface_version, kBackendInterfaceVersion);
    return report;
  }
  std::unique_ptr<Backend> backend;
  try {
    backend = entry->create();
  } catch (const std::exception& e) {
    report.reason = fmt::format("failed while starting: {}", e.what());
    return report;
  } catch (...) {
    report.reason = "failed while starting: unknown exception";
    return report;
  }
  if (backend == nullptr) {
    report.reason = "failed while starting: no backend returned";
    return report;
  }
  if (find_backend(backend->name()) != nullptr) {
    report.reason = fmt::format("a backend named {} is already registered", backend->name());
    backend.reset();  // its code lives in the module: drop it before dlclose
    return report;
  }
  backends_.push_back(std::move(backend));
  loaded_.push_back(std::move(module));
  report.loaded = true;
  return report;
}

void Runtime::load_modules_from(const std::filesystem::path& dir) {
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) return;
  std::vector<std::filesystem::path> found;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const std::string file = entry.path().filename().string();
    if (file.starts_with("libtessera-backend-") && file.ends_with(".so")) {
      found.push_back(entry.path());
    }
  }
  std::sort(found.begin(), found.end());  // a stable order across runs
  for (const auto& path : found) load_module(path);
}

void Runtime::load_default_modules() {
  const auto exe_dir = executable_dir();
  if (!exe_dir.empty()) load_modules_from(exe_dir);
  if (const char* env = std::getenv("TESSERA_BACKEND_PATH")) {
    std::string_view rest = env;
    while (!rest.empty()) {
      const size_t colon = rest.find(':');
      const std::string_view dir = rest.substr(0, colon);
      if (!dir.empty()) load_modules_from(std::filesystem::path(std::string(dir)));
      if (colon == std::string_view::npos) break;
      rest.remove_prefix(colon + 1);
    }
  }
}

Backend* Runtime::find_backend(std::string_view name) const {
  for (const auto& b : backends_) {
    if (iequals(b->name(), name)) return b.get();
  }
  return nullptr;
}

std::vector<Device*> Runtime::devices() const {
  std::vector<Device*> out;
  for (bool cpu : {false, true}) {
    for (const auto& b : backends_) {
      for (size_t i = 0; i < b->device_count(); ++i) {
        Device& d = b->device(i);
        if ((d.type() == DeviceType::kCpu) == cpu) out.push_back(&d);
      }
    }
  }
  return out;
}

Device* Runtime::find_device(std::string_view name) const {
  for (Device* d : devices()) {
    if (iequals(d->name(), name)) return d;
  }
  return nullptr;
}

Device& Runtime::device(std::string_view name) const {
  if (Device* d = find_device(name)) return *d;
  std::string names;
  for (Device* d : devices()) names += fmt::format("{}{}", names.empty() ? "" : ", ", d->name());
  fail(ErrorCategory::kInvalidArgument, "[runtime] no device named '{}'; devices: {}", name,
       names.empty() ? "none" : names);
}

}  // namespace tessera
