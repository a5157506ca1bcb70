// Tokenizer behaviour beyond the fixture sets: the stories260K vocabulary,
// merge order on hand-made vocabularies, BOS/EOS defaults, special tokens,
// end of generation, invalid UTF-8 and id checks.
#include <gtest/gtest.h>

#include <atomic>
#include <random>
#include <thread>

#include "tessera/core/error.h"
#include "text/pre_tokenizer.h"
#include "text/test_util.h"
#include "text/unicode.h"

namespace tessera::text::testing {
namespace {

using Ids = std::vector<TokenId>;

// The repository's files are always there: a missing one fails the test.
std::optional<Tokenizer> open_tokenizer(const std::filesystem::path& path) {
  if (!std::filesystem::exists(path)) {
    ADD_FAILURE() << "missing " << path;
    return std::nullopt;
  }
  const gguf::File file = gguf::File::open(path);
  return Tokenizer::from_gguf(file);  // the File closes here: the Tokenizer owns its data
}

std::optional<Tokenizer> open_fixture(const std::string& name) {
  return open_tokenizer(fixture_dir() / ("ggml-vocab-" + name + ".gguf"));
}

// ---- stories260K: 512 tokens, <unk> <s> </s>, 256 bytes, then pieces scored 0, -1, ...

TEST(TokenizerStories, VocabularyFacts) {
  const std::optional<Tokenizer> tok = open_tokenizer(std::filesystem::path(models_dir()) / "stories260K.gguf");
  ASSERT_TRUE(tok);
  EXPECT_EQ(tok->model(), TokenizerModel::kSpm);
  EXPECT_EQ(tok->model_name(), "llama");
  EXPECT_EQ(tok->n_vocab(), 512u);
  EXPECT_EQ(tok->token_text(0), "<unk>");
  EXPECT_EQ(tok->token_text(1), "<s>");
  EXPECT_EQ(tok->token_text(2), "</s>");
  EXPECT_EQ(tok->token_text(3), "<0x00>");
  EXPECT_EQ(tok->token_text(258), "<0xFF>");
  EXPECT_EQ(tok->token_type(0), TokenType::kUnknown);
  EXPECT_EQ(tok->token_type(1), TokenType::kControl);
  EXPECT_EQ(tok->token_type(3), TokenType::kByte);
  EXPECT_EQ(tok->token_text(259), "\xE2\x96\x81t");
  EXPECT_EQ(tok->token_text(260), "he");
  EXPECT_EQ(tok->token_text(265), "\xE2\x96\x81the");
  EXPECT_EQ(tok->token_score(259), 0.0f);
  EXPECT_EQ(tok->token_score(260), -1.0f);
  EXPECT_EQ(tok->token_score(265), -6.0f);
  EXPECT_EQ(tok->token_score(511), -252.0f);
  // Special ids: 4294967295 in the file means none.
  EXPECT_EQ(tok->bos(), 1);
  EXPECT_EQ(tok->eos(), 2);
  EXPECT_EQ(tok->unk(), 0);
  EXPECT_EQ(tok->pad(), kNoToken);
  EXPECT_EQ(tok->sep(), kNoToken);
  EXPECT_TRUE(tok->add_bos());  // no key: llama.cpp's SPM default
  EXPECT_FALSE(tok->add_eos());
}

TEST(TokenizerStories, PiecesAndIds) {
  const std::optional<Tokenizer> tok = open_tokenizer(std::filesystem::path(models_dir()) / "stories260K.gguf");
  ASSERT_TRUE(tok);
  EXPECT_EQ(tok->token_to_piece(3), std::string(1, '\0'));
  EXPECT_EQ(tok->token_to_piece(13), "\n");  // <0x0A>
  EXPECT_EQ(tok->token_to_piece(259), " t");
  EXPECT_EQ(tok->token_to_piece(1), "<s>");
  EXPECT_EQ(tok->token_to_piece(1, /*render_special=*/false), "");
  const Ids ids = tok->tokenize("Once upon a time", true);
  EXPECT_EQ(ids, (Ids{1, 403, 407, 261, 378}));
  EXPECT_EQ(tok->token_text(403), "\xE2\x96\x81Once");
  EXPECT_EQ(tok->token_text(407), "\xE2\x96\x81upon");
  EXPECT_EQ(tok->token_text(378), "\xE2\x96\x81time");
  EXPECT_EQ(tok->detokenize(ids), "Once upon a time");
  EXPECT_EQ(tok->detokenize(ids, {.render_special = true}),
            "<s> Once upon a time");  // as HF and llama.cpp render it
  EXPECT_EQ(tok->tokenize("", true), (Ids{1}));
  EXPECT_EQ(tok->tokenize("", false), Ids{});
  // Characters the 512 tokens lack fall back to bytes and come back exactly.
  const std::string text = "Zoë 🦙 \t\n";
  EXPECT_EQ(tok->detokenize(tok->tokenize(text, true)), text);
}

// ---- SPM merge order on a hand-made vocabulary

TEST(TokenizerSpm, HigherScoreMergesFirst) {
  const std::string s = "\xE2\x96\x81";  // U+2581
  {                                      // "ab" outscores "▁a": ▁ + ab
    const Tokenizer tok =
        tokenizer_from(spm_writer({s, "a", "b", s + "a", "ab"}, {-5, -5, -5, -2, -1}));
    EXPECT_EQ(tok.tokenize("ab", false), (Ids{259, 263}));
  }
  {  // "▁a" outscores "ab": ▁a + b
    const Tokenizer tok =
        tokenizer_from(spm_writer({s, "a", "b", s + "a", "ab"}, {-5, -5, -5, -1, -2}));
    EXPECT_EQ(tok.tokenize("ab", false), (Ids{262, 261}));
  }
  {  // equal scores: the leftmost pair first
    const Tokenizer tok =
        tokenizer_from(spm_writer({s, "a", "b", s + "a", "ab"}, {-5, -5, -5, -1, -1}));
    EXPECT_EQ(tok.tokenize("ab", false), (Ids{262, 261}));
  }
}

TEST(TokenizerSpm, SpacePrefixAndByteFallback) {
  const std::string s = "\xE2\x96\x81";
  const Tokenizer tok = tokenizer_from(spm_writer({s, "a", s + "a"}, {-1, -1, 0}));
  EXPECT_EQ(tok.tokenize("a a", false), (Ids{261, 261}));
  // 'q' is no token: its byte token <0x71> (3 + 0x71).
  EXPECT_EQ(tok.tokenize("q", false), (Ids{259, 3 + 0x71}));
  EXPECT_EQ(tok.detokenize(tok.tokenize(" a  q ", true)), " a  q ");
  gguf::Writer w = spm_writer({s, "a", s + "a"}, {-1, -1, 0});
  w.set_bool("tokenizer.ggml.add_space_prefix", false);
  const Tokenizer plain = tokenizer_from(w);
  EXPECT_FALSE(plain.add_space_prefix());
  EXPECT_EQ(plain.tokenize("a", false), (Ids{260}));
  EXPECT_EQ(plain.detokenize(plain.tokenize(" a", false)), " a");
}

// ---- BPE merge order on a hand-made vocabulary (256 byte tokens first)

TEST(TokenizerBpe, LowerRankMergesFirst) {
  {  // "b c" ranks before "a b": a + bc
    const Tokenizer tok = tokenizer_from(bpe_writer({"ab", "bc"}, {"b c", "a b"}));
    EXPECT_EQ(tok.tokenize("abc", false), (Ids{'a', 257}));
  }
  {
    const Tokenizer tok = tokenizer_from(bpe_writer({"ab", "bc"}, {"a b", "b c"}));
    EXPECT_EQ(tok.tokenize("abc", false), (Ids{256, 'c'}));
  }
}

// WordPiece: the longest piece first at each position, continuations bare;
// a word with a position no piece covers is one [UNK]; text normalized and
// split as BERT does first.
const std::string kWordStart = "\xE2\x96\x81";  // U+2581: a word's first piece
Tokenizer small_wpm(gguf::Writer w = wpm_writer({kWordStart + "un", kWordStart + "unbe", "lie", "v",
                                                  "able", kWordStart + "cafe", kWordStart + ",",
                                                  kWordStart + "x", kWordStart + "\xE4\xB8\x80"})) {
  return tokenizer_from(w);
}
constexpr TokenId kUnk = 100, kCls = 101, kSep = 102, kUn = 104, kUnbe = 105, kLie = 106, kV = 107,
                  kAble = 108, kCafe = 109, kComma = 110, kX = 111, kYi = 112;

TEST(TokenizerWpm, LongestPieceFirstAndUnknownWords) {
  const Tokenizer tok = small_wpm();
  EXPECT_EQ(tok.model(), TokenizerModel::kWpm);
  EXPECT_EQ(tok.tokenize("unbelievable", false), (Ids{kUnbe, kLie, kV, kAble}));
  EXPECT_EQ(tok.tokenize("un", false), (Ids{kUn}));
  EXPECT_EQ(tok.tokenize("zzz", false), (Ids{kUnk}));
  EXPECT_EQ(tok.tokenize("unz x", false), (Ids{kUnk, kX}));  // "▁un" then no "z": the word is unknown
  EXPECT_EQ(tok.tokenize("", false), Ids{});
  EXPECT_EQ(tok.tokenize(" \t\n ", false), Ids{});
  EXPECT_EQ(tok.tokenize("x", true), (Ids{kCls, kX, kSep}));
  EXPECT_EQ(tok.tokenize("", true), (Ids{kCls, kSep}));
}

TEST(TokenizerWpm, NormalizesAndSplitsAsBert) {
  const Tokenizer tok = small_wpm();
  // Lower-cased, accents stripped (precomposed and combining), punctuation a word.
  EXPECT_EQ(tok.tokenize("Caf\xC3\xA9,X", false), (Ids{kCafe, kComma, kX}));
  EXPECT_EQ(tok.tokenize("CAFE\xCC\x81", false), (Ids{kCafe}));
  // CJK ideographs are words of their own; whitespace of any kind splits.
  EXPECT_EQ(tok.tokenize("\xE4\xB8\x80x", false), (Ids{kYi, kX}));
  EXPECT_EQ(tok.tokenize("x\xE3\x80\x80x\xC2\xA0x", false), (Ids{kX, kX, kX}));
  // Control characters, NUL and invalid bytes are dropped inside a word.
  EXPECT_EQ(tok.tokenize(std::string("u\x01n\0\xFF", 6), false), (Ids{kUn}));
  // The vocabulary may turn lower-casing (and with it accent stripping) off.
  gguf::Writer cased = wpm_writer({kWordStart + "Cafe", kWordStart + "caf\xC3\xA9"});
  cased.set_bool("tokenizer.ggml.normalizer.lowercase", false);
  const Tokenizer keep = tokenizer_from(cased);
  EXPECT_EQ(keep.tokenize("Cafe caf\xC3\xA9 cafe", false), (Ids{104, 105, kUnk}));
  // Pieces render with U+2581 as a space, [CLS] / [SEP] only when asked.
  EXPECT_EQ(tok.detokenize(tok.tokenize("Un,x", true)), " un, x");
  EXPECT_EQ(tok.detokenize(tok.tokenize("x", true), {.render_special = true}), "[CLS] x[SEP]");
}

// The work per byte is bounded: pieces longer than 128 bytes are never tried
// (no BERT vocabulary has one), so a long word against a vocabulary with a
// huge token costs at most 128 lookups a byte.
TEST(TokenizerWpm, PiecesPastTheBoundAreNotTried) {
  const Tokenizer tok =
      tokenizer_from(wpm_writer({kWordStart + "a", "a", kWordStart + std::string(200, 'a')}));
  const Ids ids = tok.tokenize(std::string(64 * 1024, 'a'), false);
  ASSERT_EQ(ids.size(), 64u * 1024);
  EXPECT_EQ(ids.front(), 104);
  EXPECT_TRUE(std::all_of(ids.begin() + 1, ids.end(), [](TokenId id) { return id == 105; }));
  const Ids within = tokenizer_from(wpm_writer({kWordStart + "a", "a", kWordStart + std::string(100, 'a')}))
                         .tokenize(std::string(101, 'a'), false);
  EXPECT_EQ(within, (Ids{106, 105}));  // a 103-byte piece is found
}

// The generated Unicode tables (scripts/gen-unicode-tables.py) on known code points.
TEST(TokenizerUnicode, ClassesLowercaseAndDecompositions) {
  EXPECT_EQ(unicode_class(U'A'), UnicodeClass::kLetter);
  EXPECT_EQ(unicode_class(U','), UnicodeClass::kPunctuation);
  EXPECT_EQ(unicode_class(U'$'), UnicodeClass::kSymbol);
  EXPECT_EQ(unicode_class(U'7'), UnicodeClass::kNumber);
  EXPECT_EQ(unicode_class(0x0301), UnicodeClass::kMark);
  EXPECT_EQ(unicode_class(0x00A0), UnicodeClass::kSeparator);
  EXPECT_EQ(unicode_class(0x200B), UnicodeClass::kControl);  // Cf
  EXPECT_EQ(unicode_class(0x0378), UnicodeClass::kUndefined);
  EXPECT_EQ(unicode_class(0x10FFFF), UnicodeClass::kUndefined);
  EXPECT_EQ(unicode_class(0x4E00), UnicodeClass::kLetter);
  EXPECT_EQ(unicode_tolower(U'Q'), U'q');
  EXPECT_EQ(unicode_tolower(0x00C4), 0x00E4u);  // Ä
  EXPECT_EQ(unicode_tolower(0x0130), U'i');     // İ: its simple mapping
  EXPECT_EQ(unicode_tolower(0x0416), 0x0436u);  // Ж
  EXPECT_EQ(unicode_tolower(U'q'), U'q');
  EXPECT_EQ(nfd_first(0x00E9), U'e');       // é
  EXPECT_EQ(nfd_first(0x1EC7), U'e');       // ệ
  EXPECT_EQ(nfd_first(0xAC00), 0x1100u);    // 가: its leading jamo
  EXPECT_EQ(nfd_first(0xD7A3), 0x1112u);    // 힣
  EXPECT_EQ(nfd_first(U'e'), U'e');
  EXPECT_TRUE(is_unicode_whitespace(0x3000));
  EXPECT_FALSE(is_unicode_whitespace(0x200B));
  EXPECT_EQ(decode_utf8("a\xC3\xA9\xFF\xF0\x9F\xA6\x99"), (std::u32string{U'a', 0xE9, 0xFFFD, 0x1F999}));
}

TEST(TokenizerBpe, ByteLevelMapRoundTrips) {
  for (int b = 0; b < 256; ++b) {
    std::string s;
    append_utf8(s, byte_to_code_point(static_cast<uint8_t>(b)));
    std::string back;
    append_byte_decoded(back, s);
    ASSERT_EQ(back, std::string(1, static_cast<char>(b))) << b;
  }
  EXPECT_EQ(byte_to_code_point(' '), U'\u0120');  // "Ġ"
  EXPECT_EQ(byte_to_code_point('\n'), U'\u010A');
  EXPECT_EQ(byte_to_code_point('!'), U'!');
}

// ---- pre-tokenizer regexes

TEST(TokenizerPre, Gpt2SplitsKeepWhitespaceBeforeWords) {
  const RegexSplitter split(find_pre_spec("gpt-2")->patterns);
  const std::vector<std::string_view> want = {"Hello", "  ", " world", "'s", " 123", "!!", "\n\n"};
  EXPECT_EQ(split.split("Hello   world's 123!!\n\n"), want);
}

TEST(TokenizerPre, Llama3GroupsDigitsByThree) {
  const RegexSplitter split(find_pre_spec("llama-bpe")->patterns);
  EXPECT_EQ(split.split("1234567 x"), (std::vector<std::string_view>{"123", "456", "7", " x"}));
  EXPECT_EQ(split.split("I'M"), (std::vector<std::string_view>{"I", "'M"}));
}

TEST(TokenizerPre, PiecesAlwaysCoverTheText) {
  std::mt19937 rng(7);
  for (const char* name :
       {"default", "llama3", "deepseek-llm", "deepseek-coder", "falcon", "gpt-2", "starcoder",
        "qwen2", "tekken", "gpt-4o", "deepseek-v3", "chameleon", "bloom", "viking", "seed-coder"}) {
    const PreSpec* spec = find_pre_spec(name);
    ASSERT_NE(spec, nullptr) << name;
    const RegexSplitter split(spec->patterns);
    for (int i = 0; i < 50; ++i) {
      std::string raw(rng() % 40, ' ');
      for (char& c : raw) c = "ab 1\n\t'.,!Ü\xE4\xB8\x80"[rng() % 15];
      const std::string text = sanitize_utf8(raw);
      std::string joined_pieces;
      for (const std::string_view p : split.split(text)) {
        EXPECT_FALSE(p.empty()) << name;
        joined_pieces += p;
      }
      EXPECT_EQ(joined_pieces, text) << name;
    }
  }
  EXPECT_EQ(find_pre_spec(""), find_pre_spec("default"));
  EXPECT_EQ(find_pre_spec("no-such-pre"), nullptr);
}

// ---- BOS/EOS defaults (llama.cpp's): SPM adds BOS; BPE as its pre-tokenizer says

TEST(TokenizerDefaults, AddBosPerModelAndPre) {
  EXPECT_TRUE(tokenizer_from(spm_writer({}, {})).add_bos());
  EXPECT_FALSE(tokenizer_from(spm_writer({}, {})).add_eos());
  struct Case {
    std::optional<std::string> pre;
    bool add_bos;
  };
  for (const Case& c : {Case{"gpt-2", false}, Case{std::nullopt, false}, Case{"default", false},
                        Case{"llama-bpe", true}, Case{"llama3", true}, Case{"tekken", true},
                        Case{"falcon", false}, Case{"qwen2", false}, Case{"deepseek-llm", false}}) {
    gguf::Writer w = bpe_writer({}, {}, c.pre);
    w.set_u32("tokenizer.ggml.bos_token_id", 1);
    const Tokenizer tok = tokenizer_from(w);
    EXPECT_EQ(tok.add_bos(), c.add_bos) << c.pre.value_or("(none)");
    EXPECT_FALSE(tok.add_eos());
    EXPECT_EQ(tok.tokenize("", true), c.add_bos ? Ids{1} : Ids{});
  }
}

TEST(TokenizerDefaults, KeysOverrideDefaults) {
  gguf::Writer spm = spm_writer({}, {});
  spm.set_bool("tokenizer.ggml.add_bos_token", false);
  spm.set_bool("tokenizer.ggml.add_eos_token", true);
  const Tokenizer a = tokenizer_from(spm);
  EXPECT_FALSE(a.add_bos());
  EXPECT_TRUE(a.add_eos());
  EXPECT_EQ(a.tokenize("", true), (Ids{2}));
  gguf::Writer bpe = bpe_writer({}, {}, "gpt-2");
  bpe.set_u32("tokenizer.ggml.bos_token_id", 5);
  bpe.set_bool("tokenizer.ggml.add_bos_token", true);
  EXPECT_EQ(tokenizer_from(bpe).tokenize("!", true), (Ids{5, '!'}));
}

TEST(TokenizerDefaults, FixtureFiles) {
  for (const auto& [name, add_bos] :
       std::vector<std::pair<std::string, bool>>{{"llama-spm", true},
                                                 {"phi-3", true},
                                                 {"deepseek-llm", true},
                                                 {"deepseek-coder", true},
                                                 {"gpt-2", false},
                                                 {"falcon", false},
                                                 {"mpt", false},
                                                 {"starcoder", false},
                                                 {"refact", false}}) {
    const std::optional<Tokenizer> tok = open_fixture(name);
    ASSERT_TRUE(tok) << name;
    EXPECT_EQ(tok->add_bos(), add_bos) << name;
    EXPECT_FALSE(tok->add_eos()) << name;
    const Ids ids = tok->tokenize("Hello", true);
    ASSERT_FALSE(ids.empty());
    EXPECT_EQ(ids.front() == tok->bos(), add_bos) << name;
  }
}

// ---- special tokens and end of generation

TEST(TokenizerSpecial, ParseSpecialTurnsTextIntoControlTokens) {
  const std::optional<Tokenizer> tok = open_fixture("llama-spm");
  ASSERT_TRUE(tok);
  EXPECT_EQ(tok->tokenize("<s>Hello</s>", false, true), (Ids{1, 15043, 2}));
  const Ids literal = tok->tokenize("<s>Hello</s>", false, false);
  EXPECT_EQ(std::count(literal.begin(), literal.end(), 1), 0);
  EXPECT_EQ(std::count(literal.begin(), literal.end(), 2), 0);
  EXPECT_EQ(tok->detokenize(literal), "<s>Hello</s>");
  EXPECT_EQ(tok->detokenize(Ids{1, 15043, 2}), "Hello");
  EXPECT_EQ(tok->detokenize(Ids{1, 15043, 2}, {.render_special = true}), "<s> Hello</s>");
  EXPECT_EQ(tok->detokenize(Ids{1, 15043, 2}, {.remove_special = true}), "Hello");
}

// Plain ranges (the text of chat messages): a control token's text that
// overlaps one, even by a byte, is text; the same text outside is the token.
TEST(TokenizerSpecial, PlainRangesKeepControlTokenTextAsText) {
  const std::optional<Tokenizer> tok = open_fixture("llama-spm");
  ASSERT_TRUE(tok);
  const std::string text = "<s>Say </s> now</s>";  // [0,3) <s>, [7,11) </s>, [15,19) </s>
  const Ids all = tok->tokenize(text, false, true);
  EXPECT_EQ(std::count(all.begin(), all.end(), 2), 2);
  const std::vector<TextRange> message = {{3, 12}};  // "Say </s> now"
  const Ids safe = tok->tokenize(text, false, true, message);
  EXPECT_EQ(safe.front(), 1);
  EXPECT_EQ(safe.back(), 2);
  EXPECT_EQ(std::count(safe.begin(), safe.end(), 2), 1);  // only the one outside
  EXPECT_EQ(tok->detokenize(safe, {.render_special = true}), "<s> Say </s> now</s>");
  const std::vector<TextRange> one_byte = {{10, 1}};  // the '>' of the first </s>
  const Ids edge = tok->tokenize(text, false, true, one_byte);
  EXPECT_EQ(std::count(edge.begin(), edge.end(), 2), 1);
  // No ranges: the same tokens as without the argument.
  EXPECT_EQ(tok->tokenize(text, false, true, {}), all);
}

TEST(TokenizerSpecial, UserDefinedTokensAlwaysSplitOut) {
  const std::optional<Tokenizer> tok = open_fixture("mpt");
  ASSERT_TRUE(tok);
  EXPECT_EQ(tok->tokenize("<|endoftext|>", false, true), (Ids{0}));
  EXPECT_NE(tok->tokenize("<|endoftext|>", false, false), (Ids{0}));
  // Runs of spaces are user-defined tokens in this vocabulary.
  const std::optional<TokenId> four = tok->find("    ");
  ASSERT_TRUE(four.has_value());
  EXPECT_EQ(tok->token_type(*four), TokenType::kUserDefined);
  const Ids ids = tok->tokenize("a    b", false, false);
  EXPECT_NE(std::find(ids.begin(), ids.end(), *four), ids.end()) << joined(ids);
}

TEST(TokenizerSpecial, EndOfGeneration) {
  if (const std::optional<Tokenizer> tok = open_fixture("llama-spm")) {
    EXPECT_TRUE(tok->is_eog(2));
    EXPECT_FALSE(tok->is_eog(1));
    EXPECT_FALSE(tok->is_eog(-1));
    EXPECT_FALSE(tok->is_eog(32000));
  }
  if (const std::optional<Tokenizer> tok = open_fixture("phi-3")) {
    EXPECT_EQ(tok->eos(), 32000);
    EXPECT_TRUE(tok->is_eog(32000));
    EXPECT_TRUE(tok->is_eog(*tok->find("<|end|>")));
    EXPECT_EQ(tok->eot(), *tok->find("<|end|>"));
    EXPECT_FALSE(tok->is_eog(*tok->find("<|user|>")));
  }
  if (const std::optional<Tokenizer> tok = open_fixture("gpt-2")) {
    EXPECT_TRUE(tok->is_eog(50256));
    EXPECT_FALSE(tok->is_eog(50257));
  }
}

// ---- untrusted input: invalid UTF-8, random bytes, bad ids

const char* const kAll[] = {"llama-spm", "phi-3", "gpt-2",  "deepseek-coder", "deepseek-llm",
                            "falcon",    "mpt",   "refact", "starcoder"};

TEST(TokenizerInput, InvalidUtf8NeverThrows) {
  const std::string bad[] = {"\xff",
                             "\xc3",
                             "a\xe2\x82",
                             "\xed\xa0\x80",
                             "\xf4\x90\x80\x80",
                             "\xc0\xaf",
                             "\x80\x80 x",
                             std::string("a\0b", 3),
                             "\xf0\x9f\xa6"};
  for (const char* name : kAll) {
    const std::optional<Tokenizer> tok = open_fixture(name);
    ASSERT_TRUE(tok) << name;
    for (const std::string& text : bad) {
      Ids ids;
      ASSERT_NO_THROW(ids = tok->tokenize(text, true, true))
          << name << " '" << escaped(text) << "'";
      for (const TokenId id : ids) ASSERT_LT(static_cast<size_t>(id), tok->n_vocab());
      const std::string back =
          tok->detokenize(ids, {.remove_special = true, .clean_spaces = false});
      // SPM keeps the bytes (byte fallback); byte-level BPE sees U+FFFD per bad byte.
      EXPECT_EQ(back, tok->model() == TokenizerModel::kSpm ? text : sanitize_utf8(text))
          << name << " '" << escaped(text) << "'";
    }
  }
}

// What detokenize(tokenize(text)) gives on a byte-level BPE vocabulary:
// invalid UTF-8 as U+FFFD, and bytes with no byte-level token dropped (some
// vocabularies lack a few control bytes), as llama.cpp does.
std::string bpe_round_trip(const Tokenizer& tok, std::string_view text) {
  std::string out;
  for (const char c : sanitize_utf8(text)) {
    std::string encoded;
    append_byte_encoded(encoded, std::string_view(&c, 1));
    if (tok.find(encoded)) out += c;
  }
  return out;
}

TEST(TokenizerInput, RandomBytesRoundTrip) {
  std::mt19937 rng(12345);
  for (const char* name : kAll) {
    const std::optional<Tokenizer> tok = open_fixture(name);
    ASSERT_TRUE(tok) << name;
    for (int i = 0; i < 200; ++i) {
      std::string text(rng() % 64, '\0');
      for (char& c : text)
        c = static_cast<char>(i % 2 == 0 ? rng() % 256 : " a\n<|>s/0\xc3\xa9"[rng() % 11]);
      const Ids ids = tok->tokenize(text, false, i % 3 == 0);
      for (const TokenId id : ids) ASSERT_LT(static_cast<size_t>(id), tok->n_vocab()) << name;
      if (i % 3 == 0) continue;  // special-token text may have become a token
      const std::string back = tok->detokenize(ids, {.clean_spaces = false});
      EXPECT_EQ(back, tok->model() == TokenizerModel::kSpm ? text : bpe_round_trip(*tok, text))
          << name << " '" << escaped(text) << "'";
    }
  }
}

TEST(TokenizerInput, IdsAreRangeChecked) {
  const Tokenizer tok = tokenizer_from(spm_writer({"a"}, {0}));
  ASSERT_EQ(tok.n_vocab(), 260u);
  for (const TokenId bad : {-1, 260, 1 << 30}) {
    try {
      tok.detokenize(Ids{3, bad});
      FAIL() << bad;
    } catch (const Error& e) {
      EXPECT_EQ(e.category(), ErrorCategory::kInvalidArgument);
      EXPECT_NE(std::string(e.what()).find(fmt::format("found token id {}", bad)),
                std::string::npos)
          << e.what();
      EXPECT_NE(std::string(e.what()).find("position 1"), std::string::npos) << e.what();
    }
    EXPECT_THROW(tok.token_to_piece(bad), Error);
    EXPECT_THROW(tok.token_text(bad), Error);
    EXPECT_FALSE(tok.is_eog(bad));
  }
}

// One Tokenizer shared by threads (const methods are thread-safe).
TEST(TokenizerInput, ConcurrentTokenizeAgrees) {
  const std::optional<Tokenizer> tok = open_fixture("gpt-2");
  ASSERT_TRUE(tok);
  const std::string text = "Hello world! 123 4567 \xe4\xb8\x80\xe4\xba\x8c   spaces\n\ttabs";
  const Ids want = tok->tokenize(text, true);
  std::vector<std::thread> threads;
  std::atomic<int> mismatches = 0;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 200; ++i) {
        if (tok->tokenize(text, true) != want) ++mismatches;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(mismatches.load(), 0);
}

TEST(TokenizerInput, CleanSpacesFollowsTheModel) {
  const std::optional<Tokenizer> gpt2 = open_fixture("gpt-2");
  ASSERT_TRUE(gpt2);
  const Ids ids = gpt2->tokenize("Hello , world ! I 'm here .", false);
  EXPECT_EQ(gpt2->detokenize(ids), "Hello, world! I'm here.");
  EXPECT_EQ(gpt2->detokenize(ids, {.clean_spaces = false}), "Hello , world ! I 'm here .");
  if (const std::optional<Tokenizer> ds = open_fixture("deepseek-llm")) {  // no clean-up there
    EXPECT_EQ(ds->detokenize(ds->tokenize("a , b", false)), "a , b");
  }
}

TEST(TokenizerExtraVocab, OlderFilesLoad) {
  for (const char* name : {"baichuan", "gpt-neox"}) {
    const std::optional<Tokenizer> tok =
        open_tokenizer(fixture_dir() / "extra-vocab" / fmt::format("ggml-vocab-{}.gguf", name));
    ASSERT_TRUE(tok) << name;
    EXPECT_EQ(tok->pre_name(), "default") << name;  // no tokenizer.ggml.pre key
    const std::string text = "Hello world, 123 lines\n\tend";
    EXPECT_EQ(tok->detokenize(tok->tokenize(text, true), {.clean_spaces = false}), text) << name;
  }
}

}  // namespace
}  // namespace tessera::text::testing
