// Q2_K, Q3_K, Q4_K, Q5_K, Q6_K and IQ4_XS weights in 16-row panels (repack.h) times Q8_K activations,
// written once for the avx2 and avx512 tiers: the tier's policy V supplies
// the vectors (V::kRows rows of 32-bit lanes: 16 in a zmm, or 8 in a ymm, two
// halves per panel) and its int8 dot product. Outer-product form, as the
// Q4_0 panels: lane r of a 64-byte group is row r's 4 consecutive weight
// bytes, and four activation bytes broadcast to every lane feed one dot.
//
// Arithmetic, per 256-element block, all integer until one convert:
//   Q4_K: x = d sc_j q - dmin m_j per 32-element sub-block j, so
//     row . col = d d_a sum_j sc_j D_j - dmin d_a sum_j m_j B_j,
//     D_j = sum q a over sub-block j (u8 x s8 dots), B_j its activation sum
//     (the Q8_K bsums of its two 16s); sum_j m_j B_j as int16 pair products.
//   Q6_K: x = d sc_s (q - 32) per 16-element sub-block s (q 6 bits, sc int8):
//     row . col = d d_a (sum_s sc_s D_s - 32 sum_s sc_s B_s).
//   Q5_K: as Q4_K with q of 5 bits (the fifth from qh).
//   IQ4_XS: x = d (ls_j - 32) L[q] per 32-element sub-block j, L the IQ4
//     levels (vpshufb on the nibbles): row . col = d d_a sum_j (ls_j - 32) D_j,
//     D_j = sum L[q] a (V::sdot: a signed-weight dot, exact), |D_j| <= 32 *
//     127 * 128 < 2^19, |sum (ls - 32) D| < 2^27.
//   Q3_K: x = d (sc_s - 32) (q_s - 4) per 16-element sub-block s, q = the 2
//     low bits | hmask bit << 2 in [0, 7]: as Q6_K with an offset of 4;
//     |D_s| <= 16 * 7 * 128 = 14336, |sum sc D| <= 16 * 32 * 14336 < 2^23,
//     4 |sum sc B| <= 4 * 16 * 32 * 2048 < 2^23: the difference < 2^24.
//   Q2_K: x = d sc_s q - dmin m_s per 16-element sub-block (sc, m 4 bits, q
//     2): |D_s| <= 16 * 3 * 128 = 6144, |sum sc D| <= 16 * 15 * 6144 < 2^21,
//     |sum m B| <= 16 * 15 * 2048 < 2^19 (int16 pair products).
// Every integer is exact: |D_j| <= 32 * 15 * 128, |sum sc D| < 2^25 (Q4_K;
// 2^29 where V::kNibbleX16 takes each D_j 16 times: vpdpbusd does not saturate);
// Q5_K |D_j| <= 32 * 31 * 128, |sum sc D| < 2^26;
// |D_s| <= 16 * 63 * 128, |sum sc D| + 32 |sum sc B| < 2^29 (Q6_K). Then one
// or two FMAs per block and row, as the GGUF-layout kernels (row_dot.h).
// Include in a tier's translation unit after defining V; internal linkage.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <utility>

#include "cpu/kernels/kernels.h"
#include "cpu/kernels/panel_groups.h"
#include "cpu/kernels/repack.h"
#include "cpu/kernels/x86/fn_table.h"
#include "cpu/kernels/x86/iq4.h"

