// The vocabulary a Tokenizer needs, copied out of a GGUF file's
// `tokenizer.ggml.*` metadata and checked as untrusted input.
#pragma once

#include <array>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tessera/text/tokenizer.h"

namespace tessera::gguf {
class File;
}

namespace tessera::text {

struct PreSpec;
struct UgmTables;

struct TextHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
template <class V>
using TextMap = std::unordered_map<std::string, V, TextHash, std::equal_to<>>;

struct Vocab {
  TokenizerModel model = TokenizerModel::kSpm;
  std::string model_name;        // tokenizer.ggml.model
  std::string pre_name;          // tokenizer.ggml.pre, "default" when absent
  const PreSpec* pre = nullptr;  // gpt2 only

  std::vector<std::string> texts;  // [n_vocab]
  std::vector<float> scores;       // [n_vocab], 0 when the file has none
  std::vector<TokenType> types;    // [n_vocab], kNormal when the file has none
  TextMap<TokenId> ids;            // non-empty texts only
  // gpt2: "LEFT RIGHT" -> rank. Byte-level symbols never hold a raw space,
  // so LEFT + ' ' + RIGHT finds exactly the merges llama.cpp finds.
  TextMap<int32_t> merge_ranks;
  // llama: the `<0xNN>` token (or the one-byte token) for each byte.
  std::array<TokenId, 256> byte_tokens{};
  // Control, user-defined and unknown tokens with text, longest first: the
  // order in which tokenize() splits them out of the input.
  std::vector<TokenId> special_tokens;
  std::vector<bool> eog;  // [n_vocab]

  TokenId bos = kNoToken, eos = kNoToken, eot = kNoToken, eom = kNoToken;
  TokenId unk = kNoToken, pad = kNoToken, sep = kNoToken;
  bool add_bos = false;
  bool add_eos = false;
  bool add_sep = false;  // bert: SEP closes a text (and the second of a pair)
  bool add_space_prefix = false;
  bool clean_spaces = false;
  bool ignore_merges = false;
  // bert: BertNormalizer's options (tokenizer.ggml.normalizer.*), and the
  // longest token text in bytes (WordPiece's longest match).
  bool lowercase = true;
  bool strip_accents = true;
  size_t max_token_bytes = 0;
  // t5 (Unigram): SentencePiece's remove_extra_whitespaces, and the tables
  // from the pieces and tokenizer.ggml.precompiled_charsmap.
  bool remove_extra_whitespaces = false;
  std::shared_ptr<const UgmTables> ugm;

  size_t size() const { return texts.size(); }
  TokenId find(std::string_view text) const {
    const auto it = ids.find(text);
    return it == ids.end() ? kNoToken : it->second;
  }
};

// Throws Error(kInvalidFile) for malformed metadata and Error(kUnsupported)
// for models this build cannot run.
Vocab load_vocab(const gguf::File& file);

// The byte a `<0xNN>` token stands for (exactly two hex digits), or -1.
int parse_byte_token(std::string_view text);

}  // namespace tessera::text
