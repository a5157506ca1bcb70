// WordPiece, as llama.cpp runs BERT's vocabularies (docs/text.md, "Tokenizers"):
// the converter stores word-initial pieces with a U+2581 prefix and "##"
// continuations bare, so a word is matched greedily, longest piece first,
// from U+2581 + word; a word with a position no piece matches becomes [UNK].
#include <algorithm>
#include <string>

#include "models.h"
#include "unicode.h"

namespace tessera::text {
namespace {

// Pieces longer than this are not tried: a vocabulary's longest token bounds
// the work per byte of input (BERT vocabularies' longest is under 30 bytes).
constexpr size_t kMaxPieceBytes = 128;

// CJK ideographs (BERT's _is_chinese_char): each one a word of its own.
bool is_cjk(char32_t cp) {
  return (cp >= 0x4E00 && cp <= 0x9FFF) || (cp >= 0x3400 && cp <= 0x4DBF) ||
         (cp >= 0x20000 && cp <= 0x2A6DF) || (cp >= 0x2A700 && cp <= 0x2B73F) ||
         (cp >= 0x2B740 && cp <= 0x2B81F) || (cp >= 0x2B820 && cp <= 0x2CEAF) ||
         (cp >= 0xF900 && cp <= 0xFAFF) || (cp >= 0x2F800 && cp <= 0x2FA1F);
}

// BertNormalizer and BertPreTokenizer: accents stripped (a precomposed letter
// to its base, combining marks dropped) and lower-cased as the vocabulary
// asks; NUL, U+FFFD and control characters dropped; words split at
// whitespace; punctuation, ASCII symbols and CJK ideographs one-character words.
std::vector<std::string> words_of(const Vocab& v, std::string_view text) {
  std::vector<std::string> words(1);
  for (char32_t cp : decode_utf8(text)) {
    if (v.strip_accents) cp = nfd_first(cp);
    if (is_unicode_whitespace(cp)) {
      if (!words.back().empty()) words.emplace_back();
      continue;
    }
    const UnicodeClass cls = unicode_class(cp);
    if (cp == 0 || cp == 0xFFFD || cls == UnicodeClass::kControl) continue;
    if (v.strip_accents && cls == UnicodeClass::kMark) continue;
    if (v.lowercase) cp = unicode_tolower(cp);
    if (cls == UnicodeClass::kPunctuation || (cp < 0x7F && cls == UnicodeClass::kSymbol) || is_cjk(cp)) {
      if (!words.back().empty()) words.emplace_back();
      append_utf8(words.back(), cp);
      words.emplace_back();
    } else {
      append_utf8(words.back(), cp);
    }
  }
  if (words.back().empty()) words.pop_back();
  return words;
}

}  // namespace

void wpm_tokenize(const Vocab& v, std::string_view text, std::vector<TokenId>& out) {
  const size_t longest = std::min(v.max_token_bytes, kMaxPieceBytes);
  std::string word;
  for (const std::string& w : words_of(v, text)) {
    word = "\xE2\x96\x81";
    word += w;
    const std::string_view s = word;
    const size_t start = out.size();
    for (size_t i = 0; i < s.size();) {
      size_t j = std::min(s.size(), i + longest);
      TokenId id = kNoToken;
      for (; j > i; --j) {
        id = v.find(s.substr(i, j - i));
        if (id != kNoToken) break;
      }
      if (id == kNoToken) {  // no piece here: the whole word is unknown
        out.resize(start);
        break;
      }
      out.push_back(id);
      i = j;
    }
    if (out.size() == start && v.unk != kNoToken) out.push_back(v.unk);
  }
}

}  // namespace tessera::text