namespace tessera::cpu {
namespace {

// Two int16 activation sums (a in the low half, b in the high) as one lane.
inline int32_t pair16(int32_t a, int32_t b) {
  return static_cast<int32_t>((static_cast<uint32_t>(a) & 0xFFFFu) |
                              (static_cast<uint32_t>(b) << 16));
}

// A K-quant panel matrix as the kernels see it: per panel, the blocks' f16
// scales then their quants (repack.h), kScaleBytes / kQuantBytes per row.
template <class Fmt>
struct KPanels {
  static const uint8_t* scales(const MatArgs& a, int64_t p) {
    return a.w + static_cast<size_t>(p) * a.w_stride;
  }
  static const uint8_t* quants(const MatArgs& a, int64_t p) {
    return scales(a, p) + static_cast<size_t>(a.k / kQKK) * kPanelRows * Fmt::kScaleBytes;
  }
};

// Software prefetch for a GEMV: each 64-byte group a block loads prefetches
// the one V::kAhead bytes further on (the tier's distance: 2 KiB on avx2,
// 4 KiB on avx512, whose GEMV reads one stream a thread), so a block's 35
// (Q4_K) or 52 (Q6_K) prefetches spread over its dots (issued in one burst
// per block, they took 38% of a cache-warm Q4_K GEMV's samples in perf; from
// DRAM both read the same, 0.66-0.77 of the probe), and the scales two
// blocks ahead.

// An accumulator laundered through an empty asm that may change it, so each
// sum stays one chain: GCC 12 treats integer vector adds as associative and
// regrouped a block's adds into trees whose partial sums spilled (the avx2
// IQ4_XS GEMM tile: a 4 KiB stack frame, ~300 stack accesses a block).
template <class T>
[[gnu::always_inline]] inline T chain(T acc) {
  __asm__("" : "+v"(acc));
  return acc;
}

// Group g of block q, rows kRows h .. (h: the half), with its prefetch when kPf.
// The prefetch is an asm statement that takes the loaded group as an input,
// so it issues after that load: as _mm_prefetch, GCC gathered a block's
// prefetches into one burst at its top again. With V::kOneLoad (avx512) the
// asm also hands the vector back, so GCC cannot fold the group into each op
// that uses it as a memory operand (it loaded a Q5_K qs group three times and
// each qh group twice per use: the loads, not the ALU, bounded the GEMV).
// Cache-warm GEMV, one core of a Zen 5, best of 3 alternating runs: Q2_K to
// IQ4_XS +11-17% with this and move_bits' GFNI. On avx2 (16 ymm) it cost
// 4-10% instead: there the memory operands save registers.
template <class V, bool kPf, size_t kAhead = V::kAhead>
[[gnu::always_inline]] inline typename V::I load_group(const uint8_t* q, int g, int h) {
  typename V::I v = V::load(q + 64 * g + V::kGroupBytes * static_cast<size_t>(h));
  if constexpr (kPf && V::kOneLoad) {
    __asm__ volatile("prefetcht0 %1" : "+v"(v) : "m"(*(q + 64 * g + kAhead)));
  } else if constexpr (kPf) {
    if (h == 0) {
      __asm__ volatile("prefetcht0 %0"
                       :
                       : "m"(*(q + 64 * g + kAhead)), "x"(v));
    }
  }
  return v;
}

// Bits kFrom .. kFrom + kN - 1 of every byte of v moved to kTo .., the rest
// zero. With GFNI (V::kGfni) one vgf2p8affineqb, whose 8x8 bit matrix maps
// output bit o from input bit i when byte 7 - o of the matrix has bit i set;
// otherwise a 16-bit shift and a mask (bits a shift carries across a byte
// boundary fall outside the mask). Bits that stay in place take only the mask.
template <class V, int kFrom, int kTo, int kN>
[[gnu::always_inline]] inline typename V::I move_bits(typename V::I v) {
  static_assert(kFrom + kN <= 8 && kTo + kN <= 8);
  if constexpr (V::kGfni && kFrom != kTo) {
    uint64_t m = 0;
    for (int j = 0; j < kN; ++j) m |= uint64_t{1} << (kFrom + j) << (8 * (7 - kTo - j));
    return V::affine(v, m);
  } else {
    constexpr uint32_t kByte = ((1u << kN) - 1) << kTo;
    const typename V::I mask = V::set1(static_cast<int32_t>(kByte * 0x01010101u));
    if constexpr (kTo > kFrom) return V::and_(V::template slli16<kTo - kFrom>(v), mask);
    if constexpr (kTo < kFrom) return V::and_(V::template srli16<kFrom - kTo>(v), mask);
    return V::and_(v, mask);
  }
}

// Q4_K, and Q5_K (kFifth: the fifth bit of each q from qh, ORed in as bit 4
// before the dot; its quants are scales[12], qh[32], qs[128], the qh groups
// beside the first qs ones in its panels: panel_groups.h).
template <class V, bool kFifth>
struct KMinPanel {
  static constexpr size_t kScaleBytes = 4;                   // d, dmin
  static constexpr size_t kQuantBytes = kFifth ? 172 : 140;  // scales[12], (qh[32],) qs[128]
  static constexpr bool kConstHalves = true;  // GEMV: KPanelKernel::GemvGroup
  // The panel group of qs bytes 4 (8 p + t) ..; qh bytes 4 t .. (Q5_K).
  static constexpr int qs_group(int p, int t) { return kFifth ? groups::q5k_qs(p, t) : 3 + 8 * p + t; }
  // High nibbles dotted in place (16 q) only without a fifth bit (16 q of 5
  // bits would not fit a byte).
  static constexpr bool kX16 = V::kNibbleX16 && !kFifth;
  // Q4_K's GEMV by block_both where a panel is two vectors (avx2; no kX16
  // there): cache-warm +3-10% on a Zen 3; a Q5_K variant (two qh more live)
  // lost 1-4%.
  static constexpr bool kBothHalves = V::kHalves == 2 && !kX16 && !kFifth;
  // Prefetch distance: Q5_K's larger blocks (2752 bytes a panel) read best
  // further ahead (cpu_kernels_bench GEMV, as Q6_K's below).
  static constexpr size_t kAhead = kFifth ? std::max<size_t>(4096, V::kAhead) : V::kAhead;
  // Groups per 16-bit dot chain where V's Acc is int16 pairs: 8 Q4_K groups
  // sum to <= 8 * 2 * 15 * 128 = 30720; Q5_K's to 4 * 2 * 31 * 128 = 31744.
  static constexpr int kChain = kFifth ? V::kQ5Chain : 8;
  using I = typename V::I;
  using F = typename V::F;

