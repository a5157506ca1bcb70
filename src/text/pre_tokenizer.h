// BPE pre-tokenizers: the regex splits HF tokenizers apply before byte-level
// BPE, chosen by `tokenizer.ggml.pre`, run with PCRE2 (UTF + UCP).
#pragma once

#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace tessera::text {

// What one `tokenizer.ggml.pre` value means (llama.cpp's per-type settings).
struct PreSpec {
  std::string_view name;                       // canonical name
  std::span<const std::string_view> patterns;  // applied in order, each splitting every piece
  bool add_bos = false;                        // default for tokenizer.ggml.add_bos_token
  bool clean_spaces = true;                    // HF clean_up_tokenization_spaces
  bool ignore_merges = false;                  // a word that is a token is taken whole
  bool no_bos = false;                         // the model has no BOS unless the file names one
};

// The spec for `name` ("" means absent: "default"), or nullptr if unknown.
const PreSpec* find_pre_spec(std::string_view name);
// Every accepted name, comma-separated, for error messages.
std::string known_pre_names();

// Splits text with a list of patterns, each applied to every piece the
// previous ones produced; the text between two matches becomes a piece too,
// so the pieces always cover the text. Thread-safe after construction.
class RegexSplitter {
 public:
  // Throws Error(kInternal) when a pattern does not compile (a bug here).
  explicit RegexSplitter(std::span<const std::string_view> patterns);
  RegexSplitter(RegexSplitter&&) noexcept;
  RegexSplitter& operator=(RegexSplitter&&) noexcept;
  ~RegexSplitter();

  // `text` must be well-formed UTF-8 (see sanitize_utf8). A match that hits a
  // PCRE2 resource limit leaves the rest of that piece unsplit.
  std::vector<std::string_view> split(std::string_view text) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tessera::text
