// llama.cpp's test-tokenizer-0 sets (shared/fixtures/tokenizer): each vocab
// file's 46 inputs must give exactly the ids HF tokenizers gave, with no
// BOS/EOS and no special-token parsing. Then detokenize must give the input
// back where the model's decoding allows it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>

#include "tessera/core/error.h"
#include "text/test_util.h"
#include "text/unicode.h"

namespace tessera::text::testing {
namespace {

struct Case {
  std::string input;
  std::vector<TokenId> expected;
};

// Splits .inp on its separator and reads one id list per .out line.
std::vector<Case> read_cases(const std::string& name) {
  const std::filesystem::path base = fixture_dir() / ("ggml-vocab-" + name + ".gguf");
  const std::string inp = read_file(base.string() + ".inp");
  const std::string out = read_file(base.string() + ".out");
  constexpr std::string_view kSeparator = "\n__ggml_vocab_test__\n";
  std::vector<Case> cases;
  for (size_t pos = 0;;) {
    const size_t hit = inp.find(kSeparator, pos);
    if (hit == std::string::npos) break;
    cases.push_back({inp.substr(pos, hit - pos), {}});
    pos = hit + kSeparator.size();
  }
  std::istringstream lines(out);
  std::string line;
  size_t i = 0;
  while (std::getline(lines, line)) {
    if (i >= cases.size()) {
      ADD_FAILURE() << name << ".out has more lines than .inp has cases";
      break;
    }
    std::istringstream ids(line);
    for (long id = 0; ids >> id;) cases[i].expected.push_back(static_cast<TokenId>(id));
    ++i;
  }
  EXPECT_EQ(i, cases.size()) << name << ": .out lines vs .inp cases";
  return cases;
}

std::optional<gguf::File> open_vocab(const std::string& name) {
  const std::filesystem::path path = fixture_dir() / ("ggml-vocab-" + name + ".gguf");
  if (!std::filesystem::exists(path)) {
    ADD_FAILURE() << "missing " << path;
    return std::nullopt;
  }
  return gguf::File::open(path);
}

// Every case's ids exactly the expected ones.
// n_cases: llama.cpp's 46, or more where a fixture of ours adds its own.
void expect_fixture_ids(const std::string& name, size_t n_cases = 46) {
  const std::optional<gguf::File> file = open_vocab(name);
  ASSERT_TRUE(file);
  const Tokenizer tok = Tokenizer::from_gguf(*file);
  const std::vector<Case> cases = read_cases(name);
  ASSERT_EQ(cases.size(), n_cases);
  size_t passed = 0;
  for (const Case& c : cases) {
    const std::vector<TokenId> got = tok.tokenize(c.input, /*add_special=*/false);
    if (got == c.expected) {
      ++passed;
      continue;
    }
    ADD_FAILURE() << name << " input '" << escaped(c.input) << "'\n  expected "
                  << joined(c.expected) << "\n  got      " << joined(got) << "\n  got text '"
                  << escaped(tok.detokenize(got, {.render_special = true})) << "'";
  }
  std::printf("[ fixture  ] %s: %zu/%zu exact\n", name.c_str(), passed, cases.size());
  ::testing::Test::RecordProperty("passed", static_cast<int>(passed));
}

// For vocabularies that normalize text: tokenizing the detokenized text
// gives the same ids again for every case without an unknown piece (at least
// `min_checked` of them), and with special tokens the ids are opened by BOS
// and closed by `closing` (bert: SEP, t5: EOS).
void expect_detokenized_text_tokenizes_alike(const Tokenizer& tok, const std::string& name,
                                             TokenId closing, int min_checked) {
  int checked = 0;
  for (const Case& c : read_cases(name)) {
    const std::vector<TokenId> ids = tok.tokenize(c.input, false);
    if (std::find(ids.begin(), ids.end(), tok.unk()) != ids.end()) continue;
    ++checked;
    EXPECT_EQ(tok.tokenize(tok.detokenize(ids), false), ids) << "'" << escaped(c.input) << "'";
    const std::vector<TokenId> with = tok.tokenize(c.input, true);
    ASSERT_EQ(with.size(), ids.size() + 2);
    EXPECT_EQ(with.front(), tok.bos());
    EXPECT_EQ(with.back(), closing);
    EXPECT_EQ(std::vector<TokenId>(with.begin() + 1, with.end() - 1), ids);
  }
  EXPECT_GE(checked, min_checked);
}

class TokenizerFixture : public ::testing::TestWithParam<const char*> {};

TEST_P(TokenizerFixture, MatchesExpectedIdsExactly) { expect_fixture_ids(GetParam()); }

// SPM and byte-level BPE lose nothing: with the space clean-up off every
// input comes back byte for byte (none of these models normalizes text).
TEST_P(TokenizerFixture, DetokenizeRoundTrips) {
  const std::string name = GetParam();
  const std::optional<gguf::File> file = open_vocab(name);
  ASSERT_TRUE(file);
  const Tokenizer tok = Tokenizer::from_gguf(*file);
  const bool cleans_spaces =
      name != "llama-spm" && name != "phi-3" && name != "deepseek-llm" && name != "deepseek-coder";
  for (const Case& c : read_cases(name)) {
    const std::vector<TokenId> ids = tok.tokenize(c.input, false);
    EXPECT_EQ(tok.detokenize(ids, {.clean_spaces = false}), c.input)
        << name << " '" << escaped(c.input) << "'";
    // With BOS/EOS added and removed again, and with BOS kept but not rendered.
    const std::vector<TokenId> with_bos = tok.tokenize(c.input, true);
    EXPECT_EQ(tok.detokenize(with_bos, {.remove_special = true, .clean_spaces = false}), c.input);
    EXPECT_EQ(tok.detokenize(with_bos, {.clean_spaces = false}), c.input);
    // Models without HF's space clean-up round-trip with the default options too.
    if (!cleans_spaces) {
      EXPECT_EQ(tok.detokenize(ids), c.input) << name;
    }
  }
}

const char* const kVocabs[] = {"llama-spm", "phi-3", "gpt-2",  "deepseek-coder", "deepseek-llm",
                               "falcon",    "mpt",   "refact", "starcoder"};

INSTANTIATE_TEST_SUITE_P(Vocab, TokenizerFixture, ::testing::ValuesIn(kVocabs),
                         [](const ::testing::TestParamInfo<const char*>& p) {
                           std::string n = p.param;
                           for (char& c : n) c = c == '-' ? '_' : c;
                           return n;
                         });

// Unigram (t5; ALBERT's 30k-clean SentencePiece model with its nmt_nfkc
// charsmap, written by scripts/spm-to-gguf.py): the ids exactly llama.cpp's
// (bench/tok_fixture.sh) on the 46 cases and 9 of ours (charsmap
// replacements, malformed UTF-8, whitespace runs, scripts, a long text).
// Text comes back normalized (NFKC, spaces merged),
// so tokenizing the detokenized text gives the same ids again wherever no
// piece was unknown; with special tokens, as the vocabulary adds them.
TEST(TokenizerFixtureUgm, MatchesExpectedIdsExactly) { expect_fixture_ids("albert-ugm", 55); }

TEST(TokenizerFixtureUgm, DetokenizedTextTokenizesAlike) {
  const std::optional<gguf::File> file = open_vocab("albert-ugm");
  ASSERT_TRUE(file);
  const Tokenizer tok = Tokenizer::from_gguf(*file);
  EXPECT_EQ(tok.model(), TokenizerModel::kUgm);
  expect_detokenized_text_tokenizes_alike(tok, "albert-ugm", tok.eos(), 10);
}

// Unigram on a small vocabulary: the segmentation of highest total score
// (not the longest first piece), a run of unknown code points one <unk>,
// user-defined pieces scored 0, a space put in front and runs of spaces
// merged as the file says, the charsmap's replacement applied.
TEST(TokenizerUgm, ViterbiNormalizationAndCharsmap) {
  // ids 3.. : ▁ab ▁a b c ▁ ▁x
  const std::vector<UgmPiece> pieces = {
      {"\xE2\x96\x81" "ab", -5.0f}, {"\xE2\x96\x81" "a", -1.0f}, {"b", -1.0f},
      {"c", -1.0f}, {"\xE2\x96\x81", -3.0f}, {"\xE2\x96\x81" "x", -2.0f, 4}};
  gguf::Writer w = ugm_writer(pieces);
  w.set_bool("tokenizer.ggml.add_space_prefix", true);
  w.set_bool("tokenizer.ggml.remove_extra_whitespaces", true);
  const Tokenizer tok = tokenizer_from(std::move(w));
  EXPECT_EQ(tok.model(), TokenizerModel::kUgm);
  using Ids = std::vector<TokenId>;
  EXPECT_EQ(tok.tokenize("ab", false), (Ids{4, 5}));       // -2 beats ▁ab's -5
  EXPECT_EQ(tok.tokenize("  ab   c ", false), (Ids{4, 5, 7, 6}));
  EXPECT_EQ(tok.tokenize("a\xC3\xA9\xC3\xA9" "b", false), (Ids{4, 2, 5}));  // éé: one <unk>
  EXPECT_EQ(tok.tokenize("ab", true), (Ids{4, 5, 1}));     // </s> added, no BOS
  // ▁x is user-defined: split out of the text, as llama.cpp does, and kept whole.
  EXPECT_EQ(tok.tokenize("a\xE2\x96\x81" "x", false), (Ids{4, 8}));
  EXPECT_EQ(tok.tokenize("", false), Ids{});
  // The charsmap: "a" normalizes to "b".
  const Tokenizer mapped = tokenizer_from(ugm_writer(pieces, a_to_b_charsmap(2, 0)));
  EXPECT_EQ(mapped.tokenize("a", false), Ids{5});  // no space prefix in this file
  EXPECT_EQ(mapped.tokenize("cac", false), (Ids{6, 5, 6}));
}

// WordPiece (bert-bge: lower-cased, accents stripped): the ids exactly
// llama.cpp's; text comes back normalized, not byte for byte, so instead
// tokenizing the detokenized text gives the same ids again, wherever no word
// was unknown; with special tokens, [CLS] ... [SEP].
TEST(TokenizerFixtureBert, MatchesExpectedIdsExactly) { expect_fixture_ids("bert-bge"); }

TEST(TokenizerFixtureBert, DetokenizedTextTokenizesAlike) {
  const std::optional<gguf::File> file = open_vocab("bert-bge");
  ASSERT_TRUE(file);
  const Tokenizer tok = Tokenizer::from_gguf(*file);
  EXPECT_EQ(tok.model(), TokenizerModel::kWpm);
  expect_detokenized_text_tokenizes_alike(tok, "bert-bge", tok.sep(), 31);
  EXPECT_EQ(tok.bos(), 101);  // [CLS]
  EXPECT_EQ(tok.sep(), 102);  // [SEP]
  EXPECT_EQ(tok.detokenize(tok.tokenize("Hello, World!", false)), " hello, world!");
}

}  // namespace
}  // namespace tessera::text::testing