  // Sub-blocks 2P (low nibbles) and 2P + 1 (high) of one block into isum.
  template <int P, int C, bool kPf>
  [[gnu::always_inline]] static void sub_pair(const uint8_t* q, int h, const block_q8_K* const* xb,
                                              const I (&sc)[2], I* isum) {
    const I m4 = V::set1(0x0F0F0F0F);
    // With kX16 every sub-block's sum is taken 16 times (low nibbles by a
    // 16-fold scale), and d by 1/16: exact, as powers of two.
    const I sclo = V::byte_u(sc[P / 2], 2 * (P % 2));
    const auto slo = V::scale(kX16 ? V::template slli32<4>(sclo) : sclo);
    const auto shi = V::template scale_byte<false>(sc[P / 2], 2 * (P % 2) + 1);
#pragma GCC unroll 2
    for (int t0 = 0; t0 < 8; t0 += kChain) {
      typename V::Acc dlo[C], dhi[C];
      for (int c = 0; c < C; ++c) dlo[c] = dhi[c] = V::acc_zero();
#pragma GCC unroll 8
      for (int t = t0; t < t0 + kChain; ++t) {
        const I v = load_group<V, kPf, kAhead>(q, qs_group(P, t), h);
        I lo = V::and_(v, m4);
        I hi = kX16 ? V::and_(v, V::set1(static_cast<int32_t>(0xF0F0F0F0)))
                    : move_bits<V, 4, 0, 4>(v);
        if constexpr (kFifth) {  // qh bytes 4t..4t+3: bits 2P, 2P + 1 to bit 4 (read once per block)
          const I qh = load_group<V, kPf && P == 0, kAhead>(q, groups::q5k_qh(t), h);
          lo = V::or_(lo, move_bits<V, 2 * P, 4, 1>(qh));
          hi = V::or_(hi, move_bits<V, 2 * P + 1, 4, 1>(qh));
        }
        for (int c = 0; c < C; ++c) {
          dlo[c] = V::dot(dlo[c], lo, xb[c]->qs + 64 * P + 4 * t);
          dhi[c] = V::dot(dhi[c], hi, xb[c]->qs + 64 * P + 32 + 4 * t);
        }
      }
      for (int c = 0; c < C; ++c) {
        isum[c] = chain(V::add32(isum[c], V::add32(V::end(dlo[c], slo), V::end(dhi[c], shi))));
      }
    }
  }

  // The packed 6-bit scales and mins of half h (groups 0-2): bytes j of
  // each lane: sc[0] scales 0-3, sc[1] scales 4-7 (and mn the mins).
  template <bool kPf>
  [[gnu::always_inline]] static void scales_mins(const uint8_t* q, int h, I (&sc)[2], I (&mn)[2]) {
    const I s0 = load_group<V, kPf, kAhead>(q, 0, h), s1 = load_group<V, kPf, kAhead>(q, 1, h);
    const I s2 = load_group<V, kPf, kAhead>(q, 2, h);
    const I m6 = V::set1(0x3F3F3F3F), m4 = V::set1(0x0F0F0F0F), m30 = V::set1(0x30303030);
    sc[0] = V::and_(s0, m6);
    sc[1] = V::or_(V::and_(s2, m4), V::and_(V::template srli32<2>(s0), m30));
    mn[0] = V::and_(s1, m6);
    mn[1] = V::or_(V::and_(V::template srli32<4>(s2), m4), V::and_(V::template srli32<2>(s1), m30));
  }

  // A column's activation sums per 32-element sub-block as the int16 pairs
  // the mins meet: (0, 2), (1, 3), (4, 6), (5, 7).
  [[gnu::always_inline]] static void min_pairs(const block_q8_K* x, int32_t (&pairs)[4]) {
    const int16_t* bs = x->bsums;
    int32_t t[8];
    for (int j = 0; j < 8; ++j) t[j] = bs[2 * j] + bs[2 * j + 1];
    pairs[0] = pair16(t[0], t[2]);
    pairs[1] = pair16(t[1], t[3]);
    pairs[2] = pair16(t[4], t[6]);
    pairs[3] = pair16(t[5], t[7]);
  }

  // sum_j m_j B_j per lane: the mins as int16 pairs times min_pairs'.
  [[gnu::always_inline]] static I mins_dot(const I (&mn)[2], const int32_t (&pairs)[4]) {
    const I lo16 = V::set1(0x00FF00FF);
    I ms = V::dot16(V::zero(), V::and_(mn[0], lo16), pairs[0]);
    ms = V::dot16(ms, V::and_(V::template srli32<8>(mn[0]), lo16), pairs[1]);
    ms = V::dot16(ms, V::and_(mn[1], lo16), pairs[2]);
    return V::dot16(ms, V::and_(V::template srli32<8>(mn[1]), lo16), pairs[3]);
  }

  // Block `q` (its quants; `s` its f16 scales), rows kRows h .. of the
  // panel, against columns xb[0 .. C): acc[c] += the rows' dots.
  template <int C, bool kPf = false>
  [[gnu::always_inline]] static void block(const uint8_t* s, const uint8_t* q, int h,
                                           const block_q8_K* const* xb, F* acc) {
    I sc[2], mn[2];
    scales_mins<kPf>(q, h, sc, mn);
    I isum[C];
    for (int c = 0; c < C; ++c) isum[c] = V::zero();
    sub_pair<0, C, kPf>(q, h, xb, sc, isum);
    sub_pair<1, C, kPf>(q, h, xb, sc, isum);
    sub_pair<2, C, kPf>(q, h, xb, sc, isum);
    sub_pair<3, C, kPf>(q, h, xb, sc, isum);
    const F d = V::load_f16(s + V::kHalfScaleBytes * h);
    const F dmin = V::load_f16(s + 32 + V::kHalfScaleBytes * h);
    for (int c = 0; c < C; ++c) {
      int32_t pairs[4];
      min_pairs(xb[c], pairs);
      const I ms = mins_dot(mn, pairs);
      const F dx = V::set1f(xb[c]->d);
      const F dxs = kX16 ? V::set1f(xb[c]->d * 0.0625f) : dx;
      acc[c] = V::fmadd(V::cvt(isum[c]), V::mul(d, dxs), acc[c]);
      acc[c] = V::fnmadd(V::cvt(ms), V::mul(dmin, dx), acc[c]);
    }
  }
  // Q4_K GEMV on a tier of two-half panels (avx2, V::kHalves 2): both halves
  // of block q at once, so each activation broadcast, and the mins' activation
  // sums, serve 16 rows instead of 8 (V::bcast, V::dot_b). acc[h] += the dots
  // of rows 8 h ..; the same integers as block()'s.
  template <bool kPf>
  [[gnu::always_inline]] static void block_both(const uint8_t* s, const uint8_t* q,
                                                const block_q8_K* xb, F* acc) {
    static_assert(kBothHalves);
    I sc[2][2], mn[2][2];
    scales_mins<kPf>(q, 0, sc[0], mn[0]);
    scales_mins<false>(q, 1, sc[1], mn[1]);
    I isum[2] = {V::zero(), V::zero()};
    [&]<int... P>(std::integer_sequence<int, P...>) {
      (sub_pair_both<P, kPf>(q, xb, sc, isum), ...);
    }(std::make_integer_sequence<int, 4>{});
    int32_t pairs[4];
    min_pairs(xb, pairs);  // once for both halves
    const F dx = V::set1f(xb->d);
    for (int h = 0; h < 2; ++h) {
      const I ms = mins_dot(mn[h], pairs);
      const F d = V::load_f16(s + V::kHalfScaleBytes * h);
      const F dmin = V::load_f16(s + 32 + V::kHalfScaleBytes * h);
      acc[h] = V::fmadd(V::cvt(isum[h]), V::mul(d, dx), acc[h]);
      acc[h] = V::fnmadd(V::cvt(ms), V::mul(dmin, dx), acc[h]);
    }
  }

