// Tokenizers built from a GGUF file's `tokenizer.ggml.*` metadata, with
// llama.cpp's behaviour: `llama` (SentencePiece-style, scored merges with
// byte fallback) and `gpt2` (byte-level BPE with merge ranks and a
// pre-tokenizer chosen by `tokenizer.ggml.pre`). `bert` (WordPiece) and the
// other models are refused with Error(kUnsupported).
//
// A Tokenizer owns copies of everything it needs: the gguf::File may be
// closed right after from_gguf() returns. Const methods are thread-safe.
//
// Loading checks the metadata as untrusted input and throws
// Error(kInvalidFile) "[tokenizer KEY] found X, expected Y": element types,
// equal lengths of tokens/scores/token_type, special ids below n_vocab, token
// text at most kMaxTokenBytes, no duplicate tokens, well-formed merges and
// byte tokens (`<0xNN>`).
//
// tokenize() never throws on its input: invalid UTF-8 becomes byte tokens
// (llama) or U+FFFD (gpt2), as llama.cpp does. Every id handed to
// detokenize() or token_to_piece() is range-checked.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace tessera {

namespace gguf {
class File;
}

using TokenId = int32_t;
inline constexpr TokenId kNoToken = -1;

// The longest token text a vocabulary may hold, in bytes.
inline constexpr size_t kMaxTokenBytes = 64 * 1024;

// `tokenizer.ggml.token_type` values (llama.cpp's llama_token_type).
enum class TokenType : uint8_t {
  kUndefined = 0,
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6,
};

enum class TokenizerModel {
  kSpm,  // tokenizer.ggml.model = "llama"
  kBpe,  // tokenizer.ggml.model = "gpt2"
  kWpm,  // tokenizer.ggml.model = "bert" (WordPiece)
  kUgm,  // tokenizer.ggml.model = "t5" (Unigram: T5, XLM-RoBERTa)
};

// Bytes [begin, begin + size) of a text.
struct TextRange {
  size_t begin = 0;
  size_t size = 0;
};

struct DetokenizeOptions {
  // Drop a leading BOS when the model adds one, and a trailing EOS likewise.
  bool remove_special = false;
  // Render control and unknown tokens as their text; otherwise they render
  // as nothing.
  bool render_special = false;
  // Apply the model's clean-up of spaces before punctuation (" ," -> ","),
  // as HF's clean_up_tokenization_spaces; only gpt2 pre-tokenizers that use
  // it (gpt-2, falcon, mpt, starcoder, refact, default, ...) have one.
  bool clean_spaces = true;
};

class Tokenizer {
 public:
  // Reads the tokenizer from `file`'s metadata. Throws Error(kInvalidFile)
  // for malformed metadata, Error(kUnsupported) for an unknown or not yet
  // implemented tokenizer model or pre-tokenizer.
  static Tokenizer from_gguf(const gguf::File& file);

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  TokenizerModel model() const;
  std::string_view model_name() const;  // "llama", "gpt2"
  std::string_view pre_name() const;    // tokenizer.ggml.pre, "default" when absent
  size_t n_vocab() const;

  // Text to ids. add_special: BOS/EOS as the model asks (add_bos()/add_eos()).
  // parse_special: text of control tokens becomes those tokens; user-defined
  // tokens are always split out, as in llama.cpp and HF tokenizers.
  std::vector<TokenId> tokenize(std::string_view text, bool add_special,
                                bool parse_special = false) const;
  // As above, but no special token is taken from a match that overlaps one
  // of `plain` (sorted, not overlapping): those bytes are text whatever
  // they spell. Elsewhere the tokens are those of the call above.
  std::vector<TokenId> tokenize(std::string_view text, bool add_special, bool parse_special,
                                std::span<const TextRange> plain) const;

  // Ids to text. Throws Error(kInvalidArgument) naming the first id outside
  // [0, n_vocab). With a space prefix (llama), the first rendered piece loses
  // one leading space, so detokenize(tokenize(x)) == x.
  std::string detokenize(std::span<const TokenId> ids, const DetokenizeOptions& options = {}) const;
  // The text one token stands for (bytes for byte tokens, spaces for U+2581,
  // the byte-level map undone for gpt2). Control and unknown tokens render
  // as their text only with render_special. Throws like detokenize().
  std::string token_to_piece(TokenId id, bool render_special = true) const;

  // The vocabulary entry as stored in the file. Throws on a bad id.
  std::string_view token_text(TokenId id) const;
  TokenType token_type(TokenId id) const;
  float token_score(TokenId id) const;
  // The id whose text is exactly `text`, if any.
  std::optional<TokenId> find(std::string_view text) const;

  // Special ids; kNoToken when the model has none.
  TokenId bos() const;
  TokenId eos() const;
  TokenId eot() const;
  TokenId eom() const;
  TokenId unk() const;
  TokenId pad() const;
  TokenId sep() const;
  bool add_bos() const;
  bool add_eos() const;
  // bert: whether a pair of texts is joined by [SEP] (rerankers' input).
  bool add_sep() const;
  bool add_space_prefix() const;  // llama only: a space before text (key add_space_prefix)
  // End of generation: eos, eot, eom and known end-of-turn tokens
  // ("<|eot_id|>", "<|im_end|>", "<|end|>", ...). False for any id out of range.
  bool is_eog(TokenId id) const;

 private:
  struct Impl;
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace tessera
