// amx tier: the avx512 tier with its Q4_0 / IQ4_NL / Q8_0 panel GEMMs on AMX tiles
// (AMX-INT8: Sapphire Rapids and later). A panel's block is already a B
// tile: 16 rows x 32 k as 8 groups of [16 rows][4 k] (repack.h), so
//   C[16 columns][16 rows] = A[16 columns][32 k] . B[8][64]   (tdpbssd)
// gives one block's exact integer dots for 16 columns and 16 rows at once;
// then, as in the avx512 kernel, one convert and one FMA by d_w d_x per
// column: the same integers and float steps per block as the avx512 kernel.
// Q4_0 nibbles are unpacked to int8 (q - 8), IQ4_NL's to their table values,
// once per panel and call, and
// reused by every column tile. GEMV shapes (a few columns) stay on avx512.
#include "cpu/kernels/avx512/intrin.h"

#include <cstddef>
#include <cstdint>
#include <vector>

#include "cpu/kernels/amx/amx.h"
#include "cpu/kernels/avx512/avx512.h"
#include "cpu/kernels/repack.h"
#include "cpu/kernels/x86/iq4.h"

namespace tessera::cpu::amx {
namespace {

constexpr int kTile = 16;            // columns per A/C tile, rows per panel
constexpr size_t kBTileBytes = 512;  // one block of one panel: 8 rows x 64 bytes
constexpr size_t kQ8Offset = offsetof(BlockQ8, qs);

// Tile registers: two sets (C, A, B), even and odd blocks, so block b + 1's
// dot is issued before block b's C is converted. Macros: the tile
// intrinsics paste the number into the instruction, so it must be a literal
// after expansion.
#define TILE_C0 0
#define TILE_C1 1
#define TILE_A0 2
#define TILE_A1 3
#define TILE_B0 4
#define TILE_B1 5


// n columns per A and C tile (the last column tile may be short).
void configure(int n) {
  TileConfig c;
  const auto set = [&c](int tile, int rows, int colsb) {
    c.rows[tile] = static_cast<uint8_t>(rows);
    c.colsb[tile] = static_cast<uint16_t>(colsb);
  };
  for (int t : {TILE_A0, TILE_A1}) set(t, n, kQK);
  for (int t : {TILE_C0, TILE_C1}) set(t, n, kTile * sizeof(int32_t));
  for (int t : {TILE_B0, TILE_B1}) set(t, kQK / 4, 64);
  // GCC 12's _tile_loadconfig tells the compiler it reads 8 bytes: make the
  // whole struct's stores happen first.
  __asm__ volatile("" : : "m"(c) : "memory");
  _tile_loadconfig(&c);
}

// B tiles of one panel's blocks: Q8_0's quants are int8 B tiles as stored.
struct PanelQ8_0 {
  static const uint8_t* b_tiles(const uint8_t* quants, int64_t, uint8_t*) { return quants; }
};

// Q4_0: group l's low nibbles are k = 4l..4l+3 (B row l), its high nibbles
// k = 16+4l..16+4l+3 (B row 4 + l); each becomes q - 8 in [-8, 7].
struct PanelQ4_0 {
  static constexpr size_t kQuantBytes = 256;
  static const uint8_t* b_tiles(const uint8_t* quants, int64_t blocks, uint8_t* out) {
    const __m512i m = _mm512_set1_epi8(0x0F);
    const __m512i eight = _mm512_set1_epi8(8);
    for (int64_t b = 0; b < blocks; ++b) {
      const uint8_t* q = quants + static_cast<size_t>(b) * kQuantBytes;
      uint8_t* o = out + static_cast<size_t>(b) * kBTileBytes;
      for (int l = 0; l < 4; ++l) {
        const __m512i v = _mm512_loadu_si512(q + 64 * l);
        const __m512i lo = _mm512_sub_epi8(_mm512_and_si512(v, m), eight);
        const __m512i hi = _mm512_sub_epi8(_mm512_and_si512(_mm512_srli_epi16(v, 4), m), eight);
        _mm512_storeu_si512(o + 64 * l, lo);
        _mm512_storeu_si512(o + 64 * (l + 4), hi);
      }
    }
    return out;
  }
};

// IQ4_NL: Q4_0's nibbles, each mapped by vpshufb to its signed table value.
struct PanelIQ4_NL {
  static constexpr size_t kQuantBytes = 256;
  static const uint8_t* b_tiles(const uint8_t* quants, int64_t blocks, uint8_t* out) {
    const __m512i m = _mm512_set1_epi8(0x0F);
    const __m512i table =
        _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(kvalues_iq4nl)));
    for (int64_t b = 0; b < blocks; ++b) {
      const uint8_t* q = quants + static_cast<size_t>(b) * kQuantBytes;
      uint8_t* o = out + static_cast<size_t>(b) * kBTileBytes;
      for (int l = 0; l < 4; ++l) {
        const __m512i v = _mm512_loadu_si512(q + 64 * l);
        const __m512i lo = _mm512_shuffle_epi8(table, _mm512_and_si512(v, m));
        const __m512i hi = _mm512_shuffle_epi8(table, _mm512_and_si512(_mm512_srli_epi16(v, 4), m));
        _mm512_storeu_si512(o + 64 * l, lo);
        _mm512_storeu_si512(o + 64 * (l + 4), hi);
      }
    }
    return out;
  }
};

