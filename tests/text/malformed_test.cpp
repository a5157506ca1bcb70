// Malformed tokenizer metadata is refused with an Error naming the key, what
// was found and what was expected (docs/text.md, "Tokenizers").
#include <gtest/gtest.h>

#include <cctype>
#include <cmath>
#include <functional>

#include "tessera/core/error.h"
#include "text/test_util.h"

namespace tessera::text::testing {
namespace {

struct Bad {
  const char* what;
  std::function<gguf::Writer()> make;
  ErrorCategory category;
  const char* message_part;  // must appear in the error message, as must the key
};

gguf::Writer spm() {
  return spm_writer({"a"}, {0.0f});
}
gguf::Writer bpe() {
  return bpe_writer({"ab"}, {"a b"});
}

std::vector<std::string> tokens_of_size(size_t n) {
  std::vector<std::string> out;
  for (size_t i = 0; i < n; ++i) out.push_back(fmt::format("t{}", i));
  return out;
}

const Bad kBad[] = {
    {"no model key",
     [] {
       gguf::Writer w;
       w.set_array_strings("tokenizer.ggml.tokens", tokens_of_size(4));
       return w;
     },
     ErrorCategory::kInvalidFile, "found nothing, expected a tokenizer model"},
    {"model not a string",
     [] {
       gguf::Writer w = spm();
       w.set_u32("tokenizer.ggml.model", 1);
       return w;
     },
     ErrorCategory::kInvalidFile, "found u32, expected string"},
    {"unknown model",
     [] {
       gguf::Writer w = spm();
       w.set_string("tokenizer.ggml.model", "rwkv");
       return w;
     },
     ErrorCategory::kUnsupported, "found \"rwkv\", expected \"llama\", \"gpt2\", \"bert\" or \"t5\""},
    {"t5 without an unknown token",
     [] {
       gguf::Writer w = ugm_writer({});
       w.set_u32("tokenizer.ggml.unknown_token_id", 0xFFFFFFFFu);  // "none"
       return w;
     },
     ErrorCategory::kInvalidFile, "without an unknown token"},
    {"t5 charsmap not bytes",
     [] {
       gguf::Writer w = ugm_writer({});
       w.set_array_i32("tokenizer.ggml.precompiled_charsmap", std::vector<int32_t>{4, 0, 0});
       return w;
     },
     ErrorCategory::kInvalidFile, "found array of i32, expected array of u8"},
    {"t5 charsmap over 4 MiB",
     [] { return ugm_writer({}, std::vector<uint8_t>((size_t{4} << 20) + 1, 0)); },
     ErrorCategory::kInvalidFile, "found 4194305 bytes, expected at most 4194304"},
    {"t5 charsmap shorter than its header",
     [] { return ugm_writer({}, std::vector<uint8_t>{1, 0}); },
     ErrorCategory::kInvalidFile, "found fewer than 4 bytes"},
    {"t5 charsmap array past its end",
     [] { return ugm_writer({}, std::vector<uint8_t>{8, 0, 0, 0, 1, 2, 3, 4}); },
     ErrorCategory::kInvalidFile, "a multiple of 4 that fits"},
    {"t5 charsmap leaf past the array",
     [] { return ugm_writer({}, a_to_b_charsmap(/*value_at=*/300, 0)); },
     ErrorCategory::kInvalidFile, "pointing past the double array"},
    {"t5 charsmap replacement past its strings",
     [] { return ugm_writer({}, a_to_b_charsmap(2, /*offset=*/1000)); },
     ErrorCategory::kInvalidFile, "outside the 2 bytes of NUL-ended strings"},
    {"bert without a CLS token",
     [] {
       gguf::Writer w = spm();
       w.set_string("tokenizer.ggml.model", "bert");
       w.set_array_strings("tokenizer.ggml.tokens", tokens_of_size(50));
       w.set_array_f32("tokenizer.ggml.scores", std::vector<float>(50, 0.0f));
       w.set_array_i32("tokenizer.ggml.token_type", std::vector<int32_t>(50, 1));
       return w;
     },
     ErrorCategory::kInvalidFile, "without a [CLS] token"},
    {"bert without a SEP token",
     [] {
       gguf::Writer w = wpm_writer({});
       w.set_u32("tokenizer.ggml.seperator_token_id", 0xFFFFFFFFu);  // "none"
       return w;
     },
     ErrorCategory::kInvalidFile, "without a [SEP] token"},
    {"bert lowercase not a bool",
     [] {
       gguf::Writer w = wpm_writer({});
       w.set_u32("tokenizer.ggml.normalizer.lowercase", 1);
       return w;
     },
     ErrorCategory::kInvalidFile, "found u32, expected bool"},
    {"unknown pre",
     [] {
       gguf::Writer w = bpe();
       w.set_string("tokenizer.ggml.pre", "no-such-pre");
       return w;
     },
     ErrorCategory::kUnsupported, "found \"no-such-pre\", expected one of: default, llama3"},
    {"no tokens",
     [] {
       gguf::Writer w;
       w.set_string("tokenizer.ggml.model", "llama");
       return w;
     },
     ErrorCategory::kInvalidFile, "found nothing, expected the token list"},
    {"tokens not strings",
     [] {
       gguf::Writer w = spm();
       w.set_array_i32("tokenizer.ggml.tokens", std::vector<int32_t>{1, 2, 3});
       return w;
     },
     ErrorCategory::kInvalidFile, "found array of i32, expected array of string"},
    {"tokens not an array",
     [] {
       gguf::Writer w = spm();
       w.set_string("tokenizer.ggml.tokens", "abc");
       return w;
     },
     ErrorCategory::kInvalidFile, "found string, expected array"},
    {"no tokens in the list",
     [] {
       gguf::Writer w = spm();
       w.set_array_strings("tokenizer.ggml.tokens", std::vector<std::string>{});
       w.set_array_f32("tokenizer.ggml.scores", std::vector<float>{});
       w.set_array_i32("tokenizer.ggml.token_type", std::vector<int32_t>{});
       return w;
     },
     ErrorCategory::kInvalidFile, "found 0 tokens"},
    {"token too long",
     [] {
       gguf::Writer w = spm_writer({std::string(kMaxTokenBytes + 1, 'x')}, {0.0f});
       return w;
     },
     ErrorCategory::kInvalidFile, "found token 259 of 65537 bytes, expected at most 65536"},
    {"duplicate token",
     [] {
       return spm_writer({"a", "a"}, {0.0f, 0.0f});
     },
     ErrorCategory::kInvalidFile, "found token 260 equal to token 259"},
    {"scores too short",
     [] {
       gguf::Writer w = spm();
       w.set_array_f32("tokenizer.ggml.scores", std::vector<float>(259, 0.0f));
       return w;
     },
     ErrorCategory::kInvalidFile, "found 259 elements, expected 260"},
    {"scores too long",
     [] {
       gguf::Writer w = spm();
       w.set_array_f32("tokenizer.ggml.scores", std::vector<float>(261, 0.0f));
       return w;
     },
     ErrorCategory::kInvalidFile, "found 261 elements, expected 260"},
    {"scores are strings",
     [] {
       gguf::Writer w = spm();
       w.set_array_strings("tokenizer.ggml.scores", tokens_of_size(260));
       return w;
     },
     ErrorCategory::kInvalidFile, "found array of string, expected array of f32"},
    {"NaN score", [] { return spm_writer({"a"}, {std::nanf("")}); }, ErrorCategory::kInvalidFile,
     "found NaN for token 259"},
    {"token types too short",
     [] {
       gguf::Writer w = spm();
       w.set_array_i32("tokenizer.ggml.token_type", std::vector<int32_t>(3, 1));
       return w;
     },
     ErrorCategory::kInvalidFile, "found 3 elements, expected 260"},
    {"token types are floats",
     [] {
       gguf::Writer w = spm();
       w.set_array_f32("tokenizer.ggml.token_type", std::vector<float>(260, 1.0f));
       return w;
     },
     ErrorCategory::kInvalidFile, "found array of f32, expected array of i32"},
    {"byte token with bad text",
     [] {
       gguf::Writer w = spm_writer({"<0xZZ>"}, {0.0f});
       std::vector<int32_t> types(260, 1);
       types[259] = 6;
       w.set_array_i32("tokenizer.ggml.token_type", types);
       return w;
     },
     ErrorCategory::kInvalidFile, "found byte token 259 with text '<0xZZ>', expected '<0xNN>'"},
    {"byte token with three digits",
     [] {
       gguf::Writer w = spm_writer({"<0x123>"}, {0.0f});
       std::vector<int32_t> types(260, 1);
       types[259] = 6;
       w.set_array_i32("tokenizer.ggml.token_type", types);
       return w;
     },
     ErrorCategory::kInvalidFile, "'<0x123>'"},
    {"bos id out of range",
     [] {
       gguf::Writer w = spm();
       w.set_u32("tokenizer.ggml.bos_token_id", 260);
       return w;
     },
     ErrorCategory::kInvalidFile, "found token id 260, expected an id below n_vocab 260"},
    {"eos id signed",  // the GGUF reader already wants u32 here
     [] {
       gguf::Writer w = spm();
       w.set_i32("tokenizer.ggml.eos_token_id", -7);
       return w;
     },
     ErrorCategory::kInvalidFile, "found i32, expected u32"},
    {"eot id negative",
     [] {
       gguf::Writer w = spm();
       w.set_i32("tokenizer.ggml.eot_token_id", -7);
       return w;
     },
     ErrorCategory::kInvalidFile, "found token id -7, expected an id below n_vocab 260"},
    {"eom id huge",
     [] {
       gguf::Writer w = spm();
       w.set_u64("tokenizer.ggml.eom_token_id", uint64_t{1} << 40);
       return w;
     },
     ErrorCategory::kInvalidFile, "found token id 1099511627776"},
    {"eot id a float",
     [] {
       gguf::Writer w = spm();
       w.set_f32("tokenizer.ggml.eot_token_id", 2.0f);
       return w;
     },
     ErrorCategory::kInvalidFile, "found f32, expected u32"},
    {"fim id out of range",
     [] {
       gguf::Writer w = spm();
       w.set_u32("tokenizer.ggml.fim_pre_token_id", 99999);
       return w;
     },
     ErrorCategory::kInvalidFile, "found token id 99999"},
    {"bos id a string",
     [] {
       gguf::Writer w = spm();
       w.set_string("tokenizer.ggml.bos_token_id", "1");
       return w;
     },
     ErrorCategory::kInvalidFile, "found string, expected u32"},
    {"add_bos not a bool",
     [] {
       gguf::Writer w = spm();
       w.set_u32("tokenizer.ggml.add_bos_token", 1);
       return w;
     },
     ErrorCategory::kInvalidFile, "found u32, expected bool"},
    {"add_bos with no bos",
     [] {
       gguf::Writer w = spm();
       w.set_u32("tokenizer.ggml.bos_token_id", 0xFFFFFFFFu);
       return w;
     },
     ErrorCategory::kInvalidFile, "found true, expected a BOS token id"},
    {"gpt2 without merges",
     [] {
       gguf::Writer w = spm();
       w.set_string("tokenizer.ggml.model", "gpt2");
       return w;
     },
     ErrorCategory::kInvalidFile, "found nothing, expected the BPE merges"},
    {"merges not strings",
     [] {
       gguf::Writer w = bpe();
       w.set_array_i32("tokenizer.ggml.merges", std::vector<int32_t>{1});
       return w;
     },
     ErrorCategory::kInvalidFile, "found array of i32, expected array of string"},
    {"merge without a space",
     [] {
       return bpe_writer({"ab"}, {"a b", "ab"});
     },
     ErrorCategory::kInvalidFile, "found merge 1 without two parts"},
    {"merge with an empty right part", [] { return bpe_writer({"ab"}, {"a "}); },
     ErrorCategory::kInvalidFile, "found merge 0 without two parts"},
};

class TokenizerMalformed : public ::testing::TestWithParam<Bad> {};

TEST_P(TokenizerMalformed, IsRefused) {
  const Bad& bad = GetParam();
  try {
    tokenizer_from(bad.make());
    FAIL() << bad.what << ": loaded";
  } catch (const Error& e) {
    EXPECT_EQ(e.category(), bad.category) << bad.what << ": " << e.what();
    EXPECT_NE(std::string(e.what()).find(bad.message_part), std::string::npos)
        << bad.what << ": " << e.what();
    // Refused by the tokenizer, or already by the GGUF reader's check of well-known keys.
    const std::string message = e.what();
    EXPECT_TRUE(message.rfind("[tokenizer ", 0) == 0 || message.rfind("[gguf ", 0) == 0) << message;
  }
}

INSTANTIATE_TEST_SUITE_P(Metadata, TokenizerMalformed, ::testing::ValuesIn(kBad),
                         [](const ::testing::TestParamInfo<Bad>& p) {
                           std::string n = p.param.what;
                           for (char& c : n)
                             c = std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
                           return n;
                         });

// The base files above are well-formed: each failure comes from its one change.
TEST(TokenizerMalformedBase, BaseVocabulariesLoad) {
  EXPECT_EQ(tokenizer_from(spm()).n_vocab(), 260u);
  EXPECT_EQ(tokenizer_from(bpe()).n_vocab(), 257u);
  EXPECT_EQ(tokenizer_from(wpm_writer({})).n_vocab(), 104u);
}

// "None" markers converters write are not errors.
TEST(TokenizerMalformedBase, NoneMarkersAreAccepted) {
  gguf::Writer w = spm();
  w.set_u32("tokenizer.ggml.padding_token_id", 0xFFFFFFFFu);
  w.set_u32("tokenizer.ggml.seperator_token_id", 0xFFFFFFFFu);
  w.set_i32("tokenizer.ggml.eot_token_id", -1);
  w.set_array_strings("tokenizer.ggml.tokens", [] {
    std::vector<std::string> t = {"<unk>", "<s>", "</s>"};
    for (const std::string& b : byte_tokens()) t.push_back(b);
    t.push_back("");  // an empty token: kept, never produced
    return t;
  }());
  const Tokenizer tok = tokenizer_from(w);
  EXPECT_EQ(tok.pad(), kNoToken);
  EXPECT_EQ(tok.sep(), kNoToken);
  EXPECT_EQ(tok.eot(), kNoToken);
  EXPECT_EQ(tok.token_to_piece(259), "");
  EXPECT_FALSE(tok.find("").has_value());
}

}  // namespace
}  // namespace tessera::text::testing
