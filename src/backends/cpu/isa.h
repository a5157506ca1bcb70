// Instruction-set tiers of the CPU backend. Every tier's kernels are built in
// per-ISA source files with their own flags; a CPU device runs one tier,
// chosen at start from the CPU's features (TESSERA_CPU_ISA=ref|avx2|avx512
// overrides it), so tests can run every tier this machine supports.
#pragma once

#include <optional>
#include <string_view>
#include <vector>

namespace tessera::cpu {

enum class Isa { kRef, kAvx2, kAvx512 };

std::string_view isa_name(Isa isa);  // "ref", "avx2", "avx512"
std::optional<Isa> isa_from_name(std::string_view name);
// Tiers this CPU can run, "ref" first.
std::vector<Isa> supported_isas();
// The best supported tier, or TESSERA_CPU_ISA (an Error if unknown or unsupported).
Isa default_isa();
// AVX-VNNI (ymm vpdpbusd): no tier's kernels use it yet; the ceiling probes report it.
bool has_avx_vnni();

}  // namespace tessera::cpu
