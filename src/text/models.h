// The two tokenizer algorithms, applied to one fragment of text (special
// tokens already split out).
#pragma once

#include <string_view>
#include <vector>

#include "text/vocab.h"

namespace tessera::text {

class RegexSplitter;

// SentencePiece-style: `text` has its spaces already escaped to U+2581. Any
// bytes (valid UTF-8 or not); pieces that are no token fall back to byte
// tokens, then to unk.
void spm_tokenize(const Vocab& vocab, std::string_view text, std::vector<TokenId>& out);

// Byte-level BPE: `text` must be well-formed UTF-8 (see sanitize_utf8).
void bpe_tokenize(const Vocab& vocab, const RegexSplitter& splitter, std::string_view text,
                  std::vector<TokenId>& out);

}  // namespace tessera::text
