// amx tier: Q2_K / Q3_K / Q4_K / Q5_K / Q6_K / IQ4_XS panel GEMMs on AMX-INT8 tiles; GEMV shapes stay on
// the avx512 kernels. Per call, each column tile's Q8_K activations are
// copied into A-tile order (sub-block by sub-block, 16 columns of contiguous
// bytes), and per panel each block's quants are unpacked once into B tiles.
// Two forms:
// - Per sub-block (Q2_K, Q3_K, IQ4_XS): a u8 B tile per sub-block (IQ4_XS: 8
//   of 32 k, 8 rows x 64 bytes; Q2_K / Q3_K: 16 of 16 k, 4 rows x 64 bytes),
//   C[16 columns][16 rows] = A (the columns' bytes of sub-block j) . B_j
//   (tdpbsud), then isum[c] += C[c] * sc_j in the epilogue; four C tiles
//   take four sub-blocks at a time to memory, then each column sums its
//   sub-blocks in one register. (Sub-block by sub-block into 16 column sums,
//   GCC spilled the sums on every add: TinyLlama-shape Q4_K pp512 ran
//   153-157 tok/s that way, 359-376 this way.)
// - Folded (Q4_K, Q5_K, Q6_K): the sub-block scales are multiplied into the
//   B tiles in small digits (KMinFolded, Q6KFolded), so full-K tile products
//   sum whole blocks and a block leaves two or three C tiles.
// Both reproduce the avx512 kernel's integers (x86/kpanels.h) exactly; mins
// / offsets left over are int16 pair dots (vpdpwssd), then one or two FMAs
// per block and column.
#include "cpu/kernels/avx512/intrin.h"

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "cpu/kernels/amx/amx.h"
#include "cpu/kernels/avx512/avx512.h"
#include "cpu/kernels/panel_groups.h"
#include "cpu/kernels/repack.h"
#include "cpu/kernels/x86/iq4.h"

