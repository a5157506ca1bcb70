// Block formats: hand-built blocks decode to the values the format defines
// (blocks are assembled here, field by field, from the layout description, and
// spot values are worked out by hand); quantizers round-trip random rows within
// error bounds derived from the arithmetic; dispatch errors.
#include "tessera/core/quants.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <vector>

#include "tessera/core/dtype.h"
#include "tessera/core/error.h"
#include "tessera/core/half.h"

namespace tessera {
namespace {

constexpr uint16_t kF16One = 0x3c00, kF16Half = 0x3800, kF16Quarter = 0x3400;
constexpr uint16_t kF16Two = 0x4000, kF16MinusOne = 0xbc00;

template <class Block>
std::vector<float> decode(DType type, const Block& block) {
  std::vector<float> out(static_cast<size_t>(dtype_info(type).block_size));
  dequantize_row(type, &block, out.data(), static_cast<int64_t>(out.size()));
  return out;
}

template <class Block>
Block zero_block() {
  Block b;
  std::memset(&b, 0, sizeof b);
  return b;
}

// ---- hand-built blocks: legacy types ----

TEST(QuantsDecode, Q4_0) {
  auto b = zero_block<block_q4_0>();
  b.d = kF16Half;
  for (int j = 0; j < 16; ++j) b.qs[j] = static_cast<uint8_t>(j | ((15 - j) << 4));
  const auto y = decode(DType::kQ4_0, b);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[j], 0.5f * static_cast<float>(j - 8)) << j;       // low nibble, minus 8
    EXPECT_EQ(y[j + 16], 0.5f * static_cast<float>(7 - j)) << j;  // high nibble, minus 8
  }
  EXPECT_EQ(y[0], -4.0f);
  EXPECT_EQ(y[15], 3.5f);
  EXPECT_EQ(y[31], -4.0f);
}

TEST(QuantsDecode, Q4_1) {
  auto b = zero_block<block_q4_1>();
  b.d = kF16Quarter;
  b.m = kF16MinusOne;
  for (int j = 0; j < 16; ++j) b.qs[j] = static_cast<uint8_t>(((7 * j) & 15) | (j << 4));
  const auto y = decode(DType::kQ4_1, b);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[j], 0.25f * static_cast<float>((7 * j) & 15) - 1.0f) << j;
    EXPECT_EQ(y[j + 16], 0.25f * static_cast<float>(j) - 1.0f) << j;
  }
  EXPECT_EQ(y[1], 0.75f);   // 7 * 0.25 - 1
  EXPECT_EQ(y[31], 2.75f);  // 15 * 0.25 - 1
}

// 5th bit of element j is bit j of qh read as a little-endian 32-bit word.
int qh_bit(const uint8_t* qh, int j) {
  return (qh[j / 8] >> (j % 8)) & 1;
}

TEST(QuantsDecode, Q5_0) {
  auto b = zero_block<block_q5_0>();
  b.d = kF16One;
  const uint8_t qh[4] = {0x0F, 0xF0, 0xA5, 0x5A};
  std::memcpy(b.qh, qh, 4);
  for (int j = 0; j < 16; ++j) b.qs[j] = static_cast<uint8_t>(j | ((15 - j) << 4));
  const auto y = decode(DType::kQ5_0, b);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[j], static_cast<float>((j | (qh_bit(qh, j) << 4)) - 16)) << j;
    EXPECT_EQ(y[j + 16], static_cast<float>(((15 - j) | (qh_bit(qh, j + 16) << 4)) - 16)) << j;
  }
  EXPECT_EQ(y[0], 0.0f);     // low 0, qh bit 0 set: 16 - 16
  EXPECT_EQ(y[4], -12.0f);   // low 4, qh bit 4 clear
  EXPECT_EQ(y[12], 12.0f);   // low 12, qh bit 12 set (0xF0): 28 - 16
  EXPECT_EQ(y[16], 15.0f);   // high 15, qh bit 16 set (0xA5 bit 0)
  EXPECT_EQ(y[31], -16.0f);  // high 0, qh bit 31 clear (0x5A bit 7)
}

TEST(QuantsDecode, Q5_1) {
  auto b = zero_block<block_q5_1>();
  b.d = kF16Half;
  b.m = kF16Two;
  const uint8_t qh[4] = {0x81, 0x00, 0xFF, 0x3C};
  std::memcpy(b.qh, qh, 4);
  for (int j = 0; j < 16; ++j) b.qs[j] = static_cast<uint8_t>((15 - j) | (j << 4));
  const auto y = decode(DType::kQ5_1, b);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[j], 0.5f * static_cast<float>((15 - j) | (qh_bit(qh, j) << 4)) + 2.0f) << j;
    EXPECT_EQ(y[j + 16], 0.5f * static_cast<float>(j | (qh_bit(qh, j + 16) << 4)) + 2.0f) << j;
  }
  EXPECT_EQ(y[0], 17.5f);   // (15 + 16) * 0.5 + 2
  EXPECT_EQ(y[1], 9.0f);    // 14 * 0.5 + 2
  EXPECT_EQ(y[16], 10.0f);  // (0 + 16) * 0.5 + 2
}

