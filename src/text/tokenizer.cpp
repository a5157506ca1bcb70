#include "tessera/text/tokenizer.h"

#include <algorithm>
#include <optional>
#include <span>

#include "models.h"
#include "pre_tokenizer.h"
#include "tessera/core/error.h"
#include "tessera/gguf/gguf.h"
#include "unicode.h"
#include "vocab.h"

namespace tessera {

using text::Vocab;

struct Tokenizer::Impl {
  Vocab vocab;
  std::optional<text::RegexSplitter> splitter;  // gpt2 only

  void check_id(TokenId id, std::string_view where, size_t position = 0) const {
    if (id >= 0 && static_cast<size_t>(id) < vocab.size()) return;
    fail(ErrorCategory::kInvalidArgument,
         "[tokenizer {}{}] found token id {}, expected 0 <= id < {}", where,
         position > 0 ? fmt::format(", position {}", position - 1) : std::string(), id,
         vocab.size());
  }

  // One token's text as it reads in the output (no space stripping, no clean-up).
  void append_piece(TokenId id, bool render_special, std::string& out) const {
    const std::string& text = vocab.texts[id];
    switch (vocab.types[id]) {
      case TokenType::kControl:
      case TokenType::kUnknown:
        if (render_special) out += text;
        return;
      case TokenType::kUserDefined:
        out += text;
        return;
      case TokenType::kByte:
        out += static_cast<char>(text::parse_byte_token(text));  // checked at load
        return;
      case TokenType::kNormal:
        if (vocab.model != TokenizerModel::kBpe) {  // U+2581 is a space
          append_unescaped(text, out);
        } else {
          text::append_byte_decoded(out, text);
        }
        return;
      case TokenType::kUndefined:
      case TokenType::kUnused:
        return;  // rendered as nothing, as llama.cpp does
    }
  }

  static void append_unescaped(std::string_view text, std::string& out) {
    constexpr std::string_view kSpace = "\xE2\x96\x81";  // U+2581
    for (size_t pos = 0;;) {
      const size_t hit = text.find(kSpace, pos);
      out.append(text.substr(pos, hit == std::string_view::npos ? hit : hit - pos));
      if (hit == std::string_view::npos) return;
      out += ' ';
      pos = hit + kSpace.size();
    }
  }

  struct Fragment {
    TokenId token;  // kNoToken for text
    size_t begin;
    size_t size;
  };

  // Whether [at, at + n) overlaps a range of `plain` (sorted).
  static bool overlaps(std::span<const TextRange> plain, size_t at, size_t n) {
    const auto it = std::upper_bound(plain.begin(), plain.end(), at, [](size_t x, const TextRange& r) {
      return x < r.begin + r.size;
    });
    return it != plain.end() && it->begin < at + n;
  }