namespace tessera::cpu::amx {
namespace {

constexpr int kTile = 16;  // columns per A/C tile, rows per panel

#define TILE_C0 0
#define TILE_C1 1
#define TILE_C2 2
#define TILE_C3 3
#define TILE_A0 4
#define TILE_A1 5
#define TILE_B0 6
#define TILE_B1 7


// n columns per A and C tile; sub-blocks of kSubK elements.
void configure(int n, int sub_k) {
  TileConfig c;
  const auto set = [&c](int tile, int rows, int colsb) {
    c.rows[tile] = static_cast<uint8_t>(rows);
    c.colsb[tile] = static_cast<uint16_t>(colsb);
  };
  for (int t : {TILE_A0, TILE_A1}) set(t, n, sub_k);
  for (int t : {TILE_C0, TILE_C1, TILE_C2, TILE_C3}) set(t, n, kTile * sizeof(int32_t));
  for (int t : {TILE_B0, TILE_B1}) set(t, sub_k / 4, 64);
  __asm__ volatile("" : : "m"(c) : "memory");  // see panel.cpp's configure()
  _tile_loadconfig(&c);
}

inline __m512i load(const uint8_t* p) {
  return _mm512_loadu_si512(p);
}
inline __m512i byte_u(__m512i v, int j) {
  return _mm512_and_si512(_mm512_srl_epi32(v, _mm_cvtsi32_si128(8 * j)), _mm512_set1_epi32(0xFF));
}
inline int32_t pair16(int32_t a, int32_t b) {
  return static_cast<int32_t>((static_cast<uint32_t>(a) & 0xFFFFu) |
                              (static_cast<uint32_t>(b) << 16));
}

// What one panel block unpacks to (scratch, per panel and call).
template <int kSub, int kPairs>
struct alignas(64) Unpacked {
  __m512i sc[kSub];       // sub-block scales, int32 per row
  __m512i pairs[kPairs];  // IQ4_XS: scales as (s0, s2), (s1, s3), ...; Q2_K / Q3_K: scales or mins
  uint8_t b[kSub][kSub == 8 ? 512 : 256];  // B tiles
};

// Activation pairs of one column's block as Q4_K / Q5_K's mins (and
// IQ4_XS's scales) meet them: the 32-element sums (t0, t2), (t1, t3), (t4, t6),
// (t5, t7) as int16 pairs.
void pairs_32(const block_q8_K& x, int32_t* out) {
  int32_t t[8];
  for (int j = 0; j < 8; ++j) t[j] = x.bsums[2 * j] + x.bsums[2 * j + 1];
  out[0] = pair16(t[0], t[2]);
  out[1] = pair16(t[1], t[3]);
  out[2] = pair16(t[4], t[6]);
  out[3] = pair16(t[5], t[7]);
}

// The 16-element sums as Q2_K / Q3_K's scales and mins meet them.
void pairs_16(const block_q8_K& x, int32_t* out) {
  for (int g = 0; g < 4; ++g) {
    out[2 * g] = pair16(x.bsums[4 * g], x.bsums[4 * g + 2]);
    out[2 * g + 1] = pair16(x.bsums[4 * g + 1], x.bsums[4 * g + 3]);
  }
}


// Q4_K and Q5_K with the sub-block scales folded into the B tiles, so one
// tile product sums all 8 sub-blocks of a block: sc_j (6 bits) = 8 h_j + l_j,
// h_j and l_j in [0, 7], and q h_j, q l_j (<= 31 * 7 = 217) are still u8. Per
// 64 k (two sub-blocks, a full-K tile) two B tiles, q h and q l; C_h and C_l
// take a block's four 64-k chunks, and isum = 8 C_h + C_l = sum_j sc_j D_j,
// the same integer as KMin's (|C| <= 256 * 128 * 217 < 2^23). A block then
// leaves two C tiles for the epilogue instead of eight, and no per-sub-block
// multiply is left there. The mins as KMin's.
template <bool kFifth>
struct KMinFolded {
  static constexpr bool kFolded = true;
  static constexpr int kSub = 4, kSubK = 64, kPairs = 4;  // kSub: 64-k chunks
  static constexpr size_t kScaleBytes = 4, kQuantBytes = kFifth ? 172 : 140;
  static constexpr int qs_group(int p, int t) { return kFifth ? groups::q5k_qs(p, t) : 3 + 8 * p + t; }
  static constexpr bool kDmin = true;
  struct alignas(64) U {
    __m512i pairs[kPairs];
    uint8_t b[2][kSub][1024];  // [h, l][chunk]: B tiles of 16 rows x 64 bytes
  };
  static void unpack(const uint8_t*, const uint8_t* q, U& u) {
    const __m512i s0 = load(q), s1 = load(q + 64), s2 = load(q + 128);
    const __m512i m6 = _mm512_set1_epi32(0x3F3F3F3F), m4 = _mm512_set1_epi32(0x0F0F0F0F);
    const __m512i m30 = _mm512_set1_epi32(0x30303030), m7 = _mm512_set1_epi32(0x07070707);
    const __m512i sc[2] = {
        _mm512_and_si512(s0, m6),
        _mm512_or_si512(_mm512_and_si512(s2, m4),
                        _mm512_and_si512(_mm512_srli_epi32(s0, 2), m30))};
    const __m512i mn[2] = {
        _mm512_and_si512(s1, m6),
        _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(s2, 4), m4),
                        _mm512_and_si512(_mm512_srli_epi32(s1, 2), m30))};
    const __m512i lo16 = _mm512_set1_epi32(0x00FF00FF);
    for (int h = 0; h < 2; ++h) {
      u.pairs[2 * h] = _mm512_and_si512(mn[h], lo16);
      u.pairs[2 * h + 1] = _mm512_and_si512(_mm512_srli_epi32(mn[h], 8), lo16);
    }
    // Sub-block j's two multipliers in both 16-bit halves of each row's lane.
    __m512i mul[2][8];
    for (int j = 0; j < 8; ++j) {
      const __m512i v = byte_u(sc[j / 4], j % 4);
      const __m512i hv = _mm512_srli_epi32(v, 3), lv = _mm512_and_si512(v, m7);
      mul[0][j] = _mm512_or_si512(hv, _mm512_slli_epi32(hv, 16));
      mul[1][j] = _mm512_or_si512(lv, _mm512_slli_epi32(lv, 16));
    }
    // Bytes times a per-lane multiplier (products <= 217: no carry between bytes).
    const __m512i even = _mm512_set1_epi32(0x00FF00FF), odd = _mm512_set1_epi32(0xFF00FF00);
    const auto scaled = [&](__m512i w, __m512i m) {
      return _mm512_or_si512(_mm512_mullo_epi16(_mm512_and_si512(w, even), m),
                             _mm512_mullo_epi16(_mm512_and_si512(w, odd), m));
    };
    const __m512i m10 = _mm512_set1_epi32(0x10101010);
    for (int t = 0; t < 8; ++t) {
      __m512i qh = kFifth ? load(q + 64 * groups::q5k_qh(t)) : _mm512_setzero_si512();
      for (int p = 0; p < 4; ++p) {  // sub-blocks 2p (chunk p, B rows t) and 2p + 1 (rows 8 + t)
        const __m512i v = load(q + 64 * qs_group(p, t));
        __m512i lo = _mm512_and_si512(v, m4);
        __m512i hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
        if constexpr (kFifth) {
          lo = _mm512_or_si512(lo, _mm512_and_si512(_mm512_slli_epi16(qh, 4), m10));
          hi = _mm512_or_si512(hi, _mm512_and_si512(_mm512_slli_epi16(qh, 3), m10));
          qh = _mm512_srli_epi16(qh, 2);
        }
        for (int part = 0; part < 2; ++part) {
          _mm512_store_si512(u.b[part][p] + 64 * t, scaled(lo, mul[part][2 * p]));
          _mm512_store_si512(u.b[part][p] + 64 * (8 + t), scaled(hi, mul[part][2 * p + 1]));
        }
      }
    }
  }
  static void act_pairs(const block_q8_K& x, int32_t* out) { pairs_32(x, out); }
  // acc += d dx isum - dmin dx (pairs . act)
  static __m512 finish(__m512 acc, __m512i isum, __m512i corr, __m512 d, __m512 dmin, float dx) {
    const __m512 vdx = _mm512_set1_ps(dx);
    acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_mul_ps(d, vdx), acc);
    return _mm512_fnmadd_ps(_mm512_cvtepi32_ps(corr), _mm512_mul_ps(dmin, vdx), acc);
  }
};

using Q4KF = KMinFolded<false>;
using Q5KF = KMinFolded<true>;

