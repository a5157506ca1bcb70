// GBNF: parse errors with their positions, the matcher against std::regex on
// random strings, UTF-8 split across tokens, and the sampler stage against a
// token-by-token check of the whole vocabulary.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <regex>
#include <string>

#include "models/model_test_util.h"
#include "tessera/gguf.h"
#include "tessera/grammar.h"

namespace tessera::grammar {
namespace {

std::string error_of(std::string_view text) {
  try {
    Grammar::parse(text);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(GrammarParse, ErrorsNameLineAndColumn) {
  EXPECT_NE(error_of("root ::= \"a\" b\n").find("line 1, column 14: rule 'b' is used but never defined"),
            std::string::npos) << error_of("root ::= \"a\" b\n");
  EXPECT_NE(error_of("root ::= x\nx = \"a\"\n").find("line 2, column 3: expected '::='"), std::string::npos)
      << error_of("root ::= x\nx = \"a\"\n");
  EXPECT_NE(error_of("root ::= \"abc\n").find("unterminated literal"), std::string::npos);
  EXPECT_NE(error_of("root ::= [a-\n").find("line 1"), std::string::npos);
  EXPECT_NE(error_of("root ::= x \"a\"\nx ::= root | \"b\"\n").find("left-recursive"), std::string::npos)
      << error_of("root ::= x \"a\"\nx ::= root | \"b\"\n");
  EXPECT_NE(error_of("start ::= \"a\"\n").find("no rule 'root'"), std::string::npos);
  EXPECT_NE(error_of("root ::= \"a\"{3,2}\n").find("max < min"), std::string::npos);
  EXPECT_NE(error_of("root ::= \"\\q\"\n").find("unknown escape"), std::string::npos);
  EXPECT_EQ(error_of("# a comment\nroot ::= ( \"a\"\n  | \"b\" ) # trailing\n\nother ::= [^\\n]*\n"), "");
}

bool matches(const std::shared_ptr<const Grammar>& g, const std::string& s) {
  Matcher m(g);
  if (!m.allows(s)) return false;
  m.accept(s);
  return m.can_end();
}

TEST(GrammarMatch, RepetitionsAndAlternatives) {
  const auto g = Grammar::parse("root ::= \"a\" [0-9]{2,3} (\"x\" | \"yz\")*\n");
  for (const char* ok : {"a12", "a123", "a12x", "a123yzx", "a99xxyz"}) EXPECT_TRUE(matches(g, ok)) << ok;
  for (const char* bad : {"a1", "a1234", "b12", "a12y", "a12yx", ""}) EXPECT_FALSE(matches(g, bad)) << bad;
  Matcher m(g);
  EXPECT_TRUE(m.allows("a12y"));  // a prefix that may still end well
  EXPECT_FALSE(m.allows("a12q"));
  const auto fixed = Grammar::parse("root ::= \"ab\"{2}\n");
  Matcher f(fixed);
  f.accept("abab");
  EXPECT_TRUE(f.must_end());
}

// A regular grammar and the same language as an ECMAScript regex: on random
// strings over a small alphabet, both agree on every whole string and the
// matcher allows exactly the prefixes of some member.
TEST(GrammarMatch, AgreesWithARegexOnRandomStrings) {
  const auto g = Grammar::parse(
      "root ::= (\"ab\" | [c-e]+)? \"-\" tail\n"
      "tail ::= [^a]{1,2} | \"a\"+ \".\"\n");
  const std::regex re("^(ab|[c-e]+)?-([^a]{1,2}|a+\\.)$");
  std::mt19937 rng(std::random_device{}());
  const std::string alphabet = "abcde-.x";
  int members = 0;
  for (int i = 0; i < 4000; ++i) {
    std::string s;
    const int n = static_cast<int>(rng() % 7);
    for (int k = 0; k < n; ++k) s += alphabet[rng() % alphabet.size()];
    const bool want = std::regex_match(s, re);
    members += want;
    EXPECT_EQ(matches(g, s), want) << "'" << s << "'";
  }
  EXPECT_GT(members, 50);  // the sample reaches the language, not only its outside
}

TEST(GrammarMatch, Utf8SplitAcrossPiecesAndInvalidBytes) {
  const auto g = Grammar::parse("root ::= [\\u03b1-\\u03c9]+ \"!\"\n");  // Greek small letters
  const std::string text = "\xce\xb1\xce\xb2\xcf\x89!";              // "αβω!"
  for (size_t cut = 0; cut <= text.size(); ++cut) {
    Matcher m(g);
    ASSERT_TRUE(m.allows(text.substr(0, cut))) << cut;
    m.accept(text.substr(0, cut));
    EXPECT_EQ(m.can_end(), cut == text.size());
    m.accept(text.substr(cut));
    EXPECT_TRUE(m.can_end());
  }
  Matcher m(g);
  EXPECT_FALSE(m.allows("\xce\x41"));       // a broken sequence
  EXPECT_FALSE(m.allows("\xd0\xb0"));       // Cyrillic а: valid UTF-8, not in the class
  EXPECT_FALSE(m.allows("\xc0\x80"));       // overlong
  EXPECT_TRUE(m.allows("\xce"));            // may still become α..ο
  EXPECT_FALSE(m.allows("\xd1"));           // U+0440.. cannot
}

class GrammarStageTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    file_ = new gguf::File(gguf::File::open(testing::stories()));
    tok_ = new Tokenizer(Tokenizer::from_gguf(*file_));
  }
  static void TearDownTestSuite() {
    delete tok_;
    delete file_;
  }
  static gguf::File* file_;
  static Tokenizer* tok_;
};
gguf::File* GrammarStageTest::file_ = nullptr;
Tokenizer* GrammarStageTest::tok_ = nullptr;

// The mask equals a check of every token's bytes with a matcher, step after
// step of a generation from random logits; the output is in the language.
TEST_F(GrammarStageTest, MaskEqualsPerTokenCheckAndOutputFitsTheGrammar) {
  const auto g = Grammar::parse(
      "root ::= \"The \" animal \" \" verb (\", and \" verb)? \".\"\n"
      "animal ::= \"cat\" | \"dog\" | \"bird\" | [a-z]{3,6}\n"
      "verb ::= \"ran\" | \"jumped\" | \"sat\"\n");
  std::mt19937 rng(std::random_device{}());
  std::normal_distribution<float> normal(0.0f, 3.0f);
  const auto n = static_cast<int32_t>(tok_->n_vocab());
  for (int trial = 0; trial < 5; ++trial) {
    auto stage = grammar::stage(g, *tok_);
    stage->accept(tok_->bos());  // a prompt token before the first apply: ignored
    Matcher ref(g);
    std::string out;
    for (int step = 0; step < 64; ++step) {
      Candidates c;
      for (int32_t id = 0; id < n; ++id) c.data.push_back({id, normal(rng)});
      stage->apply(c);
      int32_t best = -1;
      for (const TokenData& t : c.data) {
        const std::string piece = tok_->token_to_piece(t.id, false);
        const bool want = tok_->is_eog(t.id) ? ref.can_end() : !piece.empty() && ref.allows(piece);
        ASSERT_EQ(std::isfinite(t.logit), want) << "token " << t.id << " '" << piece << "' after '" << out << "'";
        if (want && (best < 0 || t.logit > c.data[static_cast<size_t>(best)].logit)) best = t.id;
      }
      ASSERT_GE(best, 0);
      if (tok_->is_eog(best)) break;
      stage->accept(best);
      ref.accept(tok_->token_to_piece(best, false));
      out += tok_->token_to_piece(best, false);
      if (ref.must_end()) break;
    }
    EXPECT_TRUE(ref.can_end()) << out;
    EXPECT_TRUE(std::regex_match(out, std::regex("^The (cat|dog|bird|[a-z]{3,6}) (ran|jumped|sat)(, and (ran|jumped|sat))?\\.$")))
        << out;
  }
}

}  // namespace
}  // namespace tessera::grammar
