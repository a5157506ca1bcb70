// The tokenizer algorithms, applied to one fragment of text (special
// tokens already split out).
#pragma once

#include <cstddef>
#include <string_view>
#include <vector>

#include "vocab.h"

namespace tessera::text {

// One piece of text in a merge loop: a doubly linked list over the input.
struct Symbol {
  size_t begin;    // into the text
  size_t size;     // 0 once merged into its left neighbour
  ptrdiff_t prev;  // -1 at the ends
  ptrdiff_t next;
};

// Merges symbols[left] with its right neighbour `right` and unlinks it.
inline void merge_symbols(std::vector<Symbol>& symbols, size_t left, size_t right) {
  Symbol& l = symbols[left];
  Symbol& r = symbols[right];
  l.size += r.size;
  r.size = 0;
  l.next = r.next;
  if (r.next >= 0) symbols[static_cast<size_t>(r.next)].prev = static_cast<ptrdiff_t>(left);
}

class RegexSplitter;

// SentencePiece-style: `text` has its spaces already escaped to U+2581. Any
// bytes (valid UTF-8 or not); pieces that are no token fall back to byte
// tokens, then to unk.
void spm_tokenize(const Vocab& vocab, std::string_view text, std::vector<TokenId>& out);

// Byte-level BPE: `text` must be well-formed UTF-8 (see sanitize_utf8).
void bpe_tokenize(const Vocab& vocab, const RegexSplitter& splitter, std::string_view text,
                  std::vector<TokenId>& out);

// WordPiece (bert): any bytes; normalized and split into words as BERT does,
// each word matched greedily, longest piece first.
void wpm_tokenize(const Vocab& vocab, std::string_view text, std::vector<TokenId>& out);

}  // namespace tessera::text