// Q6_K with its sub-block scales and its -32 folded into the B tiles:
// sc_s = 49 e2 + 7 e1 + e0 with balanced base-7 digits e in [-3, 3] (every
// int8 scale fits: |sc| <= 171), and (q - 32) e in [-96, 96] is still s8.
// Per 64 k (four sub-blocks) three B tiles, one per digit; C_i takes a
// block's four chunks (tdpbssd: both operands signed), and
// 49 C2 + 7 C1 + C0 = sum_s sc_s sum a (q - 32), the integer the per-sub-block
// form's isum - 32 corr gives (|C_i| <= 256 * 127 * 96 < 2^22, the sum < 2^28). No
// correction term is left, and a block leaves three C tiles instead of 16.
struct Q6KFolded {
  static constexpr bool kDigits = true;
  static constexpr int kSub = 4, kSubK = 64, kPairs = 1;  // kSub: 64-k chunks; no pairs
  static constexpr size_t kScaleBytes = 2, kQuantBytes = 208;
  struct alignas(64) U {
    uint8_t b[3][kSub][1024];  // [digit][chunk]: B tiles of 16 rows x 64 bytes
  };
  static void unpack(const uint8_t*, const uint8_t* q, U& u) {
    // Each sub-block's digits, in both 16-bit halves of each row's lane.
    __m512i mul[3][16];
    const __m512 seventh = _mm512_set1_ps(1.0f / 7.0f), half = _mm512_set1_ps(0.5f);
    const __m512i k3 = _mm512_set1_epi32(3), k7 = _mm512_set1_epi32(7);
    const auto div7 = [&](__m512i v) {  // v / 7 for 0 <= v < 2^10: (v + 0.5) / 7 is never within 0.07 of an integer
      return _mm512_cvttps_epi32(_mm512_mul_ps(_mm512_add_ps(_mm512_cvtepi32_ps(v), half), seventh));
    };
    const auto both = [](__m512i e) {
      return _mm512_or_si512(_mm512_and_si512(e, _mm512_set1_epi32(0xFFFF)), _mm512_slli_epi32(e, 16));
    };
    for (int g = 0; g < 4; ++g) {
      const __m512i v = load(q + 64 * groups::q6k_scales(g));
      for (int i = 0; i < 4; ++i) {  // sub-block 4 g + i: byte i of each lane, as int32
        const __m512i sc = _mm512_srai_epi32(_mm512_sll_epi32(v, _mm_cvtsi32_si128(24 - 8 * i)), 24);
        const __m512i w = _mm512_add_epi32(sc, _mm512_set1_epi32(171));  // [43, 298]
        const __m512i w1 = div7(w), w2 = div7(w1);
        mul[0][4 * g + i] = both(_mm512_sub_epi32(_mm512_sub_epi32(w, _mm512_mullo_epi32(w1, k7)), k3));
        mul[1][4 * g + i] = both(_mm512_sub_epi32(_mm512_sub_epi32(w1, _mm512_mullo_epi32(w2, k7)), k3));
        mul[2][4 * g + i] = both(_mm512_sub_epi32(w2, k3));
      }
    }
    // Signed bytes times a per-lane signed multiplier (products in [-96, 96]):
    // the low byte of each 16-bit product is the byte's product.
    const __m512i even = _mm512_set1_epi32(0x00FF00FF), odd = _mm512_set1_epi32(0xFF00FF00);
    const auto scaled = [&](__m512i w, __m512i m) {
      return _mm512_or_si512(
          _mm512_and_si512(_mm512_mullo_epi16(_mm512_and_si512(w, even), m), even),
          _mm512_mullo_epi16(_mm512_and_si512(w, odd), m));
    };
    const __m512i m6 = _mm512_set1_epi32(0x3F3F3F3F), k32 = _mm512_set1_epi32(0x20202020);
    const __m512i m03 = _mm512_set1_epi32(0x03030303), m0c = _mm512_set1_epi32(0x0C0C0C0C);
    const __m512i m30 = _mm512_set1_epi32(0x30303030);
    for (int hh = 0; hh < 2; ++hh) {
      for (int t = 0; t < 8; ++t) {
        // The panels' triples (panel_groups.h): C at qh's place, A and B at the ql groups'.
        const __m512i c = load(q + 64 * groups::q6k_qh(hh, t));
        const __m512i a = load(q + 64 * groups::q6k_ql(hh, 0, t));
        const __m512i b = load(q + 64 * groups::q6k_ql(hh, 1, t));
        const __m512i w[4] = {
            _mm512_and_si512(a, m6),
            _mm512_and_si512(b, m6),
            _mm512_and_si512(c, m6),
            _mm512_or_si512(_mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(a, 6), m03),
                                            _mm512_and_si512(_mm512_srli_epi16(b, 4), m0c)),
                            _mm512_and_si512(_mm512_srli_epi16(c, 2), m30)),
        };
        for (int g = 0; g < 4; ++g) {  // sub-block sb = 8 hh + 2 g + t / 4: chunk sb / 4, B row 4 (sb % 4) + t % 4
          const int sb = 8 * hh + 2 * g + t / 4;
          const __m512i v = _mm512_sub_epi8(w[g], k32);
          for (int e = 0; e < 3; ++e) {
            _mm512_store_si512(u.b[e][sb / 4] + 64 * (4 * (sb % 4) + t % 4), scaled(v, mul[e][sb]));
          }
        }
      }
    }
  }
  static void act_pairs(const block_q8_K&, int32_t* out) { out[0] = 0; }
};

