#include "tessera/runtime/device.h"

#include <cstdlib>
#include <string>

#include "tessera/core/error.h"
#include "tessera/runtime/stream.h"

namespace tessera {

std::string_view device_type_name(DeviceType type) {
  switch (type) {
    case DeviceType::kCpu: return "CPU";
    case DeviceType::kGpu: return "GPU";
    case DeviceType::kAccelerator: return "ACCEL";
  }
  return "?";
}

std::string no_devices_reason(Backend& backend) {
  void* fn = backend.proc_address(kNoDevicesReasonProc);
  if (fn == nullptr) return {};
  const char* why = reinterpret_cast<NoDevicesReasonFn>(fn)(backend);
  return why != nullptr ? why : "";
}

int64_t offload_min_batch() {
  if (const char* env = std::getenv("TESSERA_OFFLOAD_MIN_BATCH")) {
    char* end = nullptr;
    const long long v = std::strtoll(env, &end, 10);
    if (end != env && *end == '\0' && v >= 0) return v;
    fail(ErrorCategory::kInvalidArgument,
         "[TESSERA_OFFLOAD_MIN_BATCH] found '{}', expected a whole number >= 0", env);
  }
  return 32;
}

bool Device::offload_op(const Tensor& node) const {
  if (node.op == Op::kGetRows) return false;
  // ne[1] of the result is the batch: tokens for matmul, rows for the rest;
  // MUL_MAT_ID's tokens are its ne[2] (ne[1] the experts each picks).
  return (node.op == Op::kMulMatId ? node.ne[2] : node.ne[1]) >= offload_min_batch();
}

std::unique_ptr<Event> Device::make_event() {
  fail(ErrorCategory::kUnsupported, "[device {}] has no events", name());
}

Device& Backend::device(size_t i) {
  if (i >= device_count()) {
    fail(ErrorCategory::kInvalidArgument, "[backend {}] device {} asked, it has {}", name(), i,
         device_count());
  }
  return device_at(i);
}

}  // namespace tessera