TEST(QuantsDecode, Q8_0) {
  auto b = zero_block<block_q8_0>();
  b.d = kF16Quarter;
  for (int j = 0; j < 32; ++j) b.qs[j] = static_cast<int8_t>(8 * j - 128 + (j % 3));
  const auto y = decode(DType::kQ8_0, b);
  for (int j = 0; j < 32; ++j) EXPECT_EQ(y[j], 0.25f * static_cast<float>(8 * j - 128 + j % 3));
  EXPECT_EQ(y[0], -32.0f);
  EXPECT_EQ(y[31], 30.25f);  // (248 - 128 + 1) / 4
}

// ---- hand-built blocks: K-quants. Element e, sub-block e / 16 or e / 32. ----

// 2-bit field of element e for Q2_K / Q3_K: bits 2 ((e / 32) % 4) of qs[32 (e / 128) + e % 32].
void put_crumb(uint8_t* qs, int e, int v) {
  qs[32 * (e / 128) + e % 32] |= static_cast<uint8_t>(v << (2 * ((e / 32) % 4)));
}

TEST(QuantsDecode, Q2_K) {
  auto b = zero_block<block_q2_K>();
  b.d = kF16Half;
  b.dmin = kF16Quarter;
  for (int j = 0; j < 16; ++j) b.scales[j] = static_cast<uint8_t>(j | ((15 - j) << 4));
  auto code = [](int e) { return (5 * e + e / 7) & 3; };
  for (int e = 0; e < 256; ++e) put_crumb(b.qs, e, code(e));
  const auto y = decode(DType::kQ2_K, b);
  for (int e = 0; e < 256; ++e) {
    const int j = e / 16;
    EXPECT_EQ(y[e], 0.5f * static_cast<float>(j * code(e)) - 0.25f * static_cast<float>(15 - j));
  }
  // Literal: qs[1] holds elements 1, 33, 65, 97.
  auto c = zero_block<block_q2_K>();
  c.d = kF16One;
  c.dmin = kF16One;
  c.scales[0] = 0x13;  // sub-block 0: scale 3, min 1
  c.scales[2] = 0x02;  // sub-block 2 (elements 32..47): scale 2, min 0
  c.scales[6] = 0x51;  // sub-block 6 (elements 96..111): scale 1, min 5
  c.qs[1] = 0b11'00'10'11;
  const auto z = decode(DType::kQ2_K, c);
  EXPECT_EQ(z[1], 8.0f);    // 3 * 3 - 1
  EXPECT_EQ(z[33], 4.0f);   // 2 * 2
  EXPECT_EQ(z[65], 0.0f);   // scale 0, min 0
  EXPECT_EQ(z[97], -2.0f);  // 1 * 3 - 5
  EXPECT_EQ(z[0], -1.0f);   // code 0 - min 1
}

TEST(QuantsDecode, Q3_K) {
  auto b = zero_block<block_q3_K>();
  b.d = kF16Half;
  auto raw_scale = [](int j) { return 32 + 3 * (j - 8); };  // 8..53, stored with +32
  for (int j = 0; j < 16; ++j) {
    const int s = raw_scale(j);
    b.scales[j % 8] |= static_cast<uint8_t>((s & 0xF) << (j < 8 ? 0 : 4));
    b.scales[8 + j % 4] |= static_cast<uint8_t>((s >> 4) << (2 * (j / 4)));
  }
  auto q = [](int e) { return ((3 * e + e / 5) % 8) - 4; };  // -4..3
  for (int e = 0; e < 256; ++e) {
    put_crumb(b.qs, e, (q(e) + 4) & 3);
    b.hmask[e % 32] |= static_cast<uint8_t>(((q(e) + 4) >> 2) << (e / 32));
  }
  const auto y = decode(DType::kQ3_K, b);
  for (int e = 0; e < 256; ++e) {
    EXPECT_EQ(y[e], 0.5f * static_cast<float>((raw_scale(e / 16) - 32) * q(e))) << e;
  }
  // Literal: all-zero fields mean scale 0 - 32 and q = 0 - 4 everywhere.
  auto c = zero_block<block_q3_K>();
  c.d = kF16One;
  c.hmask[0] = 0x01;    // element 0: high bit set, q = 0
  c.hmask[5] = 0x80;    // element 229: q = 0
  c.qs[37] = 0x0C;      // element 128 + 5 + 32: low bits 3, high bit clear: q = -1
  c.scales[8] = 0x02;   // scale 0 gets high bits 2: 32 - 32 = 0 for elements 0..15
  c.scales[11] = 0x40;  // scale 15 gets high bits 1: 16 - 32 = -16 for elements 240..255
  const auto z = decode(DType::kQ3_K, c);
  EXPECT_EQ(z[0], 0.0f);
  EXPECT_EQ(z[15], 0.0f);
  EXPECT_EQ(z[16], 128.0f);  // -32 * -4
  EXPECT_EQ(z[165], 32.0f);  // -32 * -1
  EXPECT_EQ(z[229], -0.0f);
  EXPECT_EQ(z[255], 64.0f);  // -16 * -4
}