// Q3_K and Q2_K: Q6_K's 16-element sub-blocks, B tiles of q' = the 2 low bits
// | hbit << 2 (Q3_K, in [0, 7]; x = d (sc - 32) (q' - 4)) or of q (Q2_K;
// x = d sc q - dmin m). Per half hh and step t, qs group t (Q2_K: 4 + 8 hh + t,
// Q3_K: groups::q3k_qs(hh, t)) holds crumb g of elements 128 hh + 32 g + 4 t ..:
// sub-block 8 hh + 2 g + t / 4, B row t % 4 (repack.h).
template <bool kQ3>
struct K16Low {
  static constexpr int kSub = 16, kSubK = 16, kPairs = 8;
  static constexpr size_t kScaleBytes = kQ3 ? 2 : 4, kQuantBytes = kQ3 ? 108 : 80;
  static constexpr bool kDmin = !kQ3;
  // A sub-block's C within int16 (Q3_K <= 16 * 7 * 128, Q2_K <= 16 * 3 * 128):
  // sc[p] holds the scales of sub-blocks 4 (p / 2) + p % 2 and that + 2 as
  // int16 pairs, for column_tile's vpdpwssd.
  static constexpr bool kNarrow = true;
  using U = Unpacked<kSub, kPairs>;
  static void unpack(const uint8_t*, const uint8_t* q, U& u) {
    const __m512i m3 = _mm512_set1_epi32(0x03030303), m4 = _mm512_set1_epi32(0x0F0F0F0F);
    if constexpr (kQ3) {  // scales as x86/kpanels.h's Q3KBytes, then - 32 as int8
      const __m512i s0 = load(q + 64 * groups::q3k_scales(0));
      const __m512i s1 = load(q + 64 * groups::q3k_scales(1));
      const __m512i s2 = load(q + 64 * groups::q3k_scales(2));
      const __m512i m30 = _mm512_set1_epi32(0x30303030), k32 = _mm512_set1_epi32(0x20202020);
      const __m512i scv[4] = {
          _mm512_or_si512(_mm512_and_si512(s0, m4),
                          _mm512_and_si512(_mm512_slli_epi16(s2, 4), m30)),
          _mm512_or_si512(_mm512_and_si512(s1, m4),
                          _mm512_and_si512(_mm512_slli_epi16(s2, 2), m30)),
          _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(s0, 4), m4),
                          _mm512_and_si512(s2, m30)),
          _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(s1, 4), m4),
                          _mm512_and_si512(_mm512_srli_epi16(s2, 2), m30))};
      for (int g = 0; g < 4; ++g) {  // the scales as int16 pairs serve both
        const __m512i v = _mm512_sub_epi8(scv[g], k32);
        u.pairs[2 * g] = u.sc[2 * g] = _mm512_srai_epi16(_mm512_slli_epi16(v, 8), 8);
        u.pairs[2 * g + 1] = u.sc[2 * g + 1] = _mm512_srai_epi16(v, 8);
      }
    } else {  // sc low nibbles, m high (as int16 pairs, Q6_K's order)
      const __m512i lo16 = _mm512_set1_epi32(0x000F000F);
      for (int g = 0; g < 4; ++g) {
        const __m512i v = load(q + 64 * g);
        const __m512i sc = _mm512_and_si512(v, m4);
        u.sc[2 * g] = _mm512_and_si512(sc, _mm512_set1_epi32(0x00FF00FF));
        u.sc[2 * g + 1] = _mm512_srli_epi16(sc, 8);
        const __m512i m = _mm512_srli_epi16(v, 4);
        u.pairs[2 * g] = _mm512_and_si512(m, lo16);
        u.pairs[2 * g + 1] = _mm512_and_si512(_mm512_srli_epi16(m, 8), lo16);
      }
    }
    const __m512i m04 = _mm512_set1_epi32(0x04040404);
    for (int hh = 0; hh < 2; ++hh) {
      for (int t = 0; t < 8; ++t) {
        const __m512i qs = load(q + 64 * (kQ3 ? groups::q3k_qs(hh, t) : 4 + 8 * hh + t));
        __m512i w[4] = {_mm512_and_si512(qs, m3),
                        _mm512_and_si512(_mm512_srli_epi16(qs, 2), m3),
                        _mm512_and_si512(_mm512_srli_epi16(qs, 4), m3),
                        _mm512_and_si512(_mm512_srli_epi16(qs, 6), m3)};
        if constexpr (kQ3) {  // hmask bit 4 hh + g to bit 2
          __m512i hm = load(q + 64 * groups::q3k_hmask(t));
          if (hh == 1) hm = _mm512_srli_epi16(hm, 4);
          w[0] = _mm512_or_si512(w[0], _mm512_and_si512(_mm512_slli_epi16(hm, 2), m04));
          w[1] = _mm512_or_si512(w[1], _mm512_and_si512(_mm512_slli_epi16(hm, 1), m04));
          w[2] = _mm512_or_si512(w[2], _mm512_and_si512(hm, m04));
          w[3] = _mm512_or_si512(w[3], _mm512_and_si512(_mm512_srli_epi16(hm, 1), m04));
        }
        for (int g = 0; g < 4; ++g) {
          _mm512_store_si512(u.b[8 * hh + 2 * g + t / 4] + 64 * (t % 4), w[g]);
        }
      }
    }
  }
  static void act_pairs(const block_q8_K& x, int32_t* out) { pairs_16(x, out); }
  // Q3_K: acc += d dx (isum - 4 (pairs . act)); Q2_K: acc += d dx isum - dmin dx (pairs . act)
  static __m512 finish(__m512 acc, __m512i isum, __m512i corr, __m512 d, __m512 dmin, float dx) {
    const __m512 vdx = _mm512_set1_ps(dx);
    if constexpr (kQ3) {
      const __m512i s = _mm512_sub_epi32(isum, _mm512_slli_epi32(corr, 2));
      return _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(d, vdx), acc);
    } else {
      acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_mul_ps(d, vdx), acc);
      return _mm512_fnmadd_ps(_mm512_cvtepi32_ps(corr), _mm512_mul_ps(dmin, vdx), acc);
    }
  }
};

using Q3K = K16Low<true>;
using Q2K = K16Low<false>;

