// The CPU kernel table: one struct of function pointers per ISA tier, filled
// in that tier's own translation units (built with its own flags) and chosen
// once per CpuDevice from its Isa. Ops call through the table; nothing below
// the table tests CPU features again.
//
// Matrix kernels share one shape: `rows` weight rows times `cols` activation
// columns, each output a dot product over k. A null entry means the tier has
// no fast kernel for that weight layout; MUL_MAT then runs its scalar
// reference (the ref tier leaves every matrix entry null).
#pragma once

#include <cstddef>
#include <cstdint>

#include "cpu/isa.h"
#include "tessera/core/quants.h"

namespace tessera::cpu {

// One 32-element block of quantized activations: x ~ d * qs, with the integer
// sum of qs kept so kernels can fold a weight offset (Q4_0's -8) or minimum
// (Q4_1's m) into one multiply per block (docs/cpu-kernels.md, "Activation blocks and offset
// folding"). qs and d are those of quantize_row_q8_0_ref, except that d stays f32 (fp32_to_fp16(d)
// is the reference's d).
struct BlockQ8 {
  float d;
  int32_t sum;
  int8_t qs[kQK];
  // Q4_0's -8 offset split as the avx2 panel kernels' 16-bit lanes meet the
  // activations: -8 x the sum of qs at k = 0, 1 (mod 4) and at k = 2, 3.
  // Each is at most 8 * 16 * 127 = 16256 in magnitude.
  int16_t q4_bias[2];
};
static_assert(sizeof(BlockQ8) == 44);

// Fills b.q4_bias from b.qs: what every quantize_q8 must store (the reference
// calls this; the SIMD tiers take the same sums from their vectors).
inline void set_q4_bias(BlockQ8& b) {
  int32_t lo = 0, hi = 0;
  for (int j = 0; j < kQK; j += 4) {
    lo += b.qs[j] + b.qs[j + 1];
    hi += b.qs[j + 2] + b.qs[j + 3];
  }
  b.q4_bias[0] = static_cast<int16_t>(-8 * lo);
  b.q4_bias[1] = static_cast<int16_t>(-8 * hi);
}

// What a matrix kernel reads its activation columns as. MUL_MAT converts the
// f32 input once per op into this format (in scratch) before the kernels run.
enum class ActFormat : uint8_t {
  kF32,  // the input rows as they are
  kQ8,   // BlockQ8 per 32 elements (quantize_q8)
  kQ8K,  // block_q8_K per 256 elements (quantize_q8_k)
  // f32, each batch's columns in groups of kActGroup (the last group of a
  // batch narrower: w = the columns left), each group k-major: element k of
  // its column c at [k * w + c]. A group of columns c0.. starts where column
  // c0 would in kF32 rows (k * 4 bytes per column), so column offsets and
  // strides are those of plain rows.
  kF32Groups,
};
inline constexpr int64_t kActGroup = 16;

// out(r, c) = sum over k of w(r, :) . x(c, :), for r < rows, c < cols.
struct MatArgs {
  int64_t k = 0;               // elements per row and column
  const uint8_t* w = nullptr;  // row 0 (GGUF row layouts) or panel 0 (panel layouts)
  size_t w_stride = 0;         // bytes between rows, or between 16-row panels
  int64_t rows = 0;            // panel layouts: the last panel may be partial
  const uint8_t* x = nullptr;  // column 0, in the kernel's ActFormat
  size_t x_stride = 0;         // bytes between columns
  int64_t cols = 0;
  float* out = nullptr;  // out(r, c) is out[r] of the column at byte c * out_stride
  size_t out_stride = 0;
};

struct MatKernel {
  void (*run)(const MatArgs& args) = nullptr;
  ActFormat act = ActFormat::kF32;
  // Rows and columns per GEMM chunk MUL_MAT hands the kernel (multiples of
  // 16); 0: its defaults.
  int64_t gemm_rows = 0;
  int64_t gemm_cols = 0;
  explicit operator bool() const { return run != nullptr; }
};

// FLASH_ATTN_EXT for `g` query rows sharing one f16 K/V head (no ALiBi, no
// softcap): out[i] = softmax(scale * q[i] . K + mask[i]) V, in blocks of up to
// kAttnBlock rows, each reading K and V once (scores, then max / exp / sum,
// then the V accumulation). Keys whose mask is -inf add
// nothing (a V row masked for all g rows is not read, so it may hold NaN); a
// row with every key masked is zeros.
constexpr int kAttnBlock = 8;
constexpr int64_t kAttnMaxD = 512;  // the largest q / k head size (d)
struct AttnArgs {
  int64_t d = 0, dv = 0, n_kv = 0;  // d <= kAttnMaxD
  int g = 0;
  const float* const* q = nullptr;     // g rows of d floats
  const float* const* mask = nullptr;  // g rows of n_kv floats, or null
  const uint8_t* k = nullptr;          // key 0, f16, contiguous rows of d
  size_t k_stride = 0;                 // bytes between keys
  const uint8_t* v = nullptr;          // value 0, f16, contiguous rows of dv
  size_t v_stride = 0;
  float scale = 1.0f;
  float* scores = nullptr;      // scratch: kAttnBlock * n_kv floats
  float* const* out = nullptr;  // g rows of dv floats
  // Optional, for keys split over threads: (max score, sum of exp(s - max))
  // of row i at lse[2i], lse[2i + 1], and out[i] left undivided by the sum.
  float* lse = nullptr;
};

// FLASH_ATTN_EXT for up to kAttnTileRows query rows sharing one f16 K/V head
// (no ALiBi, no softcap): a prompt's tokens times their GQA group, in tiles of
// kAttnTileKeys keys whose K and V rows are converted once for every row
// (x86/attn_tiles.h). tiles[t] says what the mask does in tile t:
// kSkip, -inf on every key for every row (the tile is not read); kPlain, 0
// everywhere (the mask is not read; also with no mask); kMasked, anything
// (read). A key masked for every row is not read in a masked tile either;
// a row with every key masked is zeros. Results agree with attn_f16's to
// rounding (one softmax pass per tile instead of one per row).
constexpr int kAttnTileKeys = 32;
constexpr int kAttnTileRows = 64;
constexpr int64_t kAttnTileAlign = 16;  // floats: rows and dv padded to this in scratch
inline constexpr int64_t attn_tile_round(int64_t n) {
  return (n + kAttnTileAlign - 1) / kAttnTileAlign * kAttnTileAlign;
}
enum class AttnTile : uint8_t { kSkip, kPlain, kMasked };
struct AttnTileArgs {
  int64_t d = 0, dv = 0, n_kv = 0;     // d, dv <= kAttnMaxD
  int rows = 0;                        // 1..kAttnTileRows
  const float* const* q = nullptr;     // rows of d floats
  const float* const* mask = nullptr;  // rows of n_kv floats (read in masked tiles only)
  const AttnTile* tiles = nullptr;     // ceil(n_kv / kAttnTileKeys) of them
  const uint8_t* k = nullptr;          // key 0, f16, contiguous rows of d
  size_t k_stride = 0;                 // bytes between keys
  const uint8_t* v = nullptr;          // value 0, f16, contiguous rows of dv
  size_t v_stride = 0;
  float scale = 1.0f;
  float* scratch = nullptr;     // attn_tile_floats(d, dv) floats, 64-byte aligned
  float* const* out = nullptr;  // rows of dv floats
};
// The scratch of one attn_f16_tiles call, in floats from its start (what
// each part holds: x86/attn_tiles.h); d and dv padded to dp and dvp.
struct AttnTileLayout {
  int64_t dp, dvp;
  int64_t qt, kc, vc, p, mt, o, m, l, f;  // offsets
  int64_t total;
};
inline constexpr AttnTileLayout attn_tile_layout(int64_t d, int64_t dv) {
  AttnTileLayout t{};
  t.dp = attn_tile_round(d);
  t.dvp = attn_tile_round(dv);
  int64_t at = 0;
  const auto take = [&at](int64_t n) {
    const int64_t start = at;
    at += n;
    return start;
  };
  t.qt = take(t.dp * kAttnTileRows);
  t.kc = take(kAttnTileKeys * t.dp);
  t.vc = take(kAttnTileKeys * t.dvp);
  t.p = take(kAttnTileKeys * kAttnTileRows);
  t.mt = take(kAttnTileKeys * kAttnTileRows);
  t.o = take(kAttnTileRows * t.dvp);
  t.m = take(kAttnTileRows);
  t.l = take(kAttnTileRows);
  t.f = take(kAttnTileRows);
  t.total = at;
  return t;
}
inline constexpr size_t attn_tile_floats(int64_t d, int64_t dv) {
  return static_cast<size_t>(attn_tile_layout(d, dv).total);
}

struct Kernels {
  Isa isa = Isa::kRef;
  // Activation quantizers for one row of k floats (k a multiple of 32 / 256);
  // bit-exact with the ref tier's on every input (finite or not).
  void (*quantize_q8)(const float* x, BlockQ8* y, int64_t k) = nullptr;
  void (*quantize_q8_k)(const float* x, block_q8_K* y, int64_t k) = nullptr;
  // f32 -> f16 of a row, bit-exact with fp32_to_fp16; null: the scalar loop.
  void (*to_f16)(const float* x, uint16_t* y, int64_t n) = nullptr;