  template <int P, bool kPf>
  [[gnu::always_inline]] static void sub_pair_both(const uint8_t* q, const block_q8_K* xb,
                                                   const I (&sc)[2][2], I (&isum)[2]) {
    const I m4 = V::set1(0x0F0F0F0F);
#pragma GCC unroll 2
    for (int t0 = 0; t0 < 8; t0 += kChain) {
      typename V::Acc dlo[2] = {V::acc_zero(), V::acc_zero()};
      typename V::Acc dhi[2] = {V::acc_zero(), V::acc_zero()};
#pragma GCC unroll 8
      for (int t = t0; t < t0 + kChain; ++t) {
        const I xlo = V::bcast(xb->qs + 64 * P + 4 * t);
        const I xhi = V::bcast(xb->qs + 64 * P + 32 + 4 * t);
        for (int h = 0; h < 2; ++h) {
          const I v = h == 0 ? load_group<V, kPf, kAhead>(q, qs_group(P, t), 0)
                             : load_group<V, false>(q, qs_group(P, t), 1);
          dlo[h] = V::dot_b(dlo[h], V::and_(v, m4), xlo);
          dhi[h] = V::dot_b(dhi[h], move_bits<V, 4, 0, 4>(v), xhi);
        }
      }
      for (int h = 0; h < 2; ++h) {
        const auto slo = V::scale(V::byte_u(sc[h][P / 2], 2 * (P % 2)));
        const auto shi = V::template scale_byte<false>(sc[h][P / 2], 2 * (P % 2) + 1);
        isum[h] = chain(V::add32(isum[h], V::add32(V::end(dlo[h], slo), V::end(dhi[h], shi))));
      }
    }
  }
};

template <class V>
using Q4KPanel = KMinPanel<V, false>;
template <class V>
using Q5KPanel = KMinPanel<V, true>;

// The bytes of a format with 16-element sub-blocks (Q2_K, Q3_K, Q6_K), as
// K16Panel walks them: a block's weights come in 2 halves (hh) x 8 steps (t)
// of 4 vectors w[g], g 0..3: elements 128 hh + 32 g + 4 t .. + 3 of each row,
// sub-block 8 hh + 2 g + t / 4, as unsigned bytes (q, or q + offset).
// scales() gives the sub-block scales as bytes (sub-block 4 g + i in byte i of
// scv[g]; kSigned: int8), pairs() the int16 pairs that meet the Q8_K bsums
// (4 g, 4 g + 2) and (4 g + 1, 4 g + 3): the scales (kOffsetShift: the weight
// is q - 2^kOffsetShift) or the mins (kMins: x = d sc q - dmin m).
template <class V>
struct Q6KBytes {  // ql[128], qh[64], int8 scales[16], in panel_groups.h's order
  static constexpr size_t kScaleBytes = 2;    // d
  static constexpr size_t kQuantBytes = 208;
  static constexpr bool kSigned = true, kMins = false;
  static constexpr int kOffsetShift = 5;
  static constexpr bool kNarrow = false;      // |D_s| <= 16 * 63 * 128 > 2^15
  static constexpr int kChain = V::kQ6Chain;  // groups of 4 per dot chain (exact in its type)
  // 3328 bytes a panel block: 4 KiB ahead read 0.68-0.78 of the read probe
  // against 0.58-0.67 at 2 KiB (cpu_kernels_bench GEMV, 2 threads; the GGUF
  // group order). In the kernels' order 2, 4 and 6 KiB read the same.
  static constexpr size_t kAhead = 4096;
  using I = typename V::I;
  template <bool kPf>
  [[gnu::always_inline]] static void scales(const uint8_t* q, int h, I (&scv)[4]) {
    for (int g = 0; g < 4; ++g) scv[g] = load_group<V, kPf, kAhead>(q, groups::q6k_scales(g), h);
  }
  // The panels' triples (panel_groups.h): C at qh's place, A and B at the
  // ql groups'; v0..v2 their low 6 bits, v3 their top crumbs.
  template <bool kPf, int kHh>
  [[gnu::always_inline]] static void weights(const uint8_t* q, int t, int h, I (&w)[4]) {
    const I m6 = V::set1(0x3F3F3F3F);
    const I c = load_group<V, kPf, kAhead>(q, groups::q6k_qh(kHh, t), h);
    const I a = load_group<V, kPf, kAhead>(q, groups::q6k_ql(kHh, 0, t), h);
    const I b = load_group<V, kPf, kAhead>(q, groups::q6k_ql(kHh, 1, t), h);
    w[0] = V::and_(a, m6);
    w[1] = V::and_(b, m6);
    w[2] = V::and_(c, m6);
    w[3] = V::or_(V::or_(move_bits<V, 6, 0, 2>(a), move_bits<V, 6, 2, 2>(b)), move_bits<V, 6, 4, 2>(c));
  }
  static void pairs(const uint8_t*, int, const I (&scv)[4], I (&p)[8]) {
    for (int g = 0; g < 4; ++g) {
      p[2 * g] = V::template srai16<8>(V::template slli16<8>(scv[g]));
      p[2 * g + 1] = V::template srai16<8>(scv[g]);
    }
  }
};

// Q3_K: hmask[32], qs[64], scales[12], in panel_groups.h's order. The
// weight is q' = low 2 bits | hbit << 2 in [0, 7], x = d (sc - 32) (q' - 4).
template <class V>
struct Q3KBytes {
  static constexpr size_t kScaleBytes = 2;  // d
  static constexpr size_t kQuantBytes = 108;
  static constexpr bool kSigned = true, kMins = false;
  static constexpr int kOffsetShift = 2;
  static constexpr bool kNarrow = true;  // |D_s| <= 14336
  // A whole sub-block per chain: avx2's int16 pairs sum 4 groups to
  // <= 4 * 2 * 7 * 128 = 7168.
  static constexpr int kChain = 4;
  using I = typename V::I;
  template <bool kPf>
  [[gnu::always_inline]] static void scales(const uint8_t* q, int h, I (&scv)[4]) {
    // Scale j: low 4 bits in nibble j / 8 of byte j % 8, high 2 bits in
    // crumb j / 4 of byte 8 + j % 4; so bytes i of s0 / s1 / s2 serve
    // sub-blocks i, 4 + i, 8 + i, 12 + i. Then - 32 as int8.
    const I s0 = load_group<V, kPf>(q, groups::q3k_scales(0), h);
    const I s1 = load_group<V, kPf>(q, groups::q3k_scales(1), h);
    const I s2 = load_group<V, kPf>(q, groups::q3k_scales(2), h);
    const I m4 = V::set1(0x0F0F0F0F), m30 = V::set1(0x30303030), k32 = V::set1(0x20202020);
    scv[0] = V::or_(V::and_(s0, m4), V::and_(V::template slli16<4>(s2), m30));
    scv[1] = V::or_(V::and_(s1, m4), V::and_(V::template slli16<2>(s2), m30));
    scv[2] = V::or_(V::and_(V::template srli16<4>(s0), m4), V::and_(s2, m30));
    scv[3] = V::or_(V::and_(V::template srli16<4>(s1), m4),
                    V::and_(V::template srli16<2>(s2), m30));
    for (I& v : scv) v = V::sub8(v, k32);
  }
  template <bool kPf, int kHh>
  [[gnu::always_inline]] static void weights(const uint8_t* q, int t, int h, I (&w)[4]) {
    const I qs = load_group<V, kPf>(q, groups::q3k_qs(kHh, t), h);
    // hmask bytes 4t..4t+3: bit 4 hh + g is the high bit of crumb g, moved to bit 2.
    const I hm = load_group < V, kPf && kHh == 0 > (q, groups::q3k_hmask(t), h);
    constexpr int kH = 4 * kHh;
    w[0] = V::or_(move_bits<V, 0, 0, 2>(qs), move_bits<V, kH, 2, 1>(hm));
    w[1] = V::or_(move_bits<V, 2, 0, 2>(qs), move_bits<V, kH + 1, 2, 1>(hm));
    w[2] = V::or_(move_bits<V, 4, 0, 2>(qs), move_bits<V, kH + 2, 2, 1>(hm));
    w[3] = V::or_(move_bits<V, 6, 0, 2>(qs), move_bits<V, kH + 3, 2, 1>(hm));
  }
  static void pairs(const uint8_t* q, int h, const I (&scv)[4], I (&p)[8]) {
    Q6KBytes<V>::pairs(q, h, scv, p);
  }
};

// Q2_K: scales[16] (groups 0-3: sc in the low nibbles, m in the high), qs[64]
// (4-19); x = d sc q - dmin m.
template <class V>
struct Q2KBytes {
  static constexpr size_t kScaleBytes = 4;  // d, dmin
  static constexpr size_t kQuantBytes = 80;
  static constexpr bool kSigned = false, kMins = true;
  static constexpr int kOffsetShift = 0;
  static constexpr bool kNarrow = true;  // |D_s| <= 6144
  static constexpr int kChain = 4;  // avx2: 4 * 2 * 3 * 128 = 3072
  using I = typename V::I;
  template <bool kPf>
  [[gnu::always_inline]] static void scales(const uint8_t* q, int h, I (&scv)[4]) {
    for (int g = 0; g < 4; ++g) scv[g] = V::and_(load_group<V, kPf>(q, g, h), V::set1(0x0F0F0F0F));
  }
  template <bool kPf, int kHh>
  [[gnu::always_inline]] static void weights(const uint8_t* q, int t, int h, I (&w)[4]) {
    const I qs = load_group<V, kPf>(q, 4 + 8 * kHh + t, h);
    w[0] = move_bits<V, 0, 0, 2>(qs);
    w[1] = move_bits<V, 2, 0, 2>(qs);
    w[2] = move_bits<V, 4, 0, 2>(qs);
    w[3] = move_bits<V, 6, 0, 2>(qs);
  }
  static void pairs(const uint8_t* q, int h, const I (&)[4], I (&p)[8]) {
    const I lo16 = V::set1(0x000F000F);
    for (int g = 0; g < 4; ++g) {  // the mins: high nibbles, as int16 pairs
      const I v = V::template srli16<4>(V::load(q + 64 * g + V::kGroupBytes * static_cast<size_t>(h)));
      p[2 * g] = V::and_(v, lo16);
      p[2 * g + 1] = V::and_(V::template srli16<8>(v), lo16);
    }
  }
};

// Q2_K, Q3_K and Q6_K over the bytes W: per sub-block s of 16 an exact dot
// D_s = sum w a, times its scale; then the offset or the mins by the bsums B_s:
//   Q6_K: row . col = d d_a (sum_s sc_s D_s - 32 sum_s sc_s B_s)
//   Q3_K: row . col = d d_a (sum_s sc_s D_s - 4 sum_s sc_s B_s), sc in [-32, 31]
//   Q2_K: row . col = d d_a sum_s sc_s D_s - dmin d_a sum_s m_s B_s
template <class V, class W>
struct K16Panel {
  static constexpr size_t kScaleBytes = W::kScaleBytes;
  static constexpr bool kConstHalves = true;
  static constexpr bool kBothHalves = false;
  static constexpr size_t kQuantBytes = W::kQuantBytes;
  using I = typename V::I;
  using F = typename V::F;

