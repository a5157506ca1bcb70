// SentencePiece-style merging by score (llama.cpp's SPM tokenizer): start
// from single characters, repeatedly merge the adjacent pair whose
// concatenation is the highest-scored token (leftmost on ties), then emit
// each piece as its token or as byte tokens.
#include <queue>

#include "models.h"
#include "unicode.h"

namespace tessera::text {
namespace {

struct Bigram {
  float score;
  size_t left;
  size_t right;
  size_t size;  // bytes of the merged text when queued; a mismatch means stale
};

struct LowerPriority {
  bool operator()(const Bigram& a, const Bigram& b) const {
    return a.score < b.score || (a.score == b.score && a.left > b.left);
  }
};

class Session {
 public:
  Session(const Vocab& vocab, std::string_view text) : vocab_(vocab), text_(text) {}

  void run(std::vector<TokenId>& out) {
    for (size_t i = 0; i < text_.size();) {
      const size_t n = utf8_sequence_length(text_, i);
      const size_t len = n == 0 ? 1 : n;  // a stray byte stands alone
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
      if (left.size == 0 || right.size == 0 || left.size + right.size != b.size) continue;
      merge_symbols(symbols_, b.left, b.right);
      if (left.prev >= 0) try_bigram(static_cast<size_t>(left.prev), b.left);
      if (left.next >= 0) try_bigram(b.left, static_cast<size_t>(left.next));
    }
    for (ptrdiff_t i = symbols_.empty() ? -1 : 0; i >= 0; i = symbols_[i].next)
      emit(symbols_[i], out);
  }

 private:
  std::string_view piece(const Symbol& s) const { return text_.substr(s.begin, s.size); }

  void try_bigram(size_t left, size_t right) {
    const std::string_view merged =
        text_.substr(symbols_[left].begin, symbols_[left].size + symbols_[right].size);
    const TokenId id = vocab_.find(merged);
    if (id == kNoToken) return;
    queue_.push({vocab_.scores[id], left, right, merged.size()});
  }

  void emit(const Symbol& s, std::vector<TokenId>& out) const {
    const std::string_view text = piece(s);
    if (const TokenId id = vocab_.find(text); id != kNoToken) {
      out.push_back(id);
      return;
    }
    for (const char c : text) {
      const TokenId byte = vocab_.byte_tokens[static_cast<unsigned char>(c)];
      if (byte != kNoToken) {
        out.push_back(byte);
      } else if (vocab_.unk != kNoToken) {
        out.push_back(vocab_.unk);
      }
    }
  }

  const Vocab& vocab_;
  std::string_view text_;
  std::vector<Symbol> symbols_;
  std::priority_queue<Bigram, std::vector<Bigram>, LowerPriority> queue_;
};

}  // namespace

void spm_tokenize(const Vocab& vocab, std::string_view text, std::vector<TokenId>& out) {
  Session(vocab, text).run(out);
}

}  // namespace tessera::text