// IQ4_XS: B tiles of the IQ4 levels + 128 (u8 for tdpbsud), sub-block j's
// 32 k as Q4_K's; the +128 comes off as 128 sum_j sc_j B_j, sc_j = ls_j - 32
// as int16 pairs ordered as Q4_K's mins (act_pairs the same).
struct IQ4XS {
  static constexpr int kSub = 8, kSubK = 32, kPairs = 4;
  static constexpr size_t kScaleBytes = 4, kQuantBytes = 132;  // (d, scales_h); scales_l, qs
  static constexpr bool kDmin = false;
  using U = Unpacked<kSub, kPairs>;
  static void unpack(const uint8_t* s, const uint8_t* q, U& u) {
    const __m512i sl = load(q);
    const __m512i sh =
        _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + 32)));
    for (int j = 0; j < 8; ++j) {
      const __m512i lo4 =
          _mm512_and_si512(_mm512_srl_epi32(sl, _mm_cvtsi32_si128(8 * (j / 2) + 4 * (j % 2))),
                           _mm512_set1_epi32(0xF));
      const __m512i hi2 = _mm512_and_si512(
          _mm512_sll_epi32(_mm512_srl_epi32(sh, _mm_cvtsi32_si128(2 * j)), _mm_cvtsi32_si128(4)),
          _mm512_set1_epi32(0x30));
      u.sc[j] = _mm512_sub_epi32(_mm512_or_si512(lo4, hi2), _mm512_set1_epi32(32));
    }
    const __m512i lo16 = _mm512_set1_epi32(0xFFFF);
    for (int p = 0; p < 4; ++p) {  // (sc 4h + i, sc 4h + i + 2), p = 2h + i
      const int a = 4 * (p / 2) + p % 2;
      u.pairs[p] =
          _mm512_or_si512(_mm512_and_si512(u.sc[a], lo16), _mm512_slli_epi32(u.sc[a + 2], 16));
    }
    const __m512i m4 = _mm512_set1_epi32(0x0F0F0F0F);
    const __m512i table = _mm512_broadcast_i32x4(
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(kIq4LevelsU8.data())));
    for (int j = 0; j < 8; ++j) {
      for (int t = 0; t < 4; ++t) {
        const __m512i v = load(q + 64 * (1 + 4 * j + t));
        _mm512_store_si512(u.b[j] + 64 * t, _mm512_shuffle_epi8(table, _mm512_and_si512(v, m4)));
        _mm512_store_si512(
            u.b[j] + 64 * (t + 4),
            _mm512_shuffle_epi8(table, _mm512_and_si512(_mm512_srli_epi16(v, 4), m4)));
      }
    }
  }
  static void act_pairs(const block_q8_K& x, int32_t* out) { pairs_32(x, out); }
  // acc += d dx (isum - 128 (pairs . act))
  static __m512 finish(__m512 acc, __m512i isum, __m512i corr, __m512 d, __m512, float dx) {
    const __m512i s = _mm512_sub_epi32(isum, _mm512_slli_epi32(corr, 7));
    return _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(d, _mm512_set1_ps(dx)), acc);
  }
};

// Whether Fmt's sub-block sums fit int16 and its sc holds int16 scale pairs.
template <class Fmt>
constexpr bool narrow() {
  if constexpr (requires { Fmt::kNarrow; }) {
    return Fmt::kNarrow;
  } else {
    return false;
  }
}

// Sub-block s of block b for one column tile into C tile `C`: A is the
// tile's packed activations (kActBlock bytes a block, sub-block s's 16 rows
// of kSubK bytes contiguous), so a load reads whole cache lines.
#define TILE_SUB_DOT(C, A, B, s)                                              \
  do {                                                                        \
    _tile_loadd(A, xb + static_cast<size_t>(s) * kTile * Fmt::kSubK, Fmt::kSubK); \
    _tile_loadd(B, u.b[s], 64);                                               \
    _tile_zero(C);                                                            \
    _tile_dpbsud(C, A, B);                                                    \
  } while (0)

// A column tile's activation bytes per 256-element block, packed for A tiles.
constexpr size_t kActBlock = kTile * kQKK;

// One panel against one column tile of n columns (xa: its packed
// activations, all blocks): out[j] gets column j's 16 row outputs (masked to
// `keep`). Per block, every sub-block's C goes to memory (four C tiles at a
// time), then each column sums its sub-blocks in one register and finishes
// the block.
template <class Fmt, bool kFull>
void column_tile(const uint8_t* scales, const typename Fmt::U* unpacked, int64_t blocks,
                 const uint8_t* xa, const float* dx, const int32_t* act, int n,
                 float* const* out, __mmask16 keep) {
  alignas(64) int32_t c[Fmt::kSub][kTile * kTile];
  __m512 acc[kTile];
  for (__m512& v : acc) v = _mm512_setzero_ps();
  for (int64_t b = 0; b < blocks; ++b) {
    const typename Fmt::U& u = unpacked[b];
    const uint8_t* xb = xa + static_cast<size_t>(b) * kActBlock;
    for (int s = 0; s < Fmt::kSub; s += 4) {
      TILE_SUB_DOT(TILE_C0, TILE_A0, TILE_B0, s);
      TILE_SUB_DOT(TILE_C1, TILE_A1, TILE_B1, s + 1);
      TILE_SUB_DOT(TILE_C2, TILE_A0, TILE_B0, s + 2);
      TILE_SUB_DOT(TILE_C3, TILE_A1, TILE_B1, s + 3);
      _tile_stored(TILE_C0, c[s], 64);
      _tile_stored(TILE_C1, c[s + 1], 64);
      _tile_stored(TILE_C2, c[s + 2], 64);
      _tile_stored(TILE_C3, c[s + 3], 64);
    }
    const uint8_t* sp = scales + static_cast<size_t>(b) * kTile * Fmt::kScaleBytes;
    const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(sp)));
    const __m512 dmin =
        Fmt::kDmin ? _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(sp + 32)))
                   : d;
    const int32_t* ap = act + b * Fmt::kPairs * kTile;  // [pair][column]
    for (int j = 0; j < kTile; ++j) {
      if (!kFull && j >= n) break;
      __m512i isum = _mm512_setzero_si512();
      if constexpr (narrow<Fmt>()) {  // two sub-blocks' C as one int16 pair vector
        for (int p = 0; p < Fmt::kSub / 2; ++p) {
          const int s = 4 * (p / 2) + p % 2;
          const __m512i ab = _mm512_mask_blend_epi16(
              0xAAAAAAAA, _mm512_load_si512(c[s] + kTile * j),
              _mm512_slli_epi32(_mm512_load_si512(c[s + 2] + kTile * j), 16));
          isum = _mm512_dpwssd_epi32(isum, ab, u.sc[p]);
        }
      } else {
        for (int s = 0; s < Fmt::kSub; ++s) {
          isum = _mm512_add_epi32(
              isum, _mm512_mullo_epi32(_mm512_load_si512(c[s] + kTile * j), u.sc[s]));
        }
      }
      __m512i corr = _mm512_setzero_si512();
      for (int p = 0; p < Fmt::kPairs; ++p) {
        corr = _mm512_dpwssd_epi32(corr, u.pairs[p], _mm512_set1_epi32(ap[p * kTile + j]));
      }
      acc[j] = Fmt::finish(acc[j], isum, corr, d, dmin, dx[b * kTile + j]);
    }
  }
  for (int j = 0; j < n; ++j) _mm512_mask_storeu_ps(out[j], keep, acc[j]);
}