// acc[j] += float(c[j]) * d_w * dx[j] for the n columns of one C tile
// (c: 16 columns x 16 panel rows).
template <bool kFull>
inline void scale_add(__m512 acc[kTile], const int32_t* c, __m512 dw, const float* dx, int n) {
  for (int j = 0; j < kTile; ++j) {
    if (!kFull && j >= n) break;
    const __m512 v = _mm512_cvtepi32_ps(_mm512_load_si512(c + kTile * j));
    acc[j] = _mm512_fmadd_ps(v, _mm512_mul_ps(dw, _mm512_set1_ps(dx[j])), acc[j]);
  }
}

inline __m512 block_scales(const uint8_t* scales, int64_t b) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(scales + 32 * b)));
}

// Block b's dot for one column tile into C tile `C` (A, B: its input tiles).
#define TILE_BLOCK_DOT(C, A, B, x, b_tiles, b, stride)                                  \
  do {                                                                                  \
    _tile_loadd(A, (x) + static_cast<size_t>(b) * sizeof(BlockQ8) + kQ8Offset, stride); \
    _tile_loadd(B, (b_tiles) + static_cast<size_t>(b) * kBTileBytes, 64);               \
    _tile_zero(C);                                                                      \
    _tile_dpbssd(C, A, B);                                                              \
  } while (0)

// One panel against one column tile of n columns at x, all blocks: out[j]
// gets column j's 16 row outputs (masked to `keep`). dx: the tile's
// activation scales, [blocks][16]. Even blocks use tile set 0, odd set 1;
// each block's dot is issued before the one before it is converted.
template <bool kFull>
void column_tile(const uint8_t* scales, const uint8_t* b_tiles, int64_t blocks, const uint8_t* x,
                 size_t x_stride, const float* dx, int n, float* const* out, __mmask16 keep) {
  alignas(64) int32_t c[2][kTile * kTile];
  const auto stride = static_cast<int64_t>(x_stride);
  __m512 acc[kTile];
  for (__m512& v : acc) v = _mm512_setzero_ps();
  TILE_BLOCK_DOT(TILE_C0, TILE_A0, TILE_B0, x, b_tiles, 0, stride);
  for (int64_t b = 0; b < blocks; b += 2) {
    const bool odd = b + 1 < blocks;
    if (odd) TILE_BLOCK_DOT(TILE_C1, TILE_A1, TILE_B1, x, b_tiles, b + 1, stride);
    _tile_stored(TILE_C0, c[0], 64);
    scale_add<kFull>(acc, c[0], block_scales(scales, b), dx + kTile * b, n);
    if (!odd) break;
    if (b + 2 < blocks) TILE_BLOCK_DOT(TILE_C0, TILE_A0, TILE_B0, x, b_tiles, b + 2, stride);
    _tile_stored(TILE_C1, c[1], 64);
    scale_add<kFull>(acc, c[1], block_scales(scales, b + 1), dx + kTile * (b + 1), n);
  }
  for (int j = 0; j < n; ++j) _mm512_mask_storeu_ps(out[j], keep, acc[j]);
}

