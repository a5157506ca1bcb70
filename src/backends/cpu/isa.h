// Instruction-set tiers of the CPU backend. Every tier's kernels are built in
// per-ISA source files with their own flags; a CPU device runs one tier,
// chosen at start from the CPU's features (TESSERA_CPU_ISA=ref|avx2|avx512|amx
// overrides it), so tests can run every tier this machine supports.
#pragma once

#include <optional>
#include <string_view>
#include <vector>

namespace tessera::cpu {

// kAmx is the avx512 tier with its Q4_0 / Q8_0 / Q4_K / Q6_K GEMMs on AMX-INT8 tiles.
enum class Isa { kRef, kAvx2, kAvx512, kAmx };
inline constexpr Isa kAllIsas[] = {Isa::kRef, Isa::kAvx2, Isa::kAvx512, Isa::kAmx};

std::string_view isa_name(Isa isa);  // "ref", "avx2", "avx512", "amx"
std::optional<Isa> isa_from_name(std::string_view name);
// Tiers this CPU can run, "ref" first.
std::vector<Isa> supported_isas();
// The best supported tier, or TESSERA_CPU_ISA (an Error if unknown or unsupported).
Isa default_isa();
// AVX-VNNI (ymm vpdpbusd): no tier's kernels use it yet; the ceiling probes report it.
bool has_avx_vnni();

}  // namespace tessera::cpu