// Packs 6-bit scales and mins of Q4_K / Q5_K as the format lays them out:
// bytes 0-3 and 4-7 hold sc0-3 and m0-3 in their low 6 bits and the top 2 bits
// of sc4-7 and m4-7 in their top 2; bytes 8-11 hold the low nibbles of sc4-7
// (low) and m4-7 (high).
void pack_k4(uint8_t* out, const int* sc, const int* m) {
  for (int j = 0; j < 4; ++j) {
    out[j] = static_cast<uint8_t>(sc[j] | ((sc[j + 4] >> 4) << 6));
    out[j + 4] = static_cast<uint8_t>(m[j] | ((m[j + 4] >> 4) << 6));
    out[j + 8] = static_cast<uint8_t>((sc[j + 4] & 0xF) | ((m[j + 4] & 0xF) << 4));
  }
}

TEST(QuantsDecode, Q4_K) {
  auto b = zero_block<block_q4_K>();
  b.d = kF16Half;
  b.dmin = kF16One;
  int sc[8], m[8];
  for (int j = 0; j < 8; ++j) sc[j] = 10 + 7 * j, m[j] = 63 - 5 * j;
  pack_k4(b.scales, sc, m);
  auto q = [](int e) { return (7 * e + e / 9) & 15; };
  for (int e = 0; e < 256; ++e) {  // nibble (e / 32) % 2 of qs[32 (e / 64) + e % 32]
    b.qs[32 * (e / 64) + e % 32] |= static_cast<uint8_t>(q(e) << (4 * ((e / 32) % 2)));
  }
  const auto y = decode(DType::kQ4_K, b);
  for (int e = 0; e < 256; ++e) {
    const int j = e / 32;
    EXPECT_EQ(y[e], 0.5f * static_cast<float>(sc[j]) * static_cast<float>(q(e)) -
                        static_cast<float>(m[j]))
        << e;
  }
  auto c = zero_block<block_q4_K>();
  c.d = kF16One;
  c.dmin = kF16One;
  c.scales[0] = 0x40 | 3;  // sc0 = 3; top bits of sc4 = 1
  c.scales[5] = 0x80 | 2;  // m1 = 2; top bits of m5 = 2
  c.scales[8] = 0x02;      // sc4 = 16 + 2 = 18
  c.scales[9] = 0x70;      // m5 = 32 + 7 = 39
  c.qs[0] = 0x5A;          // element 0: 10, element 32: 5
  c.qs[64] = 0x31;         // element 128: 1, element 160: 3
  const auto z = decode(DType::kQ4_K, c);
  EXPECT_EQ(z[0], 30.0f);     // 3 * 10
  EXPECT_EQ(z[32], -2.0f);    // 0 * 5 - 2
  EXPECT_EQ(z[128], 18.0f);   // 18 * 1
  EXPECT_EQ(z[160], -39.0f);  // 0 * 3 - 39
}

TEST(QuantsDecode, Q5_K) {
  auto b = zero_block<block_q5_K>();
  b.d = kF16Quarter;
  b.dmin = kF16Half;
  int sc[8], m[8];
  for (int j = 0; j < 8; ++j) sc[j] = 63 - 6 * j, m[j] = 4 + 8 * j;
  pack_k4(b.scales, sc, m);
  auto q = [](int e) { return (11 * e + e / 3) & 31; };
  for (int e = 0; e < 256; ++e) {  // low 4 bits as Q4_K; bit 4 is bit e / 32 of qh[e % 32]
    b.qs[32 * (e / 64) + e % 32] |= static_cast<uint8_t>((q(e) & 15) << (4 * ((e / 32) % 2)));
    b.qh[e % 32] |= static_cast<uint8_t>((q(e) >> 4) << (e / 32));
  }
  const auto y = decode(DType::kQ5_K, b);
  for (int e = 0; e < 256; ++e) {
    const int j = e / 32;
    EXPECT_EQ(y[e], 0.25f * static_cast<float>(sc[j]) * static_cast<float>(q(e)) -
                        0.5f * static_cast<float>(m[j]))
        << e;
  }
  auto c = zero_block<block_q5_K>();
  c.d = kF16One;
  c.scales[3] = 1;      // sc3 = 1: elements 96..127
  c.qs[32 + 1] = 0x70;  // element 97 (sub-block 3, high nibble): low bits 7
  c.qh[1] = 0x08;       // bit 3: element 97 gets +16
  const auto z = decode(DType::kQ5_K, c);
  EXPECT_EQ(z[97], 23.0f);
  EXPECT_EQ(z[96], 0.0f);
}

