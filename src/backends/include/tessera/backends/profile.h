// Per-op timing of a device's graph computations, for benchmarks (tessera
// bench --profile): while a sink is set, every node the device computes adds
// its wall time, its threads' busy times and, for weight matmuls, the weight
// bytes it read to the sink's row for its op class. A backend that can time
// its ops answers proc_address(kOpProfileProc) with a SetOpProfileFn.
#pragma once

#include <cstdint>
#include <map>
#include <string>

namespace tessera {

class Device;

struct OpProfileRow {
  int64_t calls = 0;
  double seconds = 0;         // dispatch to the last thread done
  double busy_max_seconds = 0;   // the slowest thread's time in the op, summed over calls
  double busy_mean_seconds = 0;  // the threads' mean time in the op, summed over calls
  double weight_bytes = 0;    // weight bytes read (MUL_MAT: the whole matrix; MUL_MAT_ID: the
                              // experts the ids picked, each once)
};

struct OpProfile {
  // Per op class: the op's name, with the weight type for matmuls
  // ("MUL_MAT q6_k", "MUL_MAT_ID q4_k", "RMS_NORM", ...).
  std::map<std::string, OpProfileRow> ops;
  int64_t graphs = 0;           // compute calls
  double compute_seconds = 0;   // wall time inside them (the ops plus what lies between them)
};

// Starts adding to *sink (nullptr: stops). The device must outlive neither.
using SetOpProfileFn = void (*)(Device& device, OpProfile* sink);
inline constexpr const char* kOpProfileProc = "op_profile";

}  // namespace tessera