#undef TILE_SUB_DOT

// A folded format's block blk against one column tile: C_h (C_H) and C_l
// (C_L) over the block's four 64-k chunks, stored to ch / cl.
#define TILE_FOLDED_BLOCK(C_H, C_L, blk, ch, cl)                                     \
  do {                                                                               \
    const typename Fmt::U& ub = unpacked[blk];                                       \
    const uint8_t* xb = xa + static_cast<size_t>(blk) * kActBlock;                   \
    _tile_zero(C_H);                                                                 \
    _tile_zero(C_L);                                                                 \
    for (int q = 0; q < Fmt::kSub; ++q) {                                            \
      _tile_loadd(TILE_A0, xb + static_cast<size_t>(q) * kTile * Fmt::kSubK, Fmt::kSubK); \
      _tile_loadd(TILE_B0, ub.b[0][q], 64);                                          \
      _tile_dpbsud(C_H, TILE_A0, TILE_B0);                                           \
      _tile_loadd(TILE_B1, ub.b[1][q], 64);                                          \
      _tile_dpbsud(C_L, TILE_A0, TILE_B1);                                           \
    }                                                                                \
    _tile_stored(C_H, ch, 64);                                                       \
    _tile_stored(C_L, cl, 64);                                                       \
  } while (0)

// column_tile for a folded format (KMinFolded): two blocks at a time in two
// pairs of C tiles, so one block's stores and epilogue overlap the next
// block's products.
template <class Fmt, bool kFull>
void column_tile_folded(const uint8_t* scales, const typename Fmt::U* unpacked, int64_t blocks,
                        const uint8_t* xa, const float* dx, const int32_t* act, int n,
                        float* const* out, __mmask16 keep) {
  alignas(64) int32_t c[4][kTile * kTile];
  __m512 acc[kTile];
  for (__m512& v : acc) v = _mm512_setzero_ps();
  const auto epilogue = [&](int64_t b, const int32_t* ch, const int32_t* cl) {
    const typename Fmt::U& u = unpacked[b];
    const uint8_t* sp = scales + static_cast<size_t>(b) * kTile * Fmt::kScaleBytes;
    const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(sp)));
    const __m512 dmin =
        _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(sp + 32)));
    const int32_t* ap = act + b * Fmt::kPairs * kTile;  // [pair][column]
    for (int j = 0; j < kTile; ++j) {
      if (!kFull && j >= n) break;
      const __m512i isum = _mm512_add_epi32(_mm512_slli_epi32(_mm512_load_si512(ch + kTile * j), 3),
                                            _mm512_load_si512(cl + kTile * j));
      __m512i corr = _mm512_setzero_si512();
      for (int p = 0; p < Fmt::kPairs; ++p) {
        corr = _mm512_dpwssd_epi32(corr, u.pairs[p], _mm512_set1_epi32(ap[p * kTile + j]));
      }
      acc[j] = Fmt::finish(acc[j], isum, corr, d, dmin, dx[b * kTile + j]);
    }
  };
  int64_t b = 0;
  for (; b + 2 <= blocks; b += 2) {
    TILE_FOLDED_BLOCK(TILE_C0, TILE_C1, b, c[0], c[1]);
    TILE_FOLDED_BLOCK(TILE_C2, TILE_C3, b + 1, c[2], c[3]);
    epilogue(b, c[0], c[1]);
    epilogue(b + 1, c[2], c[3]);
  }
  if (b < blocks) {
    TILE_FOLDED_BLOCK(TILE_C0, TILE_C1, b, c[0], c[1]);
    epilogue(b, c[0], c[1]);
  }
  for (int j = 0; j < n; ++j) _mm512_mask_storeu_ps(out[j], keep, acc[j]);
}

#undef TILE_FOLDED_BLOCK

