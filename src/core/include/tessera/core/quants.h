// Block layouts of GGUF's quantized types, byte for byte as ggml lays them
// out, and the scalar reference (de)quantizers that faster kernels are tested
// against. Struct and field names follow ggml's so the two can be read side by
// side. 16-bit scales (`d`, `dmin`, `m`, `s`) are IEEE f16 bit patterns.
//
// `n` counts elements and must be a whole number of blocks (the callers in
// quants.cpp check); each function reads or writes n / block_size blocks.
#pragma once

#include <cstdint>

#include "tessera/core/dtype.h"

namespace tessera {

constexpr int kQK = 32;    // elements per legacy block (Q4_0 .. Q8_1)
constexpr int kQKK = 256;  // elements per K-quant super-block

// x = d * (q - 8), q a nibble. Element j in the low nibble of qs[j], j + 16 in the high.
struct block_q4_0 {
  uint16_t d;
  uint8_t qs[kQK / 2];
};
static_assert(sizeof(block_q4_0) == 18);

// x = d * q + m, q a nibble laid out as in Q4_0.
struct block_q4_1 {
  uint16_t d;
  uint16_t m;
  uint8_t qs[kQK / 2];
};
static_assert(sizeof(block_q4_1) == 20);

// x = d * (q - 16), q 5 bits: low 4 as in Q4_0, bit 4 of element j is bit j of
// qh (read as a little-endian uint32).
struct block_q5_0 {
  uint16_t d;
  uint8_t qh[4];
  uint8_t qs[kQK / 2];
};
static_assert(sizeof(block_q5_0) == 22);

// x = d * q + m, q 5 bits laid out as in Q5_0.
struct block_q5_1 {
  uint16_t d;
  uint16_t m;
  uint8_t qh[4];
  uint8_t qs[kQK / 2];
};
static_assert(sizeof(block_q5_1) == 24);

// x = d * q.
struct block_q8_0 {
  uint16_t d;
  int8_t qs[kQK];
};
static_assert(sizeof(block_q8_0) == 34);

// x = d * q; s = d * sum(q), used by dot-product kernels.
struct block_q8_1 {
  uint16_t d;
  uint16_t s;
  int8_t qs[kQK];
};
static_assert(sizeof(block_q8_1) == 36);

// 16 sub-blocks of 16: x = d * (sc & 15) * q - dmin * (sc >> 4), sc = scales[e / 16].
// q is 2 bits: element e = 128 h + 32 g + l sits at bits 2g of qs[32 h + l].
struct block_q2_K {
  uint8_t scales[kQKK / 16];
  uint8_t qs[kQKK / 4];
  uint16_t d;
  uint16_t dmin;
};
static_assert(sizeof(block_q2_K) == 84);

// 16 sub-blocks of 16: x = d * (sc - 32) * (q - 4 * !hbit), sc a 6-bit scale.
// Low 2 bits of q as in Q2_K; hbit of element e is bit e / 32 of hmask[e % 32].
// Scale j: low 4 bits in the low (j < 8) or high (j >= 8) nibble of scales[j % 8],
// high 2 bits at bit 2 (j / 4) of scales[8 + j % 4].
struct block_q3_K {
  uint8_t hmask[kQKK / 8];
  uint8_t qs[kQKK / 4];
  uint8_t scales[12];
  uint16_t d;
};
static_assert(sizeof(block_q3_K) == 110);

// 8 sub-blocks of 32: x = d * sc * q - dmin * m, with 6-bit sc and m packed in
// `scales` (see scale_min_k4). Element e = 64 c + 32 k + l is nibble k of qs[32 c + l].
struct block_q4_K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[12];
  uint8_t qs[kQKK / 2];
};
static_assert(sizeof(block_q4_K) == 144);

// As Q4_K with 5-bit q: bit 4 of element e = 64 c + 32 k + l is bit 2c + k of qh[l].
struct block_q5_K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[12];
  uint8_t qh[kQKK / 8];
  uint8_t qs[kQKK / 2];
};
static_assert(sizeof(block_q5_K) == 176);

