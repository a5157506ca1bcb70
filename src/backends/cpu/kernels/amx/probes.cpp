// amx tier's ceiling probe (kernels/probes.h): the avx512 tier's probes plus
// this one for the int8 peak the amx GEMMs run on.
#include "cpu/kernels/avx512/intrin.h"

#include <cstdint>
#include <cstring>

#include "cpu/kernels/probes.h"

namespace tessera::cpu::probes::amx {

int32_t tdpbssd(int64_t rounds) {
  static_assert(kAmxChains == 6);
  alignas(64) uint8_t config[64] = {};
  config[0] = 1;  // palette 1: 8 tiles of up to 16 rows x 64 bytes
  for (int t = 0; t < 8; ++t) {
    const uint16_t colsb = 64;
    std::memcpy(config + 16 + 2 * t, &colsb, sizeof colsb);
    config[48 + t] = 16;
  }
  __asm__ volatile("" : : "m"(config) : "memory");  // see amx/panel.cpp's configure()
  _tile_loadconfig(config);
  alignas(64) int8_t a[16 * 64], b[16 * 64];
  for (int i = 0; i < 16 * 64; ++i) {
    a[i] = static_cast<int8_t>(i % 7 - 3);
    b[i] = static_cast<int8_t>(i % 5 - 2);
  }
  _tile_loadd(6, a, 64);
  _tile_loadd(7, b, 64);
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  _tile_zero(4);
  _tile_zero(5);
  int64_t i = 0;
  for (; i + kAmxChains <= rounds; i += kAmxChains) {
    _tile_dpbssd(0, 6, 7);
    _tile_dpbssd(1, 6, 7);
    _tile_dpbssd(2, 6, 7);
    _tile_dpbssd(3, 6, 7);
    _tile_dpbssd(4, 6, 7);
    _tile_dpbssd(5, 6, 7);
  }
  for (; i < rounds; ++i) _tile_dpbssd(0, 6, 7);
  alignas(64) int32_t c[16 * 16];
  _tile_stored(0, c, 64);
  int32_t s = c[0];
  _tile_stored(5, c, 64);
  s ^= c[255];
  _tile_release();
  return s;
}

}  // namespace tessera::cpu::probes::amx
