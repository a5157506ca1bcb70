// The tokenizer algorithms, applied to one fragment of text (special
// tokens already split out).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
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

// Token texts in a byte trie: each node's edges contiguous and sorted.
struct ByteTrie {
  static constexpr uint32_t kNone = UINT32_MAX;
  struct Node {
    uint32_t first_edge = 0, n_edges = 0;
    TokenId token = kNoToken;  // the token whose text ends here
  };
  struct Edge {
    uint8_t byte;
    uint32_t child;
  };
  std::vector<Node> nodes;  // nodes[0]: the root
  std::vector<Edge> edges;

  static ByteTrie build(const std::vector<std::string>& texts, const std::vector<TokenId>& ids);
  uint32_t child(uint32_t node, uint8_t byte) const;  // kNone when there is none
  size_t path_length(std::string_view s) const;       // bytes of s the trie's edges follow
};

// Unigram (t5): what the Viterbi walk reads, built at load.
struct UgmTables {
  std::vector<uint32_t> xcda;  // the charsmap's double array
  std::string replacements;    // its NUL-ended replacement strings
  ByteTrie pieces;             // normal, user-defined and unused tokens
  ByteTrie user_defined;       // kept whole by the normalizer
  double unknown_score = 0;    // the lowest normal score, less 10
};

// Throws Error(kInvalidFile) for a charsmap a match could leave (its double
// array, or a replacement past its strings).
UgmTables build_ugm_tables(const Vocab& vocab, std::string_view precompiled_charsmap);

// Unigram (t5): any bytes; normalized as the vocabulary says, then the
// segmentation of highest total score. Never throws on its input.
void ugm_tokenize(const Vocab& vocab, std::string_view text, std::vector<TokenId>& out);

}  // namespace tessera::text