// 16 sub-blocks of 16: x = d * scales[e / 16] * (q - 32), q 6 bits. Element
// e = 128 h + 32 g + l: low 4 bits in nibble g / 2 of ql[64 h + 32 (g % 2) + l],
// high 2 bits at bits 2g of qh[32 h + l].
struct block_q6_K {
  uint8_t ql[kQKK / 2];
  uint8_t qh[kQKK / 4];
  int8_t scales[kQKK / 16];
  uint16_t d;
};
static_assert(sizeof(block_q6_K) == 210);

// x = d * q with an f32 scale; bsums[i] = sum of qs[16 i .. 16 i + 15].
struct block_q8_K {
  float d;
  int8_t qs[kQKK];
  int16_t bsums[kQKK / 16];
};
static_assert(sizeof(block_q8_K) == 292);

// The 16 levels of the IQ4 types, a non-uniform grid denser near zero: code
// q (a nibble) stands for kvalues_iq4nl[q] times the block's scale.
inline constexpr int8_t kvalues_iq4nl[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                             1,    13,   25,  38,  53,  69,  89,  113};

// x = d * kvalues_iq4nl[q], q a nibble laid out as in Q4_0.
struct block_iq4_nl {
  uint16_t d;
  uint8_t qs[kQK / 2];
};
static_assert(sizeof(block_iq4_nl) == 18);

