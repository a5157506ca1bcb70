// Loops that measure a CPU's ceilings (ceilings.cpp times them), one set per
// tier, built with that tier's flags. Each returns a value folded from its
// registers so the compiler keeps the work. Call a tier's probes only where
// the CPU runs the tier (avx_vnni only where has_avx_vnni()).
#pragma once

#include <cstddef>
#include <cstdint>

namespace tessera::cpu::probes {

// Independent accumulator chains per probe: enough to cover the latency of
// FMA / dot instructions (4-5 cycles) on two pipes.
inline constexpr int kChains = 12;

namespace avx2 {
uint64_t read_bytes(const uint8_t* p, size_t bytes);  // bytes a multiple of 128, p 32-aligned
float fma(int64_t rounds);        // kChains ymm FMAs a round: 8 lanes x 2 FLOP each
int32_t maddubs(int64_t rounds);  // kChains vpmaddubsw + vpmaddwd + vpaddd: 32 MACs each
int32_t avx_vnni(int64_t rounds);  // kChains ymm vpdpbusd (AVX-VNNI): 32 MACs each
}  // namespace avx2

namespace avx512 {
uint64_t read_bytes(const uint8_t* p, size_t bytes);  // bytes a multiple of 256, p 64-aligned
float fma(int64_t rounds);       // kChains zmm FMAs a round: 16 lanes x 2 FLOP each
int32_t dpbusd(int64_t rounds);  // kChains zmm vpdpbusd: 64 MACs each
float dpbf16(int64_t rounds);    // kChains zmm vdpbf16ps: 32 MACs each
}  // namespace avx512

namespace amx {
// `rounds` tdpbssd (16 x 16 x 64 MACs each, ~16 cycles), spread over
// kAmxChains independent C tiles. Configures the tiles itself and releases them.
inline constexpr int kAmxChains = 6;
int32_t tdpbssd(int64_t rounds);
}  // namespace amx

}  // namespace tessera::cpu::probes