  // Where V sums a whole sub-block in 32-bit lanes and W's |D_s| fits int16
  // (Q3_K <= 14336, Q2_K <= 6144): two sub-blocks' D packed as an int16 pair
  // take their scales with one vpdpwssd (V::end_pair), not two vpmulld.
  static constexpr bool kPairEnd = V::kPairEnd && W::kNarrow && W::kChain == 4;

  template <int kHh, int C, bool kPf>
  [[gnu::always_inline]] static void half(const uint8_t* q, int h, const block_q8_K* const* xb,
                                          const I (&scv)[4], I* isum) {
    constexpr int kChain = W::kChain;
#pragma GCC unroll 4
    for (int t0 = 0; t0 < 8; t0 += kChain) {  // elements 4 t, t in [t0, t0 + kChain)
      typename V::Acc dg[C][4];
      for (int c = 0; c < C; ++c) {
        for (int g = 0; g < 4; ++g) dg[c][g] = V::acc_zero();
      }
      for (int t = t0; t < t0 + kChain; ++t) {
        I w[4];
        W::template weights<kPf, kHh>(q, t, h, w);
        for (int c = 0; c < C; ++c) {
          for (int g = 0; g < 4; ++g) {
            dg[c][g] = V::dot(dg[c][g], w[g], xb[c]->qs + 128 * kHh + 32 * g + 4 * t);
          }
        }
      }
      if constexpr (kPairEnd) {
        // w[2 gp], w[2 gp + 1] meet sub-blocks 4 G + i and 4 G + i + 2 (G = 2 hh + gp,
        // i = t0 / 4): their scales are bytes i and i + 2 of scv[G], one int16 pair.
        for (int gp = 0; gp < 2; ++gp) {
          const I sv = scv[2 * kHh + gp];
          const I sp = t0 == 0 ? (W::kSigned ? V::template srai16<8>(V::template slli16<8>(sv))
                                             : V::and_(sv, V::set1(0x00FF00FF)))
                               : (W::kSigned ? V::template srai16<8>(sv)
                                             : V::template srli16<8>(sv));
          for (int c = 0; c < C; ++c) {
            isum[c] = chain(V::end_pair(isum[c], dg[c][2 * gp], dg[c][2 * gp + 1], sp));
          }
        }
      } else {
        for (int g = 0; g < 4; ++g) {
          const int sb = 8 * kHh + 2 * g + t0 / 4;  // sub-block of 16
          const auto sc = V::template scale_byte<W::kSigned>(scv[sb / 4], sb % 4);
          for (int c = 0; c < C; ++c) isum[c] = chain(V::add32(isum[c], V::end(dg[c][g], sc)));
        }
      }
    }
  }