// MXFP4's 16 codes: e2m1 values (sign, then 0, 0.5, 1, 1.5, 2, 3, 4, 6)
// doubled, so each is an integer; the block scale halves them back.
inline constexpr int8_t kvalues_mxfp4[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

// x = e8m0_to_fp32_half(e) * kvalues_mxfp4[q], q a nibble laid out as in Q4_0.
struct block_mxfp4 {
  uint8_t e;  // E8M0: 2^(e - 127)
  uint8_t qs[kQK / 2];
};
static_assert(sizeof(block_mxfp4) == 17);

// Half of E8M0 exponent e's value, 2^(e - 128), exactly (ggml's
// GGML_E8M0_TO_FP32_HALF): the scale of the doubled codes.
float e8m0_to_fp32_half(uint8_t e);

// 8 sub-blocks of 32: x = d * (ls - 32) * kvalues_iq4nl[q], ls a 6-bit scale:
// low 4 bits of scale j in nibble j % 2 of scales_l[j / 2], high 2 bits at bits
// 2j of scales_h. Sub-block j's codes as in one IQ4_NL block at qs + 16 j.
struct block_iq4_xs {
  uint16_t d;
  uint16_t scales_h;
  uint8_t scales_l[kQKK / 64];
  uint8_t qs[kQKK / 2];
};
static_assert(sizeof(block_iq4_xs) == 136);

// Unpacks 6-bit scale and min j (0..7) of a Q4_K / Q5_K block: j < 4 sit in
// the low 6 bits of bytes j and j + 4; j >= 4 keep their low 4 bits in the
// nibbles of byte j + 4 and their top 2 bits in the top bits of bytes j - 4 and j.
inline void scale_min_k4(int j, const uint8_t* scales, uint8_t* sc, uint8_t* m) {
  if (j < 4) {
    *sc = scales[j] & 63;
    *m = scales[j + 4] & 63;
  } else {
    *sc = static_cast<uint8_t>((scales[j + 4] & 0xF) | ((scales[j - 4] >> 6) << 4));
    *m = static_cast<uint8_t>((scales[j + 4] >> 4) | ((scales[j] >> 6) << 4));
  }
}

void quantize_row_q4_0_ref(const float* x, block_q4_0* y, int64_t n);
void quantize_row_q4_1_ref(const float* x, block_q4_1* y, int64_t n);
void quantize_row_q5_0_ref(const float* x, block_q5_0* y, int64_t n);
void quantize_row_q5_1_ref(const float* x, block_q5_1* y, int64_t n);
void quantize_row_q8_0_ref(const float* x, block_q8_0* y, int64_t n);
// K-quants and IQ4 quantize as ggml does without an importance matrix, byte
// for byte (see quants_k_quantize.cpp, quants_iq4.cpp).
void quantize_row_q2_K_ref(const float* x, block_q2_K* y, int64_t n);
void quantize_row_q3_K_ref(const float* x, block_q3_K* y, int64_t n);
void quantize_row_q4_K_ref(const float* x, block_q4_K* y, int64_t n);
void quantize_row_q5_K_ref(const float* x, block_q5_K* y, int64_t n);
void quantize_row_q6_K_ref(const float* x, block_q6_K* y, int64_t n);
void quantize_row_iq4_nl_ref(const float* x, block_iq4_nl* y, int64_t n);
void quantize_row_iq4_xs_ref(const float* x, block_iq4_xs* y, int64_t n);
void quantize_row_mxfp4_ref(const float* x, block_mxfp4* y, int64_t n);

// With an importance matrix: `qw` holds one weight per element of the row (n
// floats, the same for every row of a tensor), as ggml's quantize_q*_K /
// quantize_iq4_* / quantize_q4_0 ... take it; bytes equal theirs.
void quantize_row_q2_K_weighted(const float* x, block_q2_K* y, int64_t n, const float* qw);
void quantize_row_q3_K_weighted(const float* x, block_q3_K* y, int64_t n, const float* qw);
void quantize_row_q4_K_weighted(const float* x, block_q4_K* y, int64_t n, const float* qw);
void quantize_row_q5_K_weighted(const float* x, block_q5_K* y, int64_t n, const float* qw);
void quantize_row_q6_K_weighted(const float* x, block_q6_K* y, int64_t n, const float* qw);
void quantize_row_iq4_nl_weighted(const float* x, block_iq4_nl* y, int64_t n, const float* qw);
void quantize_row_iq4_xs_weighted(const float* x, block_iq4_xs* y, int64_t n, const float* qw);
void quantize_row_q4_0_weighted(const float* x, block_q4_0* y, int64_t n, const float* qw);
void quantize_row_q4_1_weighted(const float* x, block_q4_1* y, int64_t n, const float* qw);
void quantize_row_q5_0_weighted(const float* x, block_q5_0* y, int64_t n, const float* qw);
void quantize_row_q5_1_weighted(const float* x, block_q5_1* y, int64_t n, const float* qw);

// quantize_row (tessera/dtype.h) weighting each column's error by
// `importance` (n floats, an importance-matrix row; null: quantize_row), as
// ggml does for the K, IQ4 and Q4_0 / Q4_1 / Q5_0 / Q5_1 types; others ignore it.
void quantize_row_weighted(DType type, const float* src, void* dst, int64_t n,
                           const float* importance);
void quantize_row_q8_K_ref(const float* x, block_q8_K* y, int64_t n);

void dequantize_row_q4_0_ref(const block_q4_0* x, float* y, int64_t n);
void dequantize_row_q4_1_ref(const block_q4_1* x, float* y, int64_t n);
void dequantize_row_q5_0_ref(const block_q5_0* x, float* y, int64_t n);
void dequantize_row_q5_1_ref(const block_q5_1* x, float* y, int64_t n);
void dequantize_row_q8_0_ref(const block_q8_0* x, float* y, int64_t n);
void dequantize_row_q2_K_ref(const block_q2_K* x, float* y, int64_t n);
void dequantize_row_q3_K_ref(const block_q3_K* x, float* y, int64_t n);
void dequantize_row_q4_K_ref(const block_q4_K* x, float* y, int64_t n);
void dequantize_row_q5_K_ref(const block_q5_K* x, float* y, int64_t n);
void dequantize_row_q6_K_ref(const block_q6_K* x, float* y, int64_t n);
void dequantize_row_q8_K_ref(const block_q8_K* x, float* y, int64_t n);
void dequantize_row_iq4_nl_ref(const block_iq4_nl* x, float* y, int64_t n);
void dequantize_row_iq4_xs_ref(const block_iq4_xs* x, float* y, int64_t n);
void dequantize_row_mxfp4_ref(const block_mxfp4* x, float* y, int64_t n);

}  // namespace tessera
