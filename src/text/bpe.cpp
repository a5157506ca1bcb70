// Byte-level BPE (GPT-2 style): split the text with the pre-tokenizer's
// regexes, map each word's bytes to the byte-level alphabet, then apply
// merges lowest rank first (leftmost on ties), as HF tokenizers do.
#include <queue>

#include "models.h"
#include "pre_tokenizer.h"
#include "unicode.h"

namespace tessera::text {
namespace {

struct Bigram {
  int32_t rank;
  size_t left;
  size_t right;
  size_t left_size;  // sizes when queued: either changed means stale
  size_t right_size;
};

struct LowerPriority {
  bool operator()(const Bigram& a, const Bigram& b) const {
    return a.rank > b.rank || (a.rank == b.rank && a.left > b.left);
  }
};

class Word {
 public:
  Word(const Vocab& vocab, std::string_view text) : vocab_(vocab), text_(text) {}

  void run(std::vector<TokenId>& out) {
    if (vocab_.ignore_merges) {
      if (const TokenId id = vocab_.find(text_); id != kNoToken) {
        out.push_back(id);
        return;
      }
    }
    for (size_t i = 0; i < text_.size();) {
      const size_t n = utf8_sequence_length(text_, i);
      const size_t len = n == 0 ? 1 : n;
      const auto index = static_cast<ptrdiff_t>(symbols_.size());
      symbols_.push_back({i, len, index - 1, i + len == text_.size() ? -1 : index + 1});
      i += len;
    }
    for (size_t i = 1; i < symbols_.size(); ++i) try_bigram(i - 1, i);
    while (!queue_.empty()) {
      const Bigram b = queue_.top();
      queue_.pop();
      Symbol& left = symbols_[b.left];
      Symbol& right = symbols_[b.right];
      if (left.size != b.left_size || right.size != b.right_size || right.size == 0) continue;
      merge_symbols(symbols_, b.left, b.right);
      if (left.prev >= 0) try_bigram(static_cast<size_t>(left.prev), b.left);
      if (left.next >= 0) try_bigram(b.left, static_cast<size_t>(left.next));
    }
    for (ptrdiff_t i = symbols_.empty() ? -1 : 0; i >= 0; i = symbols_[i].next)
      emit(symbols_[i], out);
  }

 private:
  void try_bigram(size_t left, size_t right) {
    const Symbol& l = symbols_[left];
    const Symbol& r = symbols_[right];
    key_.assign(text_.substr(l.begin, l.size));
    key_ += ' ';
    key_.append(text_.substr(r.begin, r.size));
    const auto it = vocab_.merge_ranks.find(key_);
    if (it == vocab_.merge_ranks.end()) return;
    queue_.push({it->second, left, right, l.size, r.size});
  }

  // A piece that is no token (a merge made a text the vocabulary lacks, or a
  // character with no token): its characters one by one, unknown ones as unk
  // when the model has one. llama.cpp drops what it cannot find.
  void emit(const Symbol& s, std::vector<TokenId>& out) const {
    const std::string_view piece = text_.substr(s.begin, s.size);
    if (const TokenId id = vocab_.find(piece); id != kNoToken) {
      out.push_back(id);
      return;
    }
    for (size_t i = 0; i < piece.size();) {
      const size_t n = utf8_sequence_length(piece, i);
      const size_t len = n == 0 ? 1 : n;
      const TokenId id = vocab_.find(piece.substr(i, len));
      if (id != kNoToken) {
        out.push_back(id);
      } else if (vocab_.unk != kNoToken) {
        out.push_back(vocab_.unk);
      }
      i += len;
    }
  }

  const Vocab& vocab_;
  std::string_view text_;
  std::string key_;
  std::vector<Symbol> symbols_;
  std::priority_queue<Bigram, std::vector<Bigram>, LowerPriority> queue_;
};

}  // namespace

void bpe_tokenize(const Vocab& vocab, const RegexSplitter& splitter, std::string_view text,
                  std::vector<TokenId>& out) {
  std::string encoded;
  for (const std::string_view word : splitter.split(text)) {
    encoded.clear();
    append_byte_encoded(encoded, word);
    Word(vocab, encoded).run(out);
  }
}

}  // namespace tessera::text