// Q6KFolded against one column tile: C tiles 0-2 (one per digit) for even
// blocks, 3-5 for odd ones, A in tile 6, B in tile 7 (configure_digits).
#define TILE_DIGITS_BLOCK(C0, C1, C2, blk, c0, c1, c2)                                 \
  do {                                                                                 \
    const Q6KFolded::U& ub = unpacked[blk];                                            \
    const uint8_t* xb = xa + static_cast<size_t>(blk) * kActBlock;                     \
    _tile_zero(C0);                                                                    \
    _tile_zero(C1);                                                                    \
    _tile_zero(C2);                                                                    \
    for (int q = 0; q < Q6KFolded::kSub; ++q) {                                        \
      _tile_loadd(6, xb + static_cast<size_t>(q) * kTile * Q6KFolded::kSubK, Q6KFolded::kSubK); \
      _tile_loadd(7, ub.b[0][q], 64);                                                  \
      _tile_dpbssd(C0, 6, 7);                                                          \
      _tile_loadd(7, ub.b[1][q], 64);                                                  \
      _tile_dpbssd(C1, 6, 7);                                                          \
      _tile_loadd(7, ub.b[2][q], 64);                                                  \
      _tile_dpbssd(C2, 6, 7);                                                          \
    }                                                                                  \
    _tile_stored(C0, c0, 64);                                                          \
    _tile_stored(C1, c1, 64);                                                          \
    _tile_stored(C2, c2, 64);                                                          \
  } while (0)

void configure_digits(int n) {
  TileConfig c;
  for (int t = 0; t < 6; ++t) {
    c.rows[t] = static_cast<uint8_t>(n);
    c.colsb[t] = kTile * sizeof(int32_t);
  }
  c.rows[6] = static_cast<uint8_t>(n);
  c.colsb[6] = Q6KFolded::kSubK;
  c.rows[7] = Q6KFolded::kSubK / 4;
  c.colsb[7] = 64;
  __asm__ volatile("" : : "m"(c) : "memory");  // see panel.cpp's configure()
  _tile_loadconfig(&c);
}

template <bool kFull>
void column_tile_digits(const uint8_t* scales, const Q6KFolded::U* unpacked, int64_t blocks,
                        const uint8_t* xa, const float* dx, int n, float* const* out,
                        __mmask16 keep) {
  alignas(64) int32_t c[6][kTile * kTile];
  __m512 acc[kTile];
  for (__m512& v : acc) v = _mm512_setzero_ps();
  const auto epilogue = [&](int64_t b, const int32_t* c0, const int32_t* c1, const int32_t* c2) {
    const uint8_t* sp = scales + static_cast<size_t>(b) * kTile * Q6KFolded::kScaleBytes;
    const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(sp)));
    for (int j = 0; j < kTile; ++j) {
      if (!kFull && j >= n) break;
      // 49 C2 + 7 C1 + C0 as 7 (7 C2 + C1) + C0, 7x = 8x - x.
      const __m512i x2 = _mm512_load_si512(c2 + kTile * j);
      const __m512i t = _mm512_add_epi32(_mm512_sub_epi32(_mm512_slli_epi32(x2, 3), x2),
                                         _mm512_load_si512(c1 + kTile * j));
      const __m512i sum = _mm512_add_epi32(_mm512_sub_epi32(_mm512_slli_epi32(t, 3), t),
                                           _mm512_load_si512(c0 + kTile * j));
      acc[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum),
                               _mm512_mul_ps(d, _mm512_set1_ps(dx[b * kTile + j])), acc[j]);
    }
  };
  int64_t b = 0;
  for (; b + 2 <= blocks; b += 2) {
    TILE_DIGITS_BLOCK(0, 1, 2, b, c[0], c[1], c[2]);
    TILE_DIGITS_BLOCK(3, 4, 5, b + 1, c[3], c[4], c[5]);
    epilogue(b, c[0], c[1], c[2]);
    epilogue(b + 1, c[3], c[4], c[5]);
  }
  if (b < blocks) {
    TILE_DIGITS_BLOCK(0, 1, 2, b, c[0], c[1], c[2]);
    epilogue(b, c[0], c[1], c[2]);
  }
  for (int j = 0; j < n; ++j) _mm512_mask_storeu_ps(out[j], keep, acc[j]);
}

#undef TILE_DIGITS_BLOCK