  // Splits special tokens out of `text`, longest first, as llama.cpp does:
  // each token splits every remaining text fragment at its occurrences.
  std::vector<Fragment> partition(std::string_view text, bool parse_special,
                                  std::span<const TextRange> plain = {}) const {
    std::vector<Fragment> frags;
    if (text.empty()) return frags;
    frags.push_back({kNoToken, 0, text.size()});
    std::vector<Fragment> next;
    for (const TokenId id : vocab.special_tokens) {
      const TokenType type = vocab.types[id];
      if (!parse_special && type != TokenType::kUserDefined) continue;
      const std::string_view special = vocab.texts[id];
      next.clear();
      bool split = false;
      for (const Fragment& f : frags) {
        if (f.token != kNoToken || f.size < special.size()) {
          next.push_back(f);
          continue;
        }
        const std::string_view body = text.substr(f.begin, f.size);
        size_t pos = 0;
        for (size_t hit = body.find(special); hit != std::string_view::npos;
             hit = body.find(special, pos)) {
          if (type != TokenType::kUserDefined && overlaps(plain, f.begin + hit, special.size())) {
            hit = body.find(special, hit + 1);  // text here: look past it
            while (hit != std::string_view::npos &&
                   overlaps(plain, f.begin + hit, special.size())) {
              hit = body.find(special, hit + 1);
            }
            if (hit == std::string_view::npos) break;
          }
          if (hit > pos) next.push_back({kNoToken, f.begin + pos, hit - pos});
          next.push_back({id, 0, 0});
          pos = hit + special.size();
          split = true;
        }
        if (pos < f.size) next.push_back({kNoToken, f.begin + pos, f.size - pos});
      }
      if (split) frags.swap(next);
    }
    return frags;
  }
};

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

Tokenizer Tokenizer::from_gguf(const gguf::File& file) {
  auto impl = std::make_unique<Impl>();
  impl->vocab = text::load_vocab(file);
  if (impl->vocab.model == TokenizerModel::kBpe) impl->splitter.emplace(impl->vocab.pre->patterns);
  return Tokenizer(std::move(impl));
}

TokenizerModel Tokenizer::model() const {
  return impl_->vocab.model;
}
std::string_view Tokenizer::model_name() const {
  return impl_->vocab.model_name;
}
std::string_view Tokenizer::pre_name() const {
  return impl_->vocab.pre_name;
}
size_t Tokenizer::n_vocab() const {
  return impl_->vocab.size();
}

std::vector<TokenId> Tokenizer::tokenize(std::string_view text, bool add_special,
                                         bool parse_special) const {
  return tokenize(text, add_special, parse_special, {});
}

std::vector<TokenId> Tokenizer::tokenize(std::string_view text, bool add_special, bool parse_special,
                                         std::span<const TextRange> plain) const {
  const Vocab& v = impl_->vocab;
  std::vector<TokenId> out;
  out.reserve(text.size() / 2 + 2);
  if (add_special && v.add_bos) out.push_back(v.bos);
  bool after_special = true;  // SPM: a text fragment at the start or after a token gets a space
  std::string buffer;
  for (const Impl::Fragment& f : impl_->partition(text, parse_special, plain)) {
    if (f.token != kNoToken) {
      out.push_back(f.token);
      after_special = true;
      continue;
    }
    const std::string_view raw = text.substr(f.begin, f.size);
    if (v.model == TokenizerModel::kSpm) {
      buffer.clear();
      if (v.add_space_prefix && after_special) buffer += "\xE2\x96\x81";
      for (const char c : raw) {
        if (c == ' ') {
          buffer += "\xE2\x96\x81";
        } else {
          buffer += c;
        }
      }
      text::spm_tokenize(v, buffer, out);
    } else if (v.model == TokenizerModel::kWpm) {
      text::wpm_tokenize(v, raw, out);
    } else if (v.model == TokenizerModel::kUgm) {
      text::ugm_tokenize(v, raw, out);
    } else {
      text::bpe_tokenize(v, *impl_->splitter, text::sanitize_utf8(raw), out);
    }
    after_special = false;
  }
  if (add_special && v.add_eos) out.push_back(v.eos);
  if (add_special && v.model == TokenizerModel::kWpm) out.push_back(v.sep);  // as llama.cpp
  return out;
}

std::string Tokenizer::detokenize(std::span<const TokenId> ids,
                                  const DetokenizeOptions& options) const {
  const Vocab& v = impl_->vocab;
  for (size_t i = 0; i < ids.size(); ++i) {
    impl_->check_id(ids[i], "detokenize", i + 1);
  }
  if (options.remove_special && v.add_bos && !ids.empty() && ids.front() == v.bos) {
    ids = ids.subspan(1);
  }
  if (options.remove_special && v.add_eos && !ids.empty() && ids.back() == v.eos) {
    ids = ids.first(ids.size() - 1);
  }
  std::string out;
  // The space tokenize() put in front goes from the first piece that renders
  // text (SentencePiece and HF strip it the same way, BOS or not).
  bool strip_space = v.add_space_prefix;
  for (const TokenId id : ids) {
    const size_t before = out.size();
    impl_->append_piece(id, options.render_special, out);
    if (strip_space && out.size() > before) {
      if (out[before] == ' ') out.erase(before, 1);
      strip_space = false;
    }
  }
  if (options.clean_spaces && v.clean_spaces) {
    // HF's clean_up_tokenization, replacement by replacement.
    constexpr std::pair<std::string_view, std::string_view> kRules[] = {
        {" .", "."},     {" ?", "?"},   {" !", "!"},   {" ,", ","},     {" ' ", "'"},
        {" n't", "n't"}, {" 'm", "'m"}, {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"},
    };
    for (const auto& [from, to] : kRules) {
      std::string cleaned;
      cleaned.reserve(out.size());
      size_t pos = 0;
      for (size_t hit = out.find(from); hit != std::string::npos; hit = out.find(from, pos)) {
        cleaned.append(out, pos, hit - pos);
        cleaned += to;
        pos = hit + from.size();
      }
      cleaned.append(out, pos);
      out.swap(cleaned);
    }
  }
  return out;
}

std::string Tokenizer::token_to_piece(TokenId id, bool render_special) const {
  impl_->check_id(id, "token_to_piece");
  std::string out;
  impl_->append_piece(id, render_special, out);
  return out;
}

std::string_view Tokenizer::token_text(TokenId id) const {
  impl_->check_id(id, "token_text");
  return impl_->vocab.texts[id];
}

TokenType Tokenizer::token_type(TokenId id) const {
  impl_->check_id(id, "token_type");
  return impl_->vocab.types[id];
}

float Tokenizer::token_score(TokenId id) const {
  impl_->check_id(id, "token_score");
  return impl_->vocab.scores[id];
}

std::optional<TokenId> Tokenizer::find(std::string_view text) const {
  const TokenId id = impl_->vocab.find(text);
  if (id == kNoToken) return std::nullopt;
  return id;
}

TokenId Tokenizer::bos() const {
  return impl_->vocab.bos;
}
TokenId Tokenizer::eos() const {
  return impl_->vocab.eos;
}
TokenId Tokenizer::eot() const {
  return impl_->vocab.eot;
}
TokenId Tokenizer::eom() const {
  return impl_->vocab.eom;
}
TokenId Tokenizer::unk() const {
  return impl_->vocab.unk;
}
TokenId Tokenizer::pad() const {
  return impl_->vocab.pad;
}
TokenId Tokenizer::sep() const {
  return impl_->vocab.sep;
}
bool Tokenizer::add_bos() const {
  return impl_->vocab.add_bos;
}
bool Tokenizer::add_eos() const {
  return impl_->vocab.add_eos;
}
bool Tokenizer::add_sep() const {
  return impl_->vocab.add_sep;
}
bool Tokenizer::add_space_prefix() const {
  return impl_->vocab.add_space_prefix;
}

bool Tokenizer::is_eog(TokenId id) const {
  return id >= 0 && static_cast<size_t>(id) < impl_->vocab.size() && impl_->vocab.eog[id];
}

}  // namespace tessera