TEST(QuantsDecode, Q6_K) {
  auto b = zero_block<block_q6_K>();
  b.d = kF16Quarter;
  for (int j = 0; j < 16; ++j) b.scales[j] = static_cast<int8_t>(16 * j - 120);
  auto q = [](int e) { return ((13 * e + e / 11) % 64) - 32; };  // -32..31
  for (int e = 0; e < 256; ++e) {
    // Element e = 128 h + 32 g + l: low nibble g / 2 of ql[64 h + 32 (g % 2) + l],
    // high 2 bits at 2 g of qh[32 h + l].
    const int h = e / 128, g = (e / 32) % 4, l = e % 32, code = q(e) + 32;
    b.ql[64 * h + 32 * (g % 2) + l] |= static_cast<uint8_t>((code & 15) << (4 * (g / 2)));
    b.qh[32 * h + l] |= static_cast<uint8_t>((code >> 4) << (2 * g));
  }
  const auto y = decode(DType::kQ6_K, b);
  for (int e = 0; e < 256; ++e) {
    EXPECT_EQ(y[e], 0.25f * static_cast<float>(b.scales[e / 16] * q(e))) << e;
  }
  auto c = zero_block<block_q6_K>();
  c.d = kF16One;
  c.scales[0] = 1;
  c.scales[2] = -2;
  c.scales[4] = 3;
  c.ql[0] = 0x21;  // element 0: low 1; element 64: low 2
  c.qh[0] = 0x0C;  // element 32: high 3
  const auto z = decode(DType::kQ6_K, c);
  EXPECT_EQ(z[0], -31.0f);   // 1 * (1 - 32)
  EXPECT_EQ(z[1], -32.0f);   // 1 * (0 - 32)
  EXPECT_EQ(z[32], -32.0f);  // -2 * (48 - 32)
  EXPECT_EQ(z[64], -90.0f);  // 3 * (2 - 32)
  EXPECT_EQ(z[16], -0.0f);   // scale 0
}

// IQ4_NL: nibble q indexes the fixed table; element j low nibble of qs[j], j + 16 high.
TEST(QuantsDecode, IQ4_NL) {
  auto b = zero_block<block_iq4_nl>();
  b.d = kF16Quarter;
  for (int j = 0; j < 16; ++j) b.qs[j] = static_cast<uint8_t>(j | (((5 * j + 3) & 15) << 4));
  const auto y = decode(DType::kIQ4_NL, b);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[j], 0.25f * static_cast<float>(kvalues_iq4nl[j])) << j;
    EXPECT_EQ(y[j + 16], 0.25f * static_cast<float>(kvalues_iq4nl[(5 * j + 3) & 15])) << j;
  }
  EXPECT_EQ(y[0], -31.75f);   // -127 / 4
  EXPECT_EQ(y[15], 28.25f);   // 113 / 4
  EXPECT_EQ(y[16], -16.25f);  // code 3: -65 / 4
  EXPECT_EQ(y[8], 0.25f);     // code 8: 1 / 4, the table has no zero
}

// MXFP4: nibble q indexes the doubled e2m1 codes, scaled by 2^(e - 128);
// element j low nibble of qs[j], j + 16 high. E8M0's ends: 2^-128 (subnormal) and 2^127.
TEST(QuantsDecode, MXFP4) {
  auto b = zero_block<block_mxfp4>();
  b.e = 126;
  for (int j = 0; j < 16; ++j) b.qs[j] = static_cast<uint8_t>(j | (((7 * j + 5) & 15) << 4));
  const auto y = decode(DType::kMXFP4, b);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[j], 0.25f * static_cast<float>(kvalues_mxfp4[j])) << j;
    EXPECT_EQ(y[j + 16], 0.25f * static_cast<float>(kvalues_mxfp4[(7 * j + 5) & 15])) << j;
  }
  EXPECT_EQ(y[7], 3.0f);    // e2m1 6 at 2^(126 - 127)
  EXPECT_EQ(y[15], -3.0f);  // code 15: -6
  EXPECT_EQ(e8m0_to_fp32_half(0), std::ldexp(1.0f, -128));
  EXPECT_EQ(e8m0_to_fp32_half(1), std::ldexp(1.0f, -127));
  EXPECT_EQ(e8m0_to_fp32_half(2), std::ldexp(1.0f, -126));
  EXPECT_EQ(e8m0_to_fp32_half(128), 1.0f);
  EXPECT_EQ(e8m0_to_fp32_half(255), std::ldexp(1.0f, 127));
}

// IQ4_XS: 6-bit scale of sub-block j from nibble j % 2 of scales_l[j / 2] and
// bits 2j of scales_h, minus 32; codes per sub-block as one IQ4_NL block.
TEST(QuantsDecode, IQ4_XS) {
  auto b = zero_block<block_iq4_xs>();
  b.d = kF16Half;
  const int ls[8] = {0, 63, 32, 33, 31, 17, 48, 5};
  for (int j = 0; j < 8; ++j) {
    b.scales_l[j / 2] |= static_cast<uint8_t>((ls[j] & 15) << (4 * (j % 2)));
    b.scales_h = static_cast<uint16_t>(b.scales_h | ((ls[j] >> 4) << (2 * j)));
  }
  auto q = [](int e) { return (7 * e + e / 19) & 15; };
  for (int e = 0; e < 256; ++e) {
    const int j = e / 32, l = e % 32;
    b.qs[16 * j + l % 16] |= static_cast<uint8_t>(q(e) << (4 * (l / 16)));
  }
  const auto y = decode(DType::kIQ4_XS, b);
  for (int e = 0; e < 256; ++e) {
    const float dl = 0.5f * static_cast<float>(ls[e / 32] - 32);
    EXPECT_EQ(y[e], dl * static_cast<float>(kvalues_iq4nl[q(e)])) << e;
  }
  EXPECT_EQ(y[0], 2032.0f);      // scale 0 - 32 = -32, code 0: -16 * -127
  EXPECT_EQ(y[64], 0.0f);        // scale 32: zero
  EXPECT_EQ(y[32], 15.5f * -104.0f);  // element 32: code (224 + 1) & 15 = 1, scale 31 * 0.5
}