#undef TILE_BLOCK_DOT

template <class P>
void gemm(const MatArgs& a) {
  thread_local std::vector<uint8_t> scratch;  // grown as needed, kept per thread
  const int64_t blocks = a.k / kQK;
  const int64_t tiles = (a.cols + kTile - 1) / kTile;
  const size_t scale_bytes = static_cast<size_t>(blocks) * kPanelRows * 2;
  // Scratch: activation scales [tile][block][16], then a panel's B tiles.
  const size_t dx_bytes = static_cast<size_t>(tiles * blocks) * kTile * sizeof(float);
  // 64-byte aligned: B tile rows split over two lines cost 12-15% of pp512.
  const size_t need = dx_bytes + static_cast<size_t>(blocks) * kBTileBytes + 63;
  if (scratch.size() < need) scratch.resize(need);
  uint8_t* mem = scratch.data() + (-reinterpret_cast<uintptr_t>(scratch.data()) & 63);
  auto* dx = reinterpret_cast<float*>(mem);
  for (int64_t col = 0; col < tiles * kTile; ++col) {
    float* d = dx + (col / kTile) * blocks * kTile + col % kTile;
    if (col >= a.cols) {  // a short last tile: its missing columns are never stored
      for (int64_t b = 0; b < blocks; ++b) d[b * kTile] = 0.0f;
      continue;
    }
    const auto* xb = reinterpret_cast<const BlockQ8*>(a.x + static_cast<size_t>(col) * a.x_stride);
    for (int64_t b = 0; b < blocks; ++b) d[b * kTile] = xb[b].d;
  }
  uint8_t* unpacked = mem + dx_bytes;
  int configured = 0;
  float* out[kTile];
  for (int64_t r0 = 0; r0 < a.rows; r0 += kPanelRows) {
    const uint8_t* scales = a.w + static_cast<size_t>(r0 / kPanelRows) * a.w_stride;
    const uint8_t* b_tiles = P::b_tiles(scales + scale_bytes, blocks, unpacked);
    const int64_t valid = a.rows - r0 < kPanelRows ? a.rows - r0 : kPanelRows;
    const auto keep = static_cast<__mmask16>((1u << valid) - 1);
    for (int64_t u = 0; u < tiles; ++u) {
      const int64_t c0 = u * kTile;
      const int n = static_cast<int>(a.cols - c0 < kTile ? a.cols - c0 : kTile);
      if (n != configured) {
        configure(n);
        configured = n;
      }
      for (int j = 0; j < n; ++j) {
        out[j] = reinterpret_cast<float*>(reinterpret_cast<uint8_t*>(a.out) +
                                          static_cast<size_t>(c0 + j) * a.out_stride) +
                 r0;
      }
      const uint8_t* x = a.x + static_cast<size_t>(c0) * a.x_stride;
      const float* d = dx + u * blocks * kTile;
      if (n == kTile) {
        column_tile<true>(scales, b_tiles, blocks, x, a.x_stride, d, n, out, keep);
      } else {
        column_tile<false>(scales, b_tiles, blocks, x, a.x_stride, d, n, out, keep);
      }
    }
  }
  _tile_release();
}

#undef TILE_C0
#undef TILE_C1
#undef TILE_A0
#undef TILE_A1
#undef TILE_B0
#undef TILE_B1

}  // namespace

void mat_q4_0_panel(const MatArgs& a) {
  if (a.cols < kMinCols) {
    avx512::mat_q4_0_panel(a);
  } else {
    gemm<PanelQ4_0>(a);
  }
}

void mat_iq4_nl_panel(const MatArgs& a) {
  if (a.cols < kMinCols) {
    avx512::mat_iq4_nl_panel(a);
  } else {
    gemm<PanelIQ4_NL>(a);
  }
}

void mat_q8_0_panel(const MatArgs& a) {
  if (a.cols < kMinCols) {
    avx512::mat_q8_0_panel(a);
  } else {
    gemm<PanelQ8_0>(a);
  }
}

}  // namespace tessera::cpu::amx
