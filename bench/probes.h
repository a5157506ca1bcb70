// Roofline probes for the CPU benchmarks (kernels.md §2.7 M0): memory read
// bandwidth and per-core peaks of zmm FMA and vpdpbusd. Built with AVX-512
// flags (probes_avx512.cpp); call only where the CPU has them.
#pragma once

#include <cstddef>
#include <cstdint>

namespace tessera::bench {

// Reads every byte of [p, p + bytes) (bytes a multiple of 256) with zmm loads.
uint64_t read_bytes_avx512(const uint8_t* p, size_t bytes);
// 16 independent chains of zmm FMAs, `iters` rounds: 16 * 16 * 2 FLOP per round.
float fma_chains_avx512(int64_t iters);
// 16 independent chains of zmm vpdpbusd, `iters` rounds: 16 * 64 MAC per round.
int32_t dpbusd_chains_avx512(int64_t iters);

inline constexpr int kProbeChains = 16;

}  // namespace tessera::bench