  template <int C, bool kPf = false>
  [[gnu::always_inline]] static void block(const uint8_t* s, const uint8_t* q, int h,
                                           const block_q8_K* const* xb, F* acc) {
    I scv[4];
    W::template scales<kPf>(q, h, scv);
    I isum[C];
    for (int c = 0; c < C; ++c) isum[c] = V::zero();
    half<0, C, kPf>(q, h, xb, scv, isum);
    half<1, C, kPf>(q, h, xb, scv, isum);
    I p[8];
    W::pairs(q, h, scv, p);
    const F d = V::load_f16(s + V::kHalfScaleBytes * h);
    for (int c = 0; c < C; ++c) {
      const int16_t* bs = xb[c]->bsums;
      I os = V::zero();
      for (int g = 0; g < 4; ++g) {
        os = V::dot16(os, p[2 * g], pair16(bs[4 * g], bs[4 * g + 2]));
        os = V::dot16(os, p[2 * g + 1], pair16(bs[4 * g + 1], bs[4 * g + 3]));
      }
      const F dx = V::set1f(xb[c]->d);
      if constexpr (W::kMins) {
        const F dmin = V::load_f16(s + 32 + V::kHalfScaleBytes * h);
        acc[c] = V::fmadd(V::cvt(isum[c]), V::mul(d, dx), acc[c]);
        acc[c] = V::fnmadd(V::cvt(os), V::mul(dmin, dx), acc[c]);
      } else {
        const I sum = V::sub32(isum[c], V::template slli32<W::kOffsetShift>(os));
        acc[c] = V::fmadd(V::cvt(sum), V::mul(d, dx), acc[c]);
      }
    }
  }
};

template <class V>
using Q6KPanel = K16Panel<V, Q6KBytes<V>>;
template <class V>
using Q3KPanel = K16Panel<V, Q3KBytes<V>>;
template <class V>
using Q2KPanel = K16Panel<V, Q2KBytes<V>>;

template <class V>
struct IQ4XSPanel {
  static constexpr size_t kScaleBytes = 4;    // d, scales_h (not an f16: moved as one)
  // (Unrolled halves cost it 18-22% in cpu_kernels_bench GEMV on a Zen 3.)
  static constexpr bool kConstHalves = false;
  static constexpr bool kBothHalves = false;
  static constexpr size_t kQuantBytes = 132;  // scales_l[4], qs[128]
  using I = typename V::I;
  using F = typename V::F;