TEST(QuantsDecode, Q8_K) {
  auto b = zero_block<block_q8_K>();
  b.d = 0.375f;
  for (int e = 0; e < 256; ++e) b.qs[e] = static_cast<int8_t>(e - 128);
  const auto y = decode(DType::kQ8_K, b);
  for (int e = 0; e < 256; ++e) EXPECT_EQ(y[e], 0.375f * static_cast<float>(e - 128)) << e;
  EXPECT_EQ(y[0], -48.0f);
}

// ---- round trips through quantize_row / dequantize_row ----

uint32_t fresh_seed() {
  return std::random_device{}();
}

// n values in [-1, 1]; each block of `block` values scaled by 10^U(-2, 2), so
// blocks differ in magnitude by up to 10^4; block 1 (of 3 or more) is all +0.
std::vector<float> random_row(std::mt19937& rng, int64_t n, int64_t block) {
  std::uniform_real_distribution<float> value(-1.0f, 1.0f), exponent(-2.0f, 2.0f);
  std::vector<float> x(static_cast<size_t>(n));
  for (int64_t b = 0; b < n / block; ++b) {
    const float scale = (b == 1 && n / block >= 3) ? 0.0f : std::pow(10.0f, exponent(rng));
    for (int64_t i = 0; i < block; ++i)
      x[b * block + i] = scale == 0.0f ? 0.0f : scale * value(rng);
  }
  return x;
}

struct RoundTrip {
  std::vector<float> x, y;
  std::vector<uint8_t> bytes;
};

// Quantizes random rows of each size (several rows each), dequantizes them and
// calls check(trip, block_index) for every block.
void for_each_round_trip(DType type, const std::vector<int64_t>& sizes,
                         const std::function<void(const RoundTrip&, int64_t)>& check) {
  const uint32_t seed = fresh_seed();
  SCOPED_TRACE(testing::Message() << dtype_name(type) << " seed " << seed);
  std::mt19937 rng(seed);
  const int64_t block = dtype_info(type).block_size;
  for (int64_t n : sizes) {
    for (int row = 0; row < 3; ++row) {
      SCOPED_TRACE(testing::Message() << "n " << n << " row " << row);
      RoundTrip t;
      t.x = random_row(rng, n, block);
      t.bytes.assign(*row_bytes(type, n), 0xCD);
      t.y.assign(static_cast<size_t>(n), NAN);
      quantize_row(type, t.x.data(), t.bytes.data(), n);
      dequantize_row(type, t.bytes.data(), t.y.data(), n);
      for (int64_t b = 0; b < n / block; ++b) check(t, b);
      if (::testing::Test::HasFailure()) return;
    }
  }
}

template <class Block>
Block block_at(const RoundTrip& t, int64_t b) {
  Block out;
  std::memcpy(&out, t.bytes.data() + b * sizeof(Block), sizeof(Block));
  return out;
}

float signed_absmax(const float* x, int n) {
  float max = 0.0f;
  for (int i = 0; i < n; ++i) {
    if (std::fabs(x[i]) > std::fabs(max)) max = x[i];
  }
  return max;
}

float rounded_f16(float v) {
  return fp16_to_fp32(fp32_to_fp16(v));
}
double f16_error(float v) {
  return std::fabs(static_cast<double>(v) - rounded_f16(v));
}

// Symmetric types (Q4_0: nmax 8, Q5_0: 16): d = max / -nmax with max the signed
// value of largest magnitude, so t = x / d lies in [-nmax, nmax] and the code
// is round(t) in [-nmax, nmax - 1]. Per element: |err| <= |d| / 2 from rounding,
// or t - (nmax - 1) steps where t > nmax - 0.5 is clamped (at most one step);
// plus |q| <= nmax times the f16 rounding of d; plus float slack.
template <class Block>
void check_symmetric(const RoundTrip& t, int64_t b, int nmax) {
  const float* x = t.x.data() + b * kQK;
  const float* y = t.y.data() + b * kQK;
  const float d = signed_absmax(x, kQK) / static_cast<float>(-nmax);
  ASSERT_EQ(fp16_to_fp32(block_at<Block>(t, b).d), rounded_f16(d)) << "block " << b;
  for (int j = 0; j < kQK; ++j) {
    const double ad = std::fabs(d), tj = d != 0.0f ? x[j] / static_cast<double>(d) : 0.0;
    const double bound =
        (tj > nmax - 0.5 ? (tj - (nmax - 1)) * ad : 0.5 * ad) + nmax * f16_error(d) + 1e-5 * ad;
    ASSERT_LE(std::fabs(y[j] - x[j]), bound) << "block " << b << " element " << j;
  }
}

