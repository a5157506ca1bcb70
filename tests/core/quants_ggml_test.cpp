// The K-quant, IQ4 and MXFP4 quantizers give ggml's bytes: fixed pseudo-random rows
// (uniform, weight-like, outliers, tiny values whose f16 scales go subnormal,
// all equal, all positive, zero blocks among others, heavy centre) quantized
// here must hash to what ggml_quantize_chunk from llama.cpp's prebuilt
// libggml-base (node-llama-cpp 3.22.1) gave on the same rows.
//
// Also with an importance matrix (the weighted paths of llama-quantize --imatrix).
// Expected hashes come from `quantize_compare hashes` (bench/quantize_compare.c,
// built by bench/quantize_compare.sh), which restates make_rows below; the two
// generators must stay identical. To regenerate: run
//   bench/quantize_compare.sh --hashes
// and paste its lines into kExpected.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "tessera/core/dtype.h"
#include "tessera/core/quants.h"

namespace tessera {
namespace {

constexpr int kRows = 8, kPerRow = 512;

uint32_t next_u32(uint32_t& s) {  // xorshift32
  s ^= s << 13;
  s ^= s >> 17;
  s ^= s << 5;
  return s;
}

float uniform(uint32_t& s) {  // [-1, 1), exact in float
  return static_cast<float>(static_cast<int32_t>(next_u32(s) >> 8)) * (1.0f / 8388608.0f) - 1.0f;
}

std::vector<float> make_rows() {
  std::vector<float> x(kRows * kPerRow);
  uint32_t s = 0x9E3779B9u;
  for (int r = 0; r < kRows; ++r) {
    float* row = x.data() + r * kPerRow;
    for (int i = 0; i < kPerRow; ++i) {
      const float u = uniform(s);
      switch (r) {
        case 0: row[i] = u; break;
        case 1: {
          const float u2 = uniform(s);
          const float u3 = uniform(s);
          row[i] = 0.02f * (u + u2 + u3);
          break;
        }
        case 2: row[i] = i % 37 == 5 ? 40.0f * u : u; break;
        case 3: row[i] = 3e-6f * u; break;
        case 4: row[i] = 0.375f; break;
        case 5: row[i] = 0.5f * u + 0.75f; break;
        case 6: row[i] = (i / 32) % 3 == 1 ? 0.0f : u; break;
        default: row[i] = u * u * u; break;
      }
    }
  }
  return x;
}

uint64_t fnv1a(const uint8_t* p, size_t n) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 0x100000001b3ull;
  return h;
}

struct Expected {
  DType type;
  uint64_t rows[kRows];
};

// clang-format off
const Expected kExpected[] = {
    {DType::kQ2_K, {0x9782ee03257a1642ull, 0x14a61f8f817a0835ull, 0x974038c3738f61d7ull, 0xafe0586d59ca034eull, 0xe56f6dbed2d97f65ull, 0xbcdb44ffb9f500a7ull, 0x1942aa911410724bull, 0xcc3e33912e8df870ull}},
    {DType::kQ3_K, {0xa90f19037ff37423ull, 0x3d05e3a46811e81full, 0x6246e666ad9339e4ull, 0x513bd52097ce96c8ull, 0x2703ff369f444e35ull, 0xfdb68aa147f96c3bull, 0x043379e2fb491787ull, 0xe5f48a20baaaddf2ull}},
    {DType::kQ4_K, {0x7b00b8a45cf9f42bull, 0x945eebf5e2402499ull, 0xeaef9dfa9a7cc0cdull, 0x663c34a551ac498eull, 0x946eeab5e72e9ee5ull, 0x86c740d8e6e28f0full, 0xf04390fbbc22de51ull, 0xf732412f73f1b827ull}},
    {DType::kQ5_K, {0x91ee20262c4a373bull, 0x7a530789e69cf09dull, 0x38dcbe459f07c75full, 0xdc3272853029606bull, 0x83f45a25142434e9ull, 0x7e539b4ae9556d48ull, 0x2db67a5dc61abab4ull, 0x4eac94b735f6c58eull}},
    {DType::kQ6_K, {0x3fd782cf527410c1ull, 0xfe28d01c1c3e622bull, 0xf0219108600a8b55ull, 0x7e110752f7daa09full, 0x39fffff3fa1c9a25ull, 0x53c8518026a37c0full, 0x6c8cb0013732dc6cull, 0xae953294b5fd101full}},
    {DType::kIQ4_NL, {0x72d24cd417c088dcull, 0xdfd12edb9e4c30b7ull, 0x84c8bf6bdf0fc583ull, 0xb4a155b4ec64b8d7ull, 0xa0e03c8a5c8d3425ull, 0xda04c316f500e1caull, 0x9fa669d41efd0e7eull, 0x7cb2195e2093a1b9ull}},
    {DType::kIQ4_XS, {0x6d732922a435cf6aull, 0xd9ee70d1bcb2a29aull, 0x58f8db6b8dfb34c8ull, 0xcc09d49237bd1f11ull, 0x6f513dbe8b98eef5ull, 0x76981b9221e4d2f8ull, 0x192e015b2fd5f1d7ull, 0xe52f58c59bd0e1feull}},
    {DType::kMXFP4, {0x71f4e26d0df6aad5ull, 0x05171c10dd1f9675ull, 0x1b37197a5d589d46ull, 0x0e85bca7a41385cdull, 0x67a269e5bbe13355ull, 0x4c7f915143fdafbdull, 0x65e5b4474999150full, 0x48b5899fcb62cfb6ull}},
};
// clang-format on

// The same rows with an importance matrix (ggml_quantize_chunk's imatrix
// argument), which llama-quantize --imatrix passes per tensor.
// clang-format off
const Expected kExpectedWeighted[] = {
    {DType::kQ2_K, {0x81bf999b9028135cull, 0xb0d204e18897915bull, 0xaec1074937dd2414ull, 0x9fd5aeab3851d17bull, 0xe56f6dbed2d97f65ull, 0x4573140745853ff8ull, 0xb996ba223ee36fc0ull, 0xcaeb5c2529f4f428ull}},
    {DType::kQ3_K, {0x1b2f92e20a198c96ull, 0xf15786345b76f91cull, 0x3df7d81dc45c2668ull, 0xda141e9acccad591ull, 0x5412672b21204845ull, 0x5da09cc46d6014ffull, 0x0143f2e309df9041ull, 0x8927dddd4277bf9aull}},
    {DType::kQ4_K, {0x5f9e3bd2500da68full, 0xb5b66a493e6bda23ull, 0xb978bfb1429e99c4ull, 0x130f9e9923d2222full, 0x946eeab5e72e9ee5ull, 0xee0b7fc234c6f37eull, 0xd5920c731e543635ull, 0x8d28ff98284d9aa9ull}},
    {DType::kQ5_K, {0xde1851e859625200ull, 0x391b37792b921560ull, 0xad71a96fc9dd1ff1ull, 0x38228a51d404e897ull, 0x83f45a25142434e9ull, 0x9bf0743c671523ddull, 0x473aa4794cdd73a8ull, 0xf78998544683510cull}},
    {DType::kQ6_K, {0xec6efb299db7b535ull, 0x7b4a1ee272066417ull, 0x1da06e5d2979baafull, 0xdc5e2d5f0c3de9a1ull, 0x9b99c24f430cf56dull, 0xc493fbef7020c0adull, 0x0ad7ea677620dd6full, 0xd688ab29ccb886fcull}},
    {DType::kIQ4_NL, {0x50a49a73c5e13f42ull, 0x33dc8e4c54a15cf2ull, 0x8833eb32afea561dull, 0xb5fd7f1babde69a9ull, 0xbe2a316792aa7dc5ull, 0xc7814043342a5847ull, 0x2ed2ce1a91e3f96eull, 0x94341bef322860b0ull}},
    {DType::kIQ4_XS, {0xf60e14f6b748adcdull, 0x38cdbcd95ecc1d07ull, 0x9ea1aab59ce113beull, 0x63052b5751036b31ull, 0x90a1014dbee90b63ull, 0x328c8fbb08a97169ull, 0x8b90395149cbf200ull, 0xfecbc5f4fc03b73full}},
    {DType::kQ4_0, {0x9f280cd723dcbff7ull, 0x431f7dff15bc5933ull, 0x029df2a8f002cea7ull, 0xdfad8fd2315377adull, 0x9ee640a0ba7f8589ull, 0xb955c95ef46b4827ull, 0xae0258c039514646ull, 0x99552804f7826ac1ull}},
    {DType::kQ4_1, {0xdbb65602053eed15ull, 0xc7745614cd11758aull, 0x22bf6edce8ede0ffull, 0x86eb48174b33f8a2ull, 0xc2cff3a55799ed25ull, 0x1f601fa7f8b70db2ull, 0xed0f159e853e1209ull, 0xa90f08fd873109f5ull}},
    {DType::kQ5_0, {0x744355d7f86bf841ull, 0xc85d19ed8b335e32ull, 0x917697b1d1e44b9eull, 0x89cdfc71e96f1b73ull, 0xf2ff9162bff375c3ull, 0xd2586ab3f8cba77aull, 0x9c335c866b124316ull, 0xbcc80b7f251266eaull}},
    {DType::kQ5_1, {0x3e71c0b8263717dcull, 0x6bd47479180a29f7ull, 0xb4f51b09a5c1a1d8ull, 0x40ff37380f2e19fbull, 0x0c813e431af6a565ull, 0x52d99d016e87e7d9ull, 0xd214477ddc66de01ull, 0x97d8afd01c4a8174ull}},
};
// clang-format on

// Importance per column: mostly in [0, 1), every 17th zero, every 29th 25.
std::vector<float> make_importance() {
  std::vector<float> w(kPerRow);
  for (uint32_t i = 0; i < kPerRow; ++i) {
    const uint32_t h = i * 2654435761u;
    w[i] = i % 17 == 3 ? 0.0f : i % 29 == 7 ? 25.0f : static_cast<float>(h >> 20) * (1.0f / 4096.0f);
  }
  return w;
}

const char* kRowNames[kRows] = {"uniform",      "weight-like", "outliers",   "tiny",
                                "all equal",    "all positive", "zero blocks", "heavy centre"};

TEST(QuantsGgml, BytesMatchGgmlQuantizeChunk) {
  const std::vector<float> x = make_rows();
  for (const Expected& e : kExpected) {
    const size_t row_size = *row_bytes(e.type, kPerRow);
    std::vector<uint8_t> q(row_size);
    for (int r = 0; r < kRows; ++r) {
      quantize_row(e.type, x.data() + r * kPerRow, q.data(), kPerRow);
      EXPECT_EQ(fnv1a(q.data(), row_size), e.rows[r])
          << dtype_name(e.type) << " row " << r << " (" << kRowNames[r] << ")";
    }
  }
}

TEST(QuantsGgml, WeightedBytesMatchGgmlQuantizeChunk) {
  const std::vector<float> x = make_rows();
  const std::vector<float> w = make_importance();
  for (const Expected& e : kExpectedWeighted) {
    const size_t row_size = *row_bytes(e.type, kPerRow);
    std::vector<uint8_t> q(row_size);
    for (int r = 0; r < kRows; ++r) {
      quantize_row_weighted(e.type, x.data() + r * kPerRow, q.data(), kPerRow, w.data());
      EXPECT_EQ(fnv1a(q.data(), row_size), e.rows[r])
          << dtype_name(e.type) << " row " << r << " (" << kRowNames[r] << ")";
    }
  }
}

// The weights change the bytes (else the test above would not test them),
// and a null importance is the plain quantizer.
TEST(QuantsGgml, WeightsMatterAndNullIsPlain) {
  const std::vector<float> x = make_rows();
  const std::vector<float> w = make_importance();
  for (const Expected& e : kExpectedWeighted) {
    const size_t row_size = *row_bytes(e.type, kPerRow);
    std::vector<uint8_t> plain(row_size), weighted(row_size), null_weighted(row_size);
    quantize_row(e.type, x.data(), plain.data(), kPerRow);
    quantize_row_weighted(e.type, x.data(), weighted.data(), kPerRow, w.data());
    quantize_row_weighted(e.type, x.data(), null_weighted.data(), kPerRow, nullptr);
    EXPECT_NE(plain, weighted) << dtype_name(e.type);
    EXPECT_EQ(plain, null_weighted) << dtype_name(e.type);
  }
}

// The rows really are what the comment says (a changed generator would make
// the hashes above meaningless rather than fail loudly).
TEST(QuantsGgml, RowsHaveTheirShapes) {
  const std::vector<float> x = make_rows();
  auto row = [&](int r, int i) { return x[r * kPerRow + i]; };
  float amax2 = 0, amax0 = 0;
  for (int i = 0; i < kPerRow; ++i) {
    amax0 = std::max(amax0, std::abs(row(0, i)));
    amax2 = std::max(amax2, std::abs(row(2, i)));
    EXPECT_LE(std::abs(row(3, i)), 3e-6f);
    EXPECT_EQ(row(4, i), 0.375f);
    EXPECT_GT(row(5, i), 0.0f);
    if ((i / 32) % 3 == 1) {
      EXPECT_EQ(row(6, i), 0.0f);
    }
  }
  EXPECT_GT(amax0, 0.99f);
  EXPECT_GT(amax2, 10.0f);  // the outliers
  EXPECT_NE(row(0, 0), row(0, 1));
}

}  // namespace
}  // namespace tessera
