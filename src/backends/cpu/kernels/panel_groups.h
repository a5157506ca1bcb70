// Where a K-quant block's 64-byte groups sit in a panel (repack.h), for the
// formats whose kernels read one block from several places of the GGUF block
// at once: Q6_K (ql, qh, scales), Q5_K (qh beside qs) and Q3_K (hmask beside
// qs). Their panels keep the groups in the order the kernels read them, so a
// GEMV streams each panel front to back: with the GGUF order (three regions of
// a 3.3 KiB Q6_K block read in turn) a cache-cold Q6_K GEMV read 0.44 of the
// read probe on one thread of a Zen 3, in this order 0.57 (cpu_kernels_bench,
// 2026-12-07). Every other format keeps the GGUF order (identity).
//
// Group j of a block holds its quant bytes 4j .. 4j + 3 (after the scales the
// panel keeps apart) of each of the 16 rows; the functions below name the
// panel group of each GGUF group, and panel_group() maps one to the other.
#pragma once

#include <cstddef>
#include <cstdint>

#include "tessera/core/dtype.h"

namespace tessera::cpu::groups {

// Q6_K: GGUF groups ql 0-31 (ql bytes 4j..: group 16 hh + 8 i + t holds the
// low nibbles of elements 128 hh + 32 (2 i) + 4 t .. and the high nibbles of
// 128 hh + 32 (2 i + 1) + 4 t ..), qh 32-47 (32 + 8 hh + t), int8 scales 48-51.
// Panel: the scales, then per half hh and step t: qh, ql (i = 0), ql (i = 1).
constexpr int q6k_scales(int g) { return g; }
constexpr int q6k_qh(int hh, int t) { return 4 + 24 * hh + 3 * t; }
constexpr int q6k_ql(int hh, int i, int t) { return 5 + 24 * hh + 3 * t + i; }
inline constexpr int kQ6KGroups = 52;

// Q6_K's panels also re-encode each 6-bit weight's bits (the one format
// whose panels are more than a permutation): the GGUF bytes ql[64 hh + l],
// ql[64 hh + 32 + l] and qh[32 hh + l] (l < 32) hold the four weights
// v0..v3 of elements 128 hh + l, + 32, + 64, + 96 as nibbles and crumbs; the
// panel keeps, at those three bytes' places, A = v0 | (v3 & 3) << 6,
// B = v1 | (v3 & 12) << 4 and C = v2 | (v3 & 48) << 2. A kernel then takes
// v0, v1, v2 with one AND each and v3 from the three top crumbs: 11 vector
// operations for four weight vectors where the GGUF bits took 17 (avx2).
struct Q6KTriple {
  uint8_t a, b, c;
};
constexpr Q6KTriple q6k_encode(uint8_t ql0, uint8_t ql1, uint8_t qh) {
  const int v0 = (ql0 & 0xF) | (qh & 3) << 4, v1 = (ql1 & 0xF) | (qh >> 2 & 3) << 4;
  const int v2 = ql0 >> 4 | (qh >> 4 & 3) << 4, v3 = ql1 >> 4 | (qh >> 6 & 3) << 4;
  return {static_cast<uint8_t>(v0 | (v3 & 3) << 6), static_cast<uint8_t>(v1 | (v3 & 12) << 4),
          static_cast<uint8_t>(v2 | (v3 & 48) << 2)};
}
// The inverse: {ql0, ql1, qh} from {A, B, C}.
constexpr Q6KTriple q6k_decode(uint8_t a, uint8_t b, uint8_t c) {
  const int v0 = a & 63, v1 = b & 63, v2 = c & 63, v3 = a >> 6 | (b >> 6) << 2 | (c >> 6) << 4;
  return {static_cast<uint8_t>((v0 & 0xF) | (v2 & 0xF) << 4),
          static_cast<uint8_t>((v1 & 0xF) | (v3 & 0xF) << 4),
          static_cast<uint8_t>(v0 >> 4 | (v1 >> 4) << 2 | (v2 >> 4) << 4 | (v3 >> 4) << 6)};
}
// Quant byte j (< 192) of a Q6_K block: its triple's first quant byte
// (ql[64 hh + l]) and which of the three it is (0: ql0, 1: ql1, 2: qh).
struct Q6KMember {
  int first, which;
};
constexpr Q6KMember q6k_member(int j) {
  if (j < 128) return {64 * (j / 64) + j % 32, (j % 64) / 32};
  return {64 * ((j - 128) / 32) + (j - 128) % 32, 2};
}
// The quant byte index of member `which` of the triple whose first is `first`.
constexpr int q6k_member_byte(int first, int which) {
  return which == 0 ? first : which == 1 ? first + 32 : 128 + 32 * (first / 64) + first % 64;
}
inline constexpr int kQ6KTripleBytes = 192;  // ql and qh; the scales after them stay as they are

// Q5_K: GGUF groups 0-2 the packed scales and mins, qh 3-10 (3 + t), qs 11-42
// (11 + 8 p + t: sub-blocks 2p, 2p + 1). Panel: the scales, then qh t beside
// qs (p = 0, t), then the other qs in order.
constexpr int q5k_scales(int g) { return g; }
constexpr int q5k_qh(int t) { return 3 + 2 * t; }
constexpr int q5k_qs(int p, int t) { return p == 0 ? 4 + 2 * t : 11 + 8 * p + t; }
inline constexpr int kQ5KGroups = 43;

// Q3_K: GGUF groups hmask 0-7 (t), qs 8-23 (8 + 8 hh + t), packed scales 24-26.
// Panel: the scales, then hmask t beside qs (hh = 0, t), then qs (hh = 1).
constexpr int q3k_scales(int g) { return g; }
constexpr int q3k_hmask(int t) { return 3 + 2 * t; }
constexpr int q3k_qs(int hh, int t) { return hh == 0 ? 4 + 2 * t : 19 + t; }
inline constexpr int kQ3KGroups = 27;

// The panel group of GGUF group j of a `type` block (identity for the others).
constexpr size_t panel_group(DType type, size_t j) {
  const int g = static_cast<int>(j);
  switch (type) {
    case DType::kQ6_K:
      if (g < 32) return static_cast<size_t>(q6k_ql(g / 16, (g / 8) % 2, g % 8));
      if (g < 48) return static_cast<size_t>(q6k_qh((g - 32) / 8, (g - 32) % 8));
      return static_cast<size_t>(q6k_scales(g - 48));
    case DType::kQ5_K:
      if (g < 3) return static_cast<size_t>(q5k_scales(g));
      if (g < 11) return static_cast<size_t>(q5k_qh(g - 3));
      return static_cast<size_t>(q5k_qs((g - 11) / 8, (g - 11) % 8));
    case DType::kQ3_K:
      if (g < 8) return static_cast<size_t>(q3k_hmask(g));
      if (g < 24) return static_cast<size_t>(q3k_qs((g - 8) / 8, (g - 8) % 8));
      return static_cast<size_t>(q3k_scales(g - 24));
    default:
      return j;
  }
}

}  // namespace tessera::cpu::groups
