// `tessera devices [--json]`: every backend and device of this build, and
// every backend module tried, loaded or refused (and why).
#include <cstdio>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "tessera/backends/builtin.h"
#include "tessera/runtime/buffer.h"
#include "tessera/runtime/runtime.h"

namespace tessera::cli {
namespace {

using nlohmann::json;

json caps_json(const DeviceCaps& c) {
  return {{"async", c.async},
          {"host_buffer", c.host_buffer},
          {"buffer_from_host_ptr", c.buffer_from_host_ptr},
          {"events", c.events}};
}

json buffer_type_json(const BufferType& t) {
  return {{"name", std::string(t.name())}, {"alignment", t.alignment()}, {"is_host", t.is_host()}};
}

json runtime_json(const Runtime& rt) {
  json backends = json::array();
  for (const auto& b : rt.backends()) {
    json devices = json::array();
    for (size_t i = 0; i < b->device_count(); ++i) {
      Device& d = b->device(i);
      const MemoryInfo mem = d.memory();
      json dev = {{"name", std::string(d.name())},
                  {"description", std::string(d.description())},
                  {"type", std::string(device_type_name(d.type()))},
                  {"memory_free", mem.free},
                  {"memory_total", mem.total},
                  {"caps", caps_json(d.caps())},
                  {"buffer_type", buffer_type_json(d.buffer_type())},
                  {"notes", d.notes()}};
      if (&d.weights_buffer_type() != &d.buffer_type()) {
        dev["weights_buffer_type"] = buffer_type_json(d.weights_buffer_type());
      }
      if (const BufferType* host = d.host_buffer_type()) {
        dev["host_buffer_type"] = buffer_type_json(*host);
      }
      devices.push_back(std::move(dev));
    }
    json backend = {{"name", std::string(b->name())}, {"devices", std::move(devices)}};
    if (const std::string why = no_devices_reason(*b); !why.empty()) backend["no_devices"] = why;
    backends.push_back(std::move(backend));
  }
  json modules = json::array();
  for (const ModuleReport& m : rt.modules()) {
    modules.push_back({{"path", m.path.string()}, {"loaded", m.loaded}, {"reason", m.reason}});
  }
  return {{"backends", std::move(backends)}, {"modules", std::move(modules)}};
}

std::string gib(size_t bytes) { return fmt::format("{:.1f} GiB", bytes / (1024.0 * 1024 * 1024)); }

void print_text(const Runtime& rt) {
  for (const auto& b : rt.backends()) {
    const std::string why = b->device_count() == 0 ? no_devices_reason(*b) : "";
    fmt::print("backend {}{}\n", b->name(), why.empty() ? "" : fmt::format("  (no devices: {})", why));
    for (size_t i = 0; i < b->device_count(); ++i) {
      Device& d = b->device(i);
      const MemoryInfo mem = d.memory();
      const DeviceCaps c = d.caps();
      fmt::print("  {}  {}  {}\n", d.name(), device_type_name(d.type()), d.description());
      fmt::print("    memory  {} free of {}\n", gib(mem.free), gib(mem.total));
      for (const std::string& note : d.notes()) fmt::print("    note    {}\n", note);
      fmt::print("    caps    async={} host_buffer={} buffer_from_host_ptr={} events={}\n",
                 c.async, c.host_buffer, c.buffer_from_host_ptr, c.events);
      fmt::print("    buffers {} (alignment {}, {})", d.buffer_type().name(),
                 d.buffer_type().alignment(), d.buffer_type().is_host() ? "host" : "device");
      if (&d.weights_buffer_type() != &d.buffer_type()) {
        fmt::print(", weights {}", d.weights_buffer_type().name());
      }
      if (const BufferType* host = d.host_buffer_type()) fmt::print(", pinned {}", host->name());
      fmt::print("\n");
    }
  }
  if (rt.modules().empty()) {
    fmt::print("modules: none found (searched the executable's folder and TESSERA_BACKEND_PATH)\n");
  }
  for (const ModuleReport& m : rt.modules()) {
    fmt::print("module {}: {}\n", m.path.string(), m.loaded ? "loaded" : "refused: " + m.reason);
  }
}

}  // namespace

Runner add_devices(CLI::App& app) {
  auto as_json = std::make_shared<bool>(false);
  CLI::App* cmd = app.add_subcommand(
      "devices", "List backends, devices, their memory and capabilities, and backend modules");
  cmd->add_flag("--json", *as_json, "Print one JSON object instead of text");
  return [as_json]() {
    const auto rt = make_runtime(/*load_modules=*/true);
    if (*as_json) {
      fmt::print("{}\n", runtime_json(*rt).dump(2));
    } else {
      print_text(*rt);
    }
    return 0;
  };
}

}  // namespace tessera::cli