// Min/max types (Q4_1: nmax 15, Q5_1: 31): d = (max - min) / nmax, m = min, so
// (x - min) / d lies in [0, nmax] and rounding errs by <= d / 2; plus nmax
// times the f16 rounding of d and the f16 rounding of m; plus float slack.
template <class Block>
void check_min_max(const RoundTrip& t, int64_t b, int nmax) {
  const float* x = t.x.data() + b * kQK;
  const float* y = t.y.data() + b * kQK;
  float min = x[0], max = x[0];
  for (int j = 0; j < kQK; ++j) min = std::fmin(min, x[j]), max = std::fmax(max, x[j]);
  const float d = (max - min) / static_cast<float>(nmax);
  // Compared as values, so that -0 and +0 scales agree.
  ASSERT_EQ(fp16_to_fp32(block_at<Block>(t, b).d), rounded_f16(d)) << "block " << b;
  ASSERT_EQ(fp16_to_fp32(block_at<Block>(t, b).m), rounded_f16(min)) << "block " << b;
  const double bound = 0.5 * d + nmax * f16_error(d) + f16_error(min) + 1e-5 * (d + std::fabs(min));
  for (int j = 0; j < kQK; ++j) {
    ASSERT_LE(std::fabs(y[j] - x[j]), bound) << "block " << b << " element " << j;
  }
}

const std::vector<int64_t> kLegacySizes = {32, 96, 160, 4096};
const std::vector<int64_t> kSuperSizes = {256, 768, 2560};

TEST(QuantsRoundTrip, Q4_0) {
  for_each_round_trip(DType::kQ4_0, kLegacySizes,
                      [](const RoundTrip& t, int64_t b) { check_symmetric<block_q4_0>(t, b, 8); });
}

TEST(QuantsRoundTrip, Q5_0) {
  for_each_round_trip(DType::kQ5_0, kLegacySizes,
                      [](const RoundTrip& t, int64_t b) { check_symmetric<block_q5_0>(t, b, 16); });
}

TEST(QuantsRoundTrip, Q4_1) {
  for_each_round_trip(DType::kQ4_1, kLegacySizes,
                      [](const RoundTrip& t, int64_t b) { check_min_max<block_q4_1>(t, b, 15); });
}

TEST(QuantsRoundTrip, Q5_1) {
  for_each_round_trip(DType::kQ5_1, kLegacySizes,
                      [](const RoundTrip& t, int64_t b) { check_min_max<block_q5_1>(t, b, 31); });
}

// Q8_0: d = amax / 127 and q = round(x / d) in [-127, 127]: |err| <= d / 2 plus
// 127 times the f16 rounding of d, plus float slack.
TEST(QuantsRoundTrip, Q8_0) {
  for_each_round_trip(DType::kQ8_0, kLegacySizes, [](const RoundTrip& t, int64_t b) {
    const float* x = t.x.data() + b * kQK;
    const float d = std::fabs(signed_absmax(x, kQK)) / 127.0f;
    ASSERT_EQ(fp16_to_fp32(block_at<block_q8_0>(t, b).d), rounded_f16(d)) << "block " << b;
    const double bound = 0.5 * d + 127 * f16_error(d) + 1e-5 * d;
    for (int j = 0; j < kQK; ++j) {
      ASSERT_LE(std::fabs(t.y[b * kQK + j] - x[j]), bound) << "block " << b << " element " << j;
    }
  });
}

// Q8_K: f32 d = max / -127 (no f16 rounding), q = round(x / d): |err| <= |d| / 2.
// bsums hold the sums of each 16 codes.
TEST(QuantsRoundTrip, Q8_K) {
  for_each_round_trip(DType::kQ8_K, kSuperSizes, [](const RoundTrip& t, int64_t b) {
    const float* x = t.x.data() + b * kQKK;
    const auto blk = block_at<block_q8_K>(t, b);
    const float d = signed_absmax(x, kQKK) / -127.0f;
    ASSERT_NEAR(blk.d, d, 1e-6 * std::fabs(d)) << "block " << b;
    for (int j = 0; j < 16; ++j) {
      int sum = 0;
      for (int l = 0; l < 16; ++l) sum += blk.qs[16 * j + l];
      ASSERT_EQ(blk.bsums[j], sum) << "block " << b << " group " << j;
    }
    for (int e = 0; e < kQKK; ++e) {
      ASSERT_LE(std::fabs(t.y[b * kQKK + e] - x[e]), (0.5 + 1e-5) * std::fabs(d)) << e;
    }
  });
}

// K-quants and IQ4 with sub-block scales: RMSE of each block relative to its
// RMS. For U[-a, a] data (RMS a / sqrt 3) rounding to a step h errs uniformly
// on [-h/2, h/2], RMS h / sqrt 12. Bounds below leave room for the 4-, 6- or
// 8-bit rounding of the sub-block scales and for sampling noise over the block.
// Measured figures: 2000 super-blocks of U[-s, s], s log-uniform in 1e-2..1e2.
void check_rmse(const RoundTrip& t, int64_t b, int block, double max_ratio, double max_abs_steps) {
  const float* x = t.x.data() + b * block;
  const float* y = t.y.data() + b * block;
  double err2 = 0, x2 = 0, amax = 0, max_err = 0;
  for (int e = 0; e < block; ++e) {
    err2 += (y[e] - x[e]) * static_cast<double>(y[e] - x[e]);
    x2 += x[e] * static_cast<double>(x[e]);
    amax = std::fmax(amax, std::fabs(x[e]));
    max_err = std::fmax(max_err, std::fabs(y[e] - x[e]));
  }
  if (x2 == 0) {
    ASSERT_EQ(err2, 0.0) << "block " << b;
    return;
  }
  EXPECT_LE(std::sqrt(err2 / x2), max_ratio) << "block " << b;
  EXPECT_LE(max_err, max_abs_steps * amax) << "block " << b;
}

