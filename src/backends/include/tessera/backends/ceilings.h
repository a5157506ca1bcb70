// Roofline ceilings of a device, measured on the spot: the memory read
// bandwidth and the arithmetic peaks of the instructions its kernels use.
// Benchmarks report their figures as fractions of these, taken in the same
// run, because the machines they run on are shared and vary.
//
// A backend that can measure them answers proc_address(kMeasureCeilingsProc)
// with a MeasureCeilingsFn.
#pragma once

#include <string>

namespace tessera {

class Device;

struct Ceilings {
  std::string tier;  // the kernel tier the probes ran for ("avx2", "avx512", ...)
  int threads = 0;
  double read_gbs = 0;    // memory read bandwidth, GB/s, plain vector loads over 256 MiB
  double fma_gflops = 0;  // f32 FMA peak with the tier's widest vectors (2 FLOP per lane)
  // int8 multiply-add peak with the instruction sequence the tier's quantized
  // kernels use (2 ops per multiply-add); int8_how names it.
  double int8_gops = 0;
  std::string int8_how;
  // Other peaks of this CPU, 0 where it lacks them: AVX-VNNI's ymm vpdpbusd
  // and AVX-512 BF16's vdpbf16ps (2 FLOP per multiply-add).
  double avx_vnni_gops = 0;
  double bf16_gflops = 0;
};

using MeasureCeilingsFn = Ceilings (*)(Device& device, int threads);
inline constexpr const char* kMeasureCeilingsProc = "measure_ceilings";

}  // namespace tessera