  // Sub-block J of one block into isum; sl: scales_l in each lane, sh: scales_h.
  template <int J, int C, bool kPf>
  [[gnu::always_inline]] static void sub(const uint8_t* q, int h, const block_q8_K* const* xb, I sl,
                                         I sh, I table, I* isum) {
    const I m4 = V::set1(0x0F0F0F0F);
    // ls = low 4 bits from nibble J % 2 of scales_l[J / 2], high 2 from bits 2J of scales_h.
    const I lo4 = V::and_(V::template srli32<8 * (J / 2) + 4 * (J % 2)>(sl), V::set1(0xF));
    const I hi2 = V::and_(V::template slli32<4>(V::template srli32<2 * J>(sh)), V::set1(0x30));
    const I sc = V::sub32(V::or_(lo4, hi2), V::set1(32));
    typename V::Acc d[C];
    for (int c = 0; c < C; ++c) {
      const int16_t* bs = xb[c]->bsums;
      d[c] = V::sdot_init(bs[2 * J] + bs[2 * J + 1]);
    }
#pragma GCC unroll 4
    for (int t = 0; t < 4; ++t) {  // qs bytes 16 J + 4t: elements 32 J + 4t (low), + 16 (high)
      const I v = load_group<V, kPf>(q, 1 + 4 * J + t, h);
      const I lo = V::lut(table, V::and_(v, m4));
      const I hi = V::lut(table, move_bits<V, 4, 0, 4>(v));
      for (int c = 0; c < C; ++c) {
        d[c] = V::sdot(d[c], lo, xb[c]->qs + 32 * J + 4 * t);
        d[c] = V::sdot(d[c], hi, xb[c]->qs + 32 * J + 16 + 4 * t);
      }
    }
    for (int c = 0; c < C; ++c) isum[c] = chain(V::add32(isum[c], V::mul32(d[c], sc)));
  }

  template <int C, bool kPf = false>
  [[gnu::always_inline]] static void block(const uint8_t* s, const uint8_t* q, int h,
                                           const block_q8_K* const* xb, F* acc) {
    const I sl = load_group<V, kPf>(q, 0, h);
    const I sh = V::load_u16(s + 32 + V::kHalfScaleBytes * h);
    const I table = V::iq4_table();
    I isum[C];
    for (int c = 0; c < C; ++c) isum[c] = V::zero();
    [&]<int... J>(std::integer_sequence<int, J...>) {
      (sub<J, C, kPf>(q, h, xb, sl, sh, table, isum), ...);
    }
    (std::make_integer_sequence<int, 8>{});
    const F d = V::load_f16(s + V::kHalfScaleBytes * h);
    for (int c = 0; c < C; ++c) {
      acc[c] = V::fmadd(V::cvt(isum[c]), V::mul(d, V::set1f(xb[c]->d)), acc[c]);
    }
  }
};

// K slices of a GEMM: this many 256-element blocks (Q4_K: 18 KiB of one
// panel, Q6_K: 27 KiB), kept in L1 while the column groups pass over them.
inline constexpr int64_t kKSliceBlocks = 8;

// The kernel over panels: GEMV in groups of kStreams panels, GEMM in tiles of
// one panel (both halves on avx2, one after the other) x kCols columns.
template <class V, template <class> class P, int kStreams, int kCols>
struct KPanelKernel {
  using Fmt = P<V>;
  using F = typename V::F;
  using Grid = KPanels<Fmt>;
  static constexpr size_t kBlockScales = kPanelRows * Fmt::kScaleBytes;
  static constexpr size_t kBlockQuants = kPanelRows * Fmt::kQuantBytes;

  // Panel p's rows: out[r] (r < valid), or out[r] += when accumulate.
  static void store(float* out, const F (&acc)[V::kHalves], int valid, bool accumulate) {
    alignas(64) float tmp[kPanelRows];
    for (int h = 0; h < V::kHalves; ++h) V::store(tmp + V::kRows * h, acc[h]);
    for (int r = 0; r < valid; ++r) out[r] = accumulate ? out[r] + tmp[r] : tmp[r];
  }