void check_k_rmse(const RoundTrip& t, int64_t b, double max_ratio, double max_abs_steps) {
  check_rmse(t, b, kQKK, max_ratio, max_abs_steps);
}

// Q2_K: 4 levels over a 16-element sub-block's range 2a: h = 2a / 3, RMS error
// 0.192 a against RMS 0.577 a: ratio 0.333 for plain rounding; ggml's search
// (|x|-weighted absolute error, 16 trial scales) only keeps better fits:
// 0.23 mean, 0.28 worst measured. Bound 0.333. An element errs by at most one
// step when the search clamps the extreme code: 2/3 of amax (0.42 measured).
TEST(QuantsRoundTrip, Q2_K) {
  for_each_round_trip(DType::kQ2_K, kSuperSizes,
                      [](const RoundTrip& t, int64_t b) { check_k_rmse(t, b, 0.333, 2.0 / 3); });
}

// Q3_K: 8 levels, the signed max of a sub-block at code -4: h = a / 4, RMS
// error a / (4 sqrt 12) = 0.072 a, ratio 0.125 (0.125 mean, 0.142 worst
// measured: the code moves raise the weighted fit, not the plain RMSE, and the
// 6-bit sub-block scales round by up to 1/64). Bound 0.17. The opposite end
// has only +3: an element there errs by one step plus a half for the scale
// rounding, 0.375 of amax (0.27 measured).
TEST(QuantsRoundTrip, Q3_K) {
  for_each_round_trip(DType::kQ3_K, kSuperSizes,
                      [](const RoundTrip& t, int64_t b) { check_k_rmse(t, b, 0.17, 0.375); });
}

// Q4_K: 16 levels over a sub-block's range 2a: h = 2a / 15, RMS error
// 2a / (15 sqrt 12) = 0.0385 a against RMS 0.577 a: ratio 0.067 before the
// scale search (0.055 mean, 0.061 worst measured) and the 6-bit scale/min
// rounding (< 1 % near the top of 0..63). Bound 0.08. The search may clamp
// the extreme element by up to one code, so one element can err by 1.5 steps:
// 1.5 * 2/15 = 0.2 of amax (0.11 measured).
TEST(QuantsRoundTrip, Q4_K) {
  for_each_round_trip(DType::kQ4_K, kSuperSizes,
                      [](const RoundTrip& t, int64_t b) { check_k_rmse(t, b, 0.08, 0.2); });
}

// Q5_K: as Q4_K with 32 levels: h = 2a / 31, ratio 0.032 (0.028 mean, 0.031
// worst measured). Bound 0.04; 1.5 steps = 0.097 of amax (0.06 measured).
TEST(QuantsRoundTrip, Q5_K) {
  for_each_round_trip(DType::kQ5_K, kSuperSizes,
                      [](const RoundTrip& t, int64_t b) { check_k_rmse(t, b, 0.04, 0.097); });
}

// Q6_K: 64 levels, step h = a / 32 from the signed max: RMS error a / (32
// sqrt 12) = 0.0090 a, ratio 0.0156 against RMS 0.577 a (0.013 mean, 0.015
// worst measured); 8-bit sub-block scales add < 1 %. Bound 0.02. Any element
// errs by at most 2 steps (a clamp by up to one code plus rounding): 2/32 of amax.
TEST(QuantsRoundTrip, Q6_K) {
  for_each_round_trip(DType::kQ6_K, kSuperSizes,
                      [](const RoundTrip& t, int64_t b) { check_k_rmse(t, b, 0.02, 2.0 / 32); });
}

// IQ4: 16 table levels over [-127, 113] times the block scale; the mean gap
// is 16 units, so with the block max near the table's end h ~ 2a / 15 as for
// Q4_K: ratio ~0.067 (0.064 mean measured for both). The widest gap is 24
// units (89 -> 113) of the 127 the max maps to: an element errs by at most half
// of it, 0.094 of amax, plus as much again when the scale search shrinks the
// scale and clamps the extreme element: 0.19, bound 0.2 (0.14 / 0.16 measured).
// IQ4_NL is checked per block of 32, where the noise over fewer samples is
// larger (0.090 worst measured): bound 0.12; IQ4_XS per 256 (0.071 worst,
// plus 6-bit sub-block scales): bound 0.09.
TEST(QuantsRoundTrip, IQ4_NL) {
  for_each_round_trip(DType::kIQ4_NL, kLegacySizes,
                      [](const RoundTrip& t, int64_t b) { check_rmse(t, b, kQK, 0.12, 0.2); });
}

