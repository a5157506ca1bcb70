#include "cpu/isa.h"

#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "tessera/core/error.h"

namespace tessera::cpu {
namespace {

struct Features {
  bool avx2 = false, fma = false, f16c = false;
  bool avx512f = false, avx512bw = false, avx512vl = false, avx512vnni = false, avx512bf16 = false;
  bool gfni = false;      // vgf2p8affineqb: bit moves inside bytes (the K-quant kernels)
  bool avx_vnni = false;  // VEX-encoded vpdpbusd on ymm (Alder Lake, Zen 5)
  bool amx_int8 = false;  // AMX-TILE + AMX-INT8, tile state enabled by the OS
};

// Linux lends a process the AMX tile data state only on request
// (arch_prctl ARCH_REQ_XCOMP_PERM for XFEATURE_XTILEDATA, Linux 5.16+); a
// tile instruction without it faults. Asked once; false where refused.
bool amx_permitted() {
#if defined(__linux__) && defined(__x86_64__)
  static const bool ok = [] {
    constexpr long kArchReqXcompPerm = 0x1023;
    constexpr long kXfeatureXtiledata = 18;
    return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
  }();
  return ok;
#else
  return false;
#endif
}

// Reads CPUID leaves 1 and 7, and checks the OS saves the wide registers (XCR0).
Features detect() {
  Features f;
#if defined(__x86_64__)
  unsigned a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return f;
  const bool osxsave = (c >> 27) & 1;
  f.fma = (c >> 12) & 1;
  f.f16c = (c >> 29) & 1;
  if (!osxsave) return f;
  unsigned xcr0_lo, xcr0_hi;
  __asm__("xgetbv" : "=a"(xcr0_lo), "=d"(xcr0_hi) : "c"(0));
  const bool ymm = (xcr0_lo & 0x6) == 0x6;
  const bool zmm = ymm && (xcr0_lo & 0xe0) == 0xe0;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return f;
  f.avx2 = ymm && ((b >> 5) & 1);
  f.avx512f = zmm && ((b >> 16) & 1);
  f.avx512bw = zmm && ((b >> 30) & 1);
  f.avx512vl = zmm && ((b >> 31) & 1);
  f.avx512vnni = zmm && ((c >> 11) & 1);
  f.gfni = (c >> 8) & 1;
  // XCR0 bits 17 (XTILECFG) and 18 (XTILEDATA): the OS saves tile state.
  const bool tiles = zmm && ((xcr0_lo >> 17) & 3) == 3;
  f.amx_int8 = tiles && ((d >> 24) & 1) && ((d >> 25) & 1);
  unsigned a1, b1, c1, d1;
  if (__get_cpuid_count(7, 1, &a1, &b1, &c1, &d1)) {
    f.avx512bf16 = zmm && ((a1 >> 5) & 1);
    f.avx_vnni = ymm && ((a1 >> 4) & 1);
  }
#endif
  return f;
}

bool supported(Isa isa, const Features& f) {
  switch (isa) {
    case Isa::kRef:
      return true;
    case Isa::kAvx2:
      return f.avx2 && f.fma && f.f16c;
    case Isa::kAvx512:
      // GFNI: every AVX-512 BF16 part but Cooper Lake has it (Cooper Lake takes avx2).
      return f.avx2 && f.fma && f.f16c && f.avx512f && f.avx512bw && f.avx512vl && f.avx512vnni &&
             f.avx512bf16 && f.gfni;
    case Isa::kAmx:
      return supported(Isa::kAvx512, f) && f.amx_int8 && amx_permitted();
  }
  return false;
}

}  // namespace

bool has_avx_vnni() {
  static const bool has = detect().avx_vnni;
  return has;
}

std::string_view isa_name(Isa isa) {
  switch (isa) {
    case Isa::kRef:
      return "ref";
    case Isa::kAvx2:
      return "avx2";
    case Isa::kAvx512:
      return "avx512";
    case Isa::kAmx:
      return "amx";
  }
  return "?";
}

std::optional<Isa> isa_from_name(std::string_view name) {
  for (Isa isa : kAllIsas) {
    if (isa_name(isa) == name) return isa;
  }
  return std::nullopt;
}

std::vector<Isa> supported_isas() {
  const Features f = detect();
  std::vector<Isa> out;
  for (Isa isa : kAllIsas) {
    if (supported(isa, f)) out.push_back(isa);
  }
  return out;
}

Isa default_isa() {
  const std::vector<Isa> tiers = supported_isas();
  if (const char* env = std::getenv("TESSERA_CPU_ISA")) {
    const std::optional<Isa> wanted = isa_from_name(env);
    if (!wanted) {
      fail(ErrorCategory::kInvalidArgument,
           "[TESSERA_CPU_ISA] found '{}', expected ref, avx2, avx512 or amx", env);
    }
    for (Isa t : tiers) {
      if (t == *wanted) return t;
    }
    fail(ErrorCategory::kUnsupported, "[TESSERA_CPU_ISA] this CPU cannot run the {} tier", env);
  }
  return tiers.back();
}

}  // namespace tessera::cpu