  // GEMV: panels p0 + i * stride (i < N), every block, one column.
  struct GemvGroup {
    // Not inlined: tests/backends/prefetch_check.sh finds it by name.
    template <int N>
    [[gnu::noinline]] static void run(const MatArgs& a, int64_t p0, int64_t stride) {
      const int64_t nb = a.k / kQKK;
      const auto* x = reinterpret_cast<const block_q8_K*>(a.x);
      const uint8_t* sc[N];
      const uint8_t* qs[N];
      for (int i = 0; i < N; ++i) {
        sc[i] = Grid::scales(a, p0 + i * stride);
        qs[i] = Grid::quants(a, p0 + i * stride);
      }
      F acc[N][V::kHalves];
      for (auto& v : acc) {
        for (F& f : v) f = V::zero_f();
      }
      for (int64_t b = 0; b < nb; ++b) {
        for (int i = 0; i < N; ++i) {
          // Laundered per panel: otherwise GCC computes the block's ~70
          // activation addresses once for the N panels and spills them,
          // and every dot reloads its address from the stack.
          // (And per half on avx2, whose two halves read the same activations.)
          const uint8_t* s = sc[i] + kBlockScales * static_cast<size_t>(b);
          const uint8_t* q = qs[i] + kBlockQuants * static_cast<size_t>(b);
          // The scales two blocks ahead (the quants' prefetch is about one block ahead).
          _mm_prefetch(reinterpret_cast<const char*>(s + 2 * kBlockScales), _MM_HINT_T0);
          if constexpr (Fmt::kBothHalves && V::kHalves == 2) {
            const block_q8_K* xb = x + b;
            __asm__("" : "+r"(xb));
            Fmt::template block_both<true>(s, q, xb, acc[i]);
          } else if constexpr (Fmt::kConstHalves) {
            // The halves one after the other, each with its h a constant: as
            // a loop GCC kept h in a register and tested it at every group's
            // prefetch (load_group).
            [&]<int... H>(std::integer_sequence<int, H...>) {
              ([&] {
                const block_q8_K* xb[1] = {x + b};
                __asm__("" : "+r"(xb[0]));
                Fmt::template block<1, true>(s, q, H, xb, &acc[i][H]);
              }(), ...);
            }(std::make_integer_sequence<int, V::kHalves>{});
          } else {
            for (int h = 0; h < V::kHalves; ++h) {
              const block_q8_K* xb[1] = {x + b};
              __asm__("" : "+r"(xb[0]));
              Fmt::template block<1, true>(s, q, h, xb, &acc[i][h]);
            }
          }
        }
      }
      for (int i = 0; i < N; ++i) {
        const int64_t r0 = (p0 + i * stride) * kPanelRows;
        store(a.out + r0, acc[i], static_cast<int>(min_i64(a.rows - r0, kPanelRows)), false);
      }
    }
  };

  // Blocks [b0, b1) of panel p against columns c0 .. c0 + C.
  template <int C>
  static void tile(const MatArgs& a, int64_t p, int64_t b0, int64_t b1, int64_t c0) {
    const uint8_t* sc = Grid::scales(a, p);
    const uint8_t* qs = Grid::quants(a, p);
    const block_q8_K* x[C];
    for (int c = 0; c < C; ++c) {
      x[c] = reinterpret_cast<const block_q8_K*>(a.x + static_cast<size_t>(c0 + c) * a.x_stride);
    }
    F acc[C][V::kHalves];
    for (int h = 0; h < V::kHalves; ++h) {
      F part[C];
      for (int c = 0; c < C; ++c) part[c] = V::zero_f();
      for (int64_t b = b0; b < b1; ++b) {
        const block_q8_K* xb[C];
        for (int c = 0; c < C; ++c) xb[c] = x[c] + b;
        Fmt::template block<C>(sc + kBlockScales * static_cast<size_t>(b),
                               qs + kBlockQuants * static_cast<size_t>(b), h, xb, part);
      }
      for (int c = 0; c < C; ++c) acc[c][h] = part[c];
    }
    const int64_t r0 = p * kPanelRows;
    const int valid = static_cast<int>(min_i64(a.rows - r0, kPanelRows));
    for (int c = 0; c < C; ++c) {
      float* out = reinterpret_cast<float*>(reinterpret_cast<uint8_t*>(a.out) +
                                            static_cast<size_t>(c0 + c) * a.out_stride) +
                   r0;
      store(out, acc[c], valid, b0 > 0);
    }
  }

  template <size_t... I>
  static constexpr auto make_tiles(std::index_sequence<I...>) {
    using Fn = void (*)(const MatArgs&, int64_t, int64_t, int64_t, int64_t);
    return FnTable<Fn, sizeof...(I)>{{&tile<static_cast<int>(I) + 1>...}};
  }

  // Panels [p0, p1), every column: K slices, then panels, then column tiles.
  static void gemm(const MatArgs& a, int64_t p0, int64_t p1) {
    static constexpr auto kTiles = make_tiles(std::make_index_sequence<kCols>{});
    const int64_t nb = a.k / kQKK;
    const int64_t slice = a.cols > kCols ? kKSliceBlocks : nb;
    for (int64_t b0 = 0; b0 < nb; b0 += slice) {
      const int64_t b1 = min_i64(nb, b0 + slice);
      for (int64_t p = p0; p < p1; ++p) {
        for (int64_t c0 = 0; c0 < a.cols; c0 += kCols) {
          const auto nc = static_cast<size_t>(min_i64(a.cols - c0, kCols));
          kTiles.at[nc - 1](a, p, b0, b1, c0);
        }
      }
    }
  }

  static void run(const MatArgs& a) {
    const int64_t panels = (a.rows + kPanelRows - 1) / kPanelRows;
    if (a.k < kQKK || panels == 0) return;
    int64_t p = 0;
    if (a.cols == 1) {  // kStreams runs of panels, each walked front to back (run_gemv_groups)
      const int64_t stride = panels / kStreams;
      for (int64_t j = 0; j < stride; ++j) GemvGroup::template run<kStreams>(a, j, stride);
      p = stride * kStreams;
    }
    if (p < panels) gemm(a, p, panels);
  }
};

}  // namespace
}  // namespace tessera::cpu