// MXFP4: the codes are {0, 1/8, 1/4, 3/8, 1/2, 3/4, 1, 3/2} times 2^f, f =
// floor(log2 amax), amax in [2^f, 2^(f+1)): the widest gap inside the range
// is 2^f / 2 (1 -> 3/2), so an element errs by at most 2^f / 4 <= amax / 4;
// an extreme element past 3/2 2^f is clamped by less than 2^f / 2 = amax / 4
// too. Bound 0.2501 of amax (0.24999 measured over 20,000 random blocks).
// The scale is not fitted and the grid has 8 magnitudes: RMS error 0.11 of
// the block's RMS on average, 0.186 the worst of those blocks: bound 0.25.
TEST(QuantsRoundTrip, MXFP4) {
  for_each_round_trip(DType::kMXFP4, kLegacySizes,
                      [](const RoundTrip& t, int64_t b) { check_rmse(t, b, kQK, 0.25, 0.2501); });
}

TEST(QuantsRoundTrip, IQ4_XS) {
  for_each_round_trip(DType::kIQ4_XS, kSuperSizes,
                      [](const RoundTrip& t, int64_t b) { check_k_rmse(t, b, 0.09, 0.2); });
}

TEST(QuantsRoundTrip, PlainTypesConvertElementwise) {
  const uint32_t seed = fresh_seed();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  std::mt19937 rng(seed);
  const std::vector<float> x = random_row(rng, 99, 1);
  std::vector<uint8_t> bytes(99 * 4);
  std::vector<float> y(99);
  for (DType type : {DType::kF32, DType::kF16, DType::kBF16}) {
    quantize_row(type, x.data(), bytes.data(), 99);
    dequantize_row(type, bytes.data(), y.data(), 99);
    for (size_t i = 0; i < x.size(); ++i) {
      const float want = type == DType::kF32   ? x[i]
                         : type == DType::kF16 ? fp16_to_fp32(fp32_to_fp16(x[i]))
                                               : bf16_to_fp32(fp32_to_bf16(x[i]));
      ASSERT_EQ(y[i], want) << dtype_name(type) << " " << i;
    }
  }
}

// ---- dispatch errors ----

void expect_error(ErrorCategory category, const std::function<void()>& f, const char* what) {
  try {
    f();
    ADD_FAILURE() << what << ": no Error thrown";
  } catch (const Error& e) {
    EXPECT_EQ(e.category(), category) << what << ": " << e.what();
  }
}

TEST(QuantsDispatch, PartialBlocksAreRejected) {
  std::vector<float> x(1024, 0.5f);
  std::vector<uint8_t> bytes(4096);
  for (DType type : {DType::kQ4_0, DType::kQ4_1, DType::kQ5_0, DType::kQ5_1, DType::kQ8_0,
                     DType::kQ4_K, DType::kQ6_K, DType::kQ8_K, DType::kQ2_K}) {
    const int64_t block = dtype_info(type).block_size;
    for (int64_t n : {block + 1, block - 1, block / 2, int64_t{-1}, -block}) {
      SCOPED_TRACE(testing::Message() << dtype_name(type) << " n " << n);
      if (dtype_info(type).has_quantize) {
        expect_error(
            ErrorCategory::kInvalidArgument, [&] { quantize_row(type, x.data(), bytes.data(), n); },
            "quantize_row");
      }
      expect_error(
          ErrorCategory::kInvalidArgument, [&] { dequantize_row(type, bytes.data(), x.data(), n); },
          "dequantize_row");
    }
  }
}

TEST(QuantsDispatch, IqTypesAreUnsupported) {
  std::vector<float> x(512, 0.5f);
  std::vector<uint8_t> bytes(1024, 0x11);
  for (DType type : {DType::kIQ2_XXS, DType::kIQ2_XS, DType::kIQ3_XXS, DType::kIQ1_S,
                     DType::kIQ3_S, DType::kIQ2_S, DType::kIQ1_M}) {
    const int64_t n = dtype_info(type).block_size;
    expect_error(
        ErrorCategory::kUnsupported, [&] { dequantize_row(type, bytes.data(), x.data(), n); },
        "dequantize_row");
    expect_error(
        ErrorCategory::kUnsupported, [&] { quantize_row(type, x.data(), bytes.data(), n); },
        "quantize_row");
  }
}

// has_dequantize / has_quantize say exactly which types the references handle.
TEST(QuantsDispatch, FlagsMatchTheReferences) {
  std::vector<float> x(512, 0.25f);
  std::vector<uint8_t> bytes(4096, 0x5A);
  for (uint32_t raw = 0; raw < 64; ++raw) {
    const std::optional<DType> type = dtype_from_raw(raw);
    if (!type) continue;
    SCOPED_TRACE(dtype_name(*type));
    const DTypeInfo& info = dtype_info(*type);
    const int64_t n = 2 * info.block_size;
    auto dequant = [&] { dequantize_row(*type, bytes.data(), x.data(), n); };
    auto quant = [&] { quantize_row(*type, x.data(), bytes.data(), n); };
    if (info.has_dequantize) {
      EXPECT_NO_THROW(dequant());
    } else {
      expect_error(ErrorCategory::kUnsupported, dequant, "dequantize_row");
    }
    if (info.has_quantize) {
      EXPECT_NO_THROW(quant());
    } else {
      expect_error(ErrorCategory::kUnsupported, quant, "quantize_row");
    }
  }
}

}  // namespace
}  // namespace tessera