template <class Fmt>
void gemm(const MatArgs& a) {
  thread_local std::vector<uint8_t> scratch;
  const int64_t blocks = a.k / kQKK;
  const int64_t tiles = (a.cols + kTile - 1) / kTile;
  // Scratch: activation scales [tile][block][16], activation pairs
  // [tile][block][pair][16], the packed activations [tile][block][sub-block]
  // [16][kSubK], then a panel's unpacked blocks.
  const size_t dx_bytes = static_cast<size_t>(tiles * blocks) * kTile * sizeof(float);
  const size_t act_bytes = dx_bytes * Fmt::kPairs;
  const size_t xa_bytes = static_cast<size_t>(tiles * blocks) * kActBlock;
  const size_t need = dx_bytes + act_bytes + xa_bytes +
                      static_cast<size_t>(blocks) * sizeof(typename Fmt::U) + 63;
  if (scratch.size() < need) scratch.resize(need);
  uint8_t* mem = scratch.data() + (-reinterpret_cast<uintptr_t>(scratch.data()) & 63);
  auto* dx = reinterpret_cast<float*>(mem);
  auto* act = reinterpret_cast<int32_t*>(mem + dx_bytes);
  uint8_t* xa = mem + dx_bytes + act_bytes;
  for (int64_t col = 0; col < tiles * kTile; ++col) {
    const int64_t u = col / kTile, j = col % kTile;
    float* d = dx + u * blocks * kTile + j;
    int32_t* p = act + u * blocks * Fmt::kPairs * kTile + j;
    const auto* xb = reinterpret_cast<const block_q8_K*>(a.x + static_cast<size_t>(col) * a.x_stride);
    uint8_t* xj = xa + static_cast<size_t>(u * blocks) * kActBlock + j * Fmt::kSubK;
    for (int64_t b = 0; b < blocks; ++b) {
      int32_t pairs[Fmt::kPairs] = {};
      if (col < a.cols) Fmt::act_pairs(xb[b], pairs);  // a short last tile's missing columns: 0
      d[b * kTile] = col < a.cols ? xb[b].d : 0.0f;
      for (int q = 0; q < Fmt::kPairs; ++q) p[(b * Fmt::kPairs + q) * kTile] = pairs[q];
      // Missing columns' rows are never loaded (the A tiles have n rows).
      if (col >= a.cols) continue;
      uint8_t* dst = xj + static_cast<size_t>(b) * kActBlock;
      for (int s = 0; s < Fmt::kSub; ++s) {
        std::memcpy(dst + static_cast<size_t>(s) * kTile * Fmt::kSubK,
                    reinterpret_cast<const uint8_t*>(xb[b].qs) + s * Fmt::kSubK, Fmt::kSubK);
      }
    }
  }
  auto* unpacked = reinterpret_cast<typename Fmt::U*>(mem + dx_bytes + act_bytes + xa_bytes);
  const size_t scale_bytes = static_cast<size_t>(blocks) * kTile * Fmt::kScaleBytes;
  int configured = 0;
  float* out[kTile];
  for (int64_t r0 = 0; r0 < a.rows; r0 += kPanelRows) {
    const uint8_t* scales = a.w + static_cast<size_t>(r0 / kPanelRows) * a.w_stride;
    const uint8_t* quants = scales + scale_bytes;
    for (int64_t b = 0; b < blocks; ++b) {
      Fmt::unpack(scales + static_cast<size_t>(b) * kTile * Fmt::kScaleBytes,
                  quants + static_cast<size_t>(b) * kTile * Fmt::kQuantBytes, unpacked[b]);
    }
    const int64_t valid = a.rows - r0 < kPanelRows ? a.rows - r0 : kPanelRows;
    const auto keep = static_cast<__mmask16>((1u << valid) - 1);
    for (int64_t u = 0; u < tiles; ++u) {
      const int64_t c0 = u * kTile;
      const int n = static_cast<int>(a.cols - c0 < kTile ? a.cols - c0 : kTile);
      if (n != configured) {
        if constexpr (requires { Fmt::kDigits; }) {
          configure_digits(n);
        } else {
          configure(n, Fmt::kSubK);
        }
        configured = n;
      }
      for (int j = 0; j < n; ++j) {
        out[j] = reinterpret_cast<float*>(reinterpret_cast<uint8_t*>(a.out) +
                                          static_cast<size_t>(c0 + j) * a.out_stride) +
                 r0;
      }
      const uint8_t* x = xa + static_cast<size_t>(u * blocks) * kActBlock;
      const float* d = dx + u * blocks * kTile;
      const int32_t* p = act + u * blocks * Fmt::kPairs * kTile;
      if constexpr (requires { Fmt::kDigits; }) {
        if (n == kTile) {
          column_tile_digits<true>(scales, unpacked, blocks, x, d, n, out, keep);
        } else {
          column_tile_digits<false>(scales, unpacked, blocks, x, d, n, out, keep);
        }
      } else if constexpr (requires { Fmt::kFolded; }) {
        if (n == kTile) {
          column_tile_folded<Fmt, true>(scales, unpacked, blocks, x, d, p, n, out, keep);
        } else {
          column_tile_folded<Fmt, false>(scales, unpacked, blocks, x, d, p, n, out, keep);
        }
      } else if (n == kTile) {
        column_tile<Fmt, true>(scales, unpacked, blocks, x, d, p, n, out, keep);
      } else {
        column_tile<Fmt, false>(scales, unpacked, blocks, x, d, p, n, out, keep);
      }
    }
  }
  _tile_release();
}

#undef TILE_C0
#undef TILE_C1
#undef TILE_C2
#undef TILE_C3
#undef TILE_A0
#undef TILE_A1
#undef TILE_B0
#undef TILE_B1

}  // namespace

void mat_q2_k_panel(const MatArgs& a) {
  if (a.cols < kMinCols || a.k < kQKK) {
    avx512::mat_q2_k_panel_x4(a);
  } else {
    gemm<Q2K>(a);
  }
}

void mat_q3_k_panel(const MatArgs& a) {
  if (a.cols < kMinCols || a.k < kQKK) {
    avx512::mat_q3_k_panel_x4(a);
  } else {
    gemm<Q3K>(a);
  }
}

void mat_q4_k_panel(const MatArgs& a) {
  if (a.cols < kMinCols || a.k < kQKK) {
    avx512::mat_q4_k_panel_x4(a);
  } else {
    gemm<Q4KF>(a);
  }
}

void mat_q5_k_panel(const MatArgs& a) {
  if (a.cols < kMinCols || a.k < kQKK) {
    avx512::mat_q5_k_panel_x4(a);
  } else {
    gemm<Q5KF>(a);
  }
}

void mat_iq4_xs_panel(const MatArgs& a) {
  if (a.cols < kMinCols || a.k < kQKK) {
    avx512::mat_iq4_xs_panel_x4(a);
  } else {
    gemm<IQ4XS>(a);
  }
}

void mat_q6_k_panel(const MatArgs& a) {
  if (a.cols < kMinCols || a.k < kQKK) {
    avx512::mat_q6_k_panel_x4(a);
  } else {
    gemm<Q6KFolded>(a);
  }
}

}  // namespace tessera::cpu::amx