  // Weights in GGUF row layout (any buffer).
  MatKernel f32, f16, bf16;
  MatKernel q4_0, q4_1, q5_0, q5_1, q8_0;
  MatKernel q4_k, q6_k;
  // Weights repacked into 16-row panels by the CPU weights buffer (repack.h).
  MatKernel q4_0_panel, q8_0_panel, iq4_nl_panel, mxfp4_panel, f16_panel;
  MatKernel q2_k_panel, q3_k_panel, q4_k_panel, q5_k_panel, q6_k_panel,
      iq4_xs_panel;  // Q8_K activations

  // Null in the ref tier: FLASH_ATTN_EXT runs its scalar reference.
  void (*attn_f16)(const AttnArgs& args) = nullptr;
  // Null where attn_f16 is: FLASH_ATTN_EXT then runs its rows per token.
  void (*attn_f16_tiles)(const AttnTileArgs& args) = nullptr;
  // RMS_NORM of one contiguous f32 row (y may be x); null: the scalar reference.
  void (*rms_norm)(const float* x, float* y, int64_t n, float eps) = nullptr;
  // SOFT_MAX's exponentials: y = exp(x - max) for x <= max (y may be x; NaN
  // stays NaN), returning their sum; null: std::exp.
  float (*exp_sum)(const float* x, float* y, int64_t n, float max) = nullptr;
  // SWIGLU of contiguous f32 rows: y = silu(g) * u (y may be g or u), to a
  // few ulp of the scalar formula; null: the scalar formula.
  void (*silu_mul)(const float* g, const float* u, float* y, int64_t n) = nullptr;
  // GELU of a contiguous f32 row (y may be x), the tanh form as the ops'
  // scalar gelu writes it (x / (1 + exp(-2z))), to a few ulp of it; null:
  // the scalar formula.
  void (*gelu)(const float* x, float* y, int64_t n) = nullptr;
};

// The table of `isa` (every tier is always built; the caller checks that this
// CPU can run it, see supported_isas()).
const Kernels& kernels_for(Isa isa);

// Scalar references: the ref tier's quantizers, and the oracle the other tiers
// are tested against bit for bit. quantize_q8_k_ref is quantize_row_q8_K_ref.
void quantize_q8_ref(const float* x, BlockQ8* y, int64_t k);
void quantize_q8_k_ref(const float* x, block_q8_K* y, int64_t k);

}  // namespace tessera::cpu
