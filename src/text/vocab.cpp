#include "vocab.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>

#include "models.h"
#include "pre_tokenizer.h"
#include "tessera/core/error.h"
#include "tessera/gguf/gguf.h"

namespace tessera::text {
namespace {

using gguf::ValueType;

constexpr std::string_view kModelKey = "tokenizer.ggml.model";
constexpr std::string_view kPreKey = "tokenizer.ggml.pre";
constexpr std::string_view kTokensKey = "tokenizer.ggml.tokens";
constexpr std::string_view kScoresKey = "tokenizer.ggml.scores";
constexpr std::string_view kTypesKey = "tokenizer.ggml.token_type";
constexpr std::string_view kMergesKey = "tokenizer.ggml.merges";
constexpr std::string_view kAddBosKey = "tokenizer.ggml.add_bos_token";
constexpr std::string_view kAddEosKey = "tokenizer.ggml.add_eos_token";
constexpr std::string_view kAddPrefixKey = "tokenizer.ggml.add_space_prefix";
constexpr std::string_view kAddSepKey = "tokenizer.ggml.add_sep_token";
constexpr std::string_view kLowercaseKey = "tokenizer.ggml.normalizer.lowercase";
constexpr std::string_view kStripAccentsKey = "tokenizer.ggml.normalizer.strip_accents";
constexpr std::string_view kRemoveSpacesKey = "tokenizer.ggml.remove_extra_whitespaces";
constexpr std::string_view kCharsmapKey = "tokenizer.ggml.precompiled_charsmap";
constexpr uint64_t kMaxCharsmapBytes = uint64_t{4} << 20;
constexpr uint64_t kMaxIds = static_cast<uint64_t>(std::numeric_limits<TokenId>::max());

// Tokens that end a turn. llama.cpp finds them by text because converters
// rarely name them; they are also made control tokens, as llama.cpp does.
constexpr std::string_view kEotTexts[] = {
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "<|end_of_text|>",
    "<EOT>",
    "_<EOT>",
    "<\xEF\xBD\x9C"
    "end\xE2\x96\x81"
    "of\xE2\x96\x81"
    "sentence\xEF\xBD\x9C>",
    "<end_of_utterance>",
};
constexpr std::string_view kEogTexts[] = {
    "<|eot_id|>",         "<|im_end|>", "<|end|>",    "<|return|>", "<|call|>", "<end_of_turn>",
    "<|endoftext|>",      "</s>",       "<|eom_id|>", "<EOT>",      "_<EOT>",   "<|end_of_text|>",
    "<end_of_utterance>",
};

bool is_integer_type(ValueType t) {
  switch (t) {
    case ValueType::kU8:
    case ValueType::kI8:
    case ValueType::kU16:
    case ValueType::kI16:
    case ValueType::kU32:
    case ValueType::kI32:
    case ValueType::kU64:
    case ValueType::kI64:
      return true;
    default:
      return false;
  }
}
bool is_signed_type(ValueType t) {
  return t == ValueType::kI8 || t == ValueType::kI16 || t == ValueType::kI32 ||
         t == ValueType::kI64;
}

class Loader {
 public:
  explicit Loader(const gguf::File& file) : file_(file) {}

  template <class... Args>
  [[noreturn]] void bad(std::string_view key, fmt::format_string<Args...> what,
                        Args&&... args) const {
    fail(ErrorCategory::kInvalidFile, "[tokenizer {} {}] {}", file_.name(), key,
         fmt::format(what, std::forward<Args>(args)...));
  }

  std::optional<std::string_view> string(std::string_view key) const {
    const gguf::Value* v = file_.find(key);
    if (v == nullptr) return std::nullopt;
    if (v->type() != ValueType::kString) bad(key, "found {}, expected string", type_name(*v));
    return v->string();
  }

  std::optional<bool> boolean(std::string_view key) const {
    const gguf::Value* v = file_.find(key);
    if (v == nullptr) return std::nullopt;
    if (v->type() != ValueType::kBool) bad(key, "found {}, expected bool", type_name(*v));
    return v->boolean();
  }

  // An array value, or nullptr when absent.
  const gguf::ArrayView* array(std::string_view key) const {
    const gguf::Value* v = file_.find(key);
    if (v == nullptr) return nullptr;
    if (v->type() != ValueType::kArray) bad(key, "found {}, expected array", type_name(*v));
    return &v->array();
  }

  void expect_elements(std::string_view key, const gguf::ArrayView& a, bool ok,
                       std::string_view expected) const {
    if (!ok) {
      bad(key, "found array of {}, expected array of {}", gguf::value_type_name(a.element_type()),
          expected);
    }
  }

  void expect_length(std::string_view key, const gguf::ArrayView& a, size_t n) const {
    if (a.size() != n) {
      bad(key, "found {} elements, expected {} (one per token in {})", a.size(), n, kTokensKey);
    }
  }

  // A token id key: absent -> nullopt; -1 or 0xFFFFFFFF -> kNoToken ("none",
  // as converters write it); anything else must be below n_vocab.
  std::optional<TokenId> token_id(std::string_view key, size_t n_vocab) const {
    const gguf::Value* v = file_.find(key);
    if (v == nullptr) return std::nullopt;
    if (!is_integer_type(v->type())) bad(key, "found {}, expected u32", type_name(*v));
    if (is_signed_type(v->type())) {
      const int64_t id = v->i64();
      if (id == -1) return kNoToken;
      if (id < 0 || static_cast<uint64_t>(id) >= n_vocab)
        out_of_range(key, fmt::format("{}", id), n_vocab);
      return static_cast<TokenId>(id);
    }
    const uint64_t id = v->u64();
    if (id == 0xFFFFFFFFu || id == std::numeric_limits<uint64_t>::max()) return kNoToken;
    if (id >= n_vocab) out_of_range(key, fmt::format("{}", id), n_vocab);
    return static_cast<TokenId>(id);
  }

 private:
  static std::string_view type_name(const gguf::Value& v) {
    return gguf::value_type_name(v.type());
  }
  [[noreturn]] void out_of_range(std::string_view key, const std::string& found, size_t n) const {
    bad(key, "found token id {}, expected an id below n_vocab {} (or 4294967295 for none)", found,
        n);
  }

  const gguf::File& file_;
};

void load_tokens(const Loader& in, const gguf::ArrayView& tokens, Vocab& v) {
  const size_t n = static_cast<size_t>(tokens.size());
  v.texts.resize(n);
  v.ids.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    const std::string_view text = tokens.string(i);
    if (text.size() > kMaxTokenBytes) {
      in.bad(kTokensKey, "found token {} of {} bytes, expected at most {}", i, text.size(),
             kMaxTokenBytes);
    }
    v.texts[i] = std::string(text);
    if (text.empty()) continue;  // never produced by tokenize(); renders as nothing
    const auto [it, inserted] = v.ids.emplace(v.texts[i], static_cast<TokenId>(i));
    if (!inserted)
      in.bad(kTokensKey, "found token {} equal to token {}, expected unique texts", i, it->second);
  }
}

void load_scores_and_types(const Loader& in, Vocab& v) {
  const size_t n = v.size();
  v.scores.assign(n, 0.0f);
  v.types.assign(n, TokenType::kNormal);
  if (const gguf::ArrayView* scores = in.array(kScoresKey)) {
    const ValueType t = scores->element_type();
    in.expect_elements(kScoresKey, *scores,
                       t == ValueType::kF32 || t == ValueType::kF64 || is_integer_type(t), "f32");
    in.expect_length(kScoresKey, *scores, n);
    for (size_t i = 0; i < n; ++i) {
      v.scores[i] = scores->number<float>(i);
      if (std::isnan(v.scores[i]))
        in.bad(kScoresKey, "found NaN for token {}, expected a number", i);
    }
  }
  if (const gguf::ArrayView* types = in.array(kTypesKey)) {
    in.expect_elements(kTypesKey, *types, is_integer_type(types->element_type()), "i32");
    in.expect_length(kTypesKey, *types, n);
    for (size_t i = 0; i < n; ++i) {
      const int64_t t = types->number<int64_t>(i);
      // Unknown values are undefined tokens, as in llama.cpp.
      v.types[i] = t >= 0 && t <= 6 ? static_cast<TokenType>(t) : TokenType::kUndefined;
    }
  }
}

void load_merges(const Loader& in, Vocab& v) {
  const gguf::ArrayView* merges = in.array(kMergesKey);
  if (merges == nullptr)
    in.bad(kMergesKey, "found nothing, expected the BPE merges of a gpt2 tokenizer");
  in.expect_elements(kMergesKey, *merges, merges->element_type() == ValueType::kString, "string");
  if (merges->size() > kMaxIds)
    in.bad(kMergesKey, "found {} merges, expected at most {}", merges->size(), kMaxIds);
  const size_t n = static_cast<size_t>(merges->size());
  v.merge_ranks.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    const std::string_view merge = merges->string(i);
    if (merge.size() > 2 * kMaxTokenBytes + 1) {
      in.bad(kMergesKey, "found merge {} of {} bytes, expected at most {}", i, merge.size(),
             2 * kMaxTokenBytes + 1);
    }
    const size_t space = merge.size() < 2 ? std::string_view::npos : merge.find(' ', 1);
    if (space == std::string_view::npos || space + 1 == merge.size()) {
      in.bad(kMergesKey, "found merge {} without two parts, expected 'LEFT RIGHT'", i);
    }
    v.merge_ranks.emplace(std::string(merge), static_cast<int32_t>(i));  // the first rank wins
  }
}

void load_special_ids(const Loader& in, const PreSpec* pre, Vocab& v) {
  const size_t n = v.size();
  // llama.cpp's defaults; a default outside the vocabulary means none.
  if (v.model == TokenizerModel::kSpm) {
    v.bos = 1, v.eos = 2, v.unk = 0;
  } else if (v.model == TokenizerModel::kWpm) {
    v.bos = 101, v.unk = 100, v.sep = 102, v.pad = 0;  // [CLS], [UNK], [SEP], [PAD]
  } else if (v.model == TokenizerModel::kUgm) {
    v.eos = 1, v.unk = 2, v.pad = 0;  // T5's </s>, <unk>, <pad>; no BOS
  } else {
    v.bos = 11, v.eos = 11;  // falcon's <|endoftext|>, llama.cpp's BPE default
    if (pre != nullptr && pre->no_bos) v.bos = kNoToken;
  }
  for (TokenId* id : {&v.bos, &v.eos, &v.unk, &v.sep, &v.pad}) {
    if (*id != kNoToken && static_cast<size_t>(*id) >= n) *id = kNoToken;
  }
  const std::pair<std::string_view, TokenId*> keys[] = {
      {"tokenizer.ggml.bos_token_id", &v.bos},     {"tokenizer.ggml.eos_token_id", &v.eos},
      {"tokenizer.ggml.eot_token_id", &v.eot},     {"tokenizer.ggml.eom_token_id", &v.eom},
      {"tokenizer.ggml.unknown_token_id", &v.unk}, {"tokenizer.ggml.seperator_token_id", &v.sep},
      {"tokenizer.ggml.padding_token_id", &v.pad},
  };
  for (const auto& [key, id] : keys) {
    if (const std::optional<TokenId> got = in.token_id(key, n)) *id = *got;
  }
  // Read only to be checked: a model file with a bad id is refused whole.
  for (const std::string_view key :
       {"tokenizer.ggml.mask_token_id", "tokenizer.ggml.cls_token_id",
        "tokenizer.ggml.fim_pre_token_id", "tokenizer.ggml.fim_suf_token_id",
        "tokenizer.ggml.fim_mid_token_id", "tokenizer.ggml.fim_pad_token_id",
        "tokenizer.ggml.fim_rep_token_id", "tokenizer.ggml.fim_sep_token_id",
        "tokenizer.ggml.prefix_token_id", "tokenizer.ggml.suffix_token_id",
        "tokenizer.ggml.middle_token_id"}) {
    in.token_id(key, n);
  }
}

void load_flags(const Loader& in, const PreSpec* pre, Vocab& v) {
  if (v.model == TokenizerModel::kWpm) {
    // llama.cpp: [CLS] text [SEP] whenever special tokens are added, HF's
    // space clean-up, BertNormalizer lower-casing (and accent stripping,
    // which follows it unless the file says otherwise).
    v.add_bos = true;
    v.add_sep = in.boolean(kAddSepKey).value_or(true);
    v.clean_spaces = true;
    v.lowercase = in.boolean(kLowercaseKey).value_or(true);
    v.strip_accents = in.boolean(kStripAccentsKey).value_or(v.lowercase);
    if (v.bos == kNoToken) in.bad(kModelKey, "found \"bert\" without a [CLS] token (id 101 or bos_token_id)");
    if (v.sep == kNoToken) in.bad(kModelKey, "found \"bert\" without a [SEP] token (id 102 or seperator_token_id)");
    for (const std::string& t : v.texts) v.max_token_bytes = std::max(v.max_token_bytes, t.size());
    return;
  }
  if (v.model == TokenizerModel::kUgm) {
    // llama.cpp: EOS closes a text, no BOS, no space prefix, spaces kept,
    // unless the file says otherwise (XLM-RoBERTa's: <s> text </s>).
    v.add_bos = in.boolean(kAddBosKey).value_or(false);
    v.add_eos = in.boolean(kAddEosKey).value_or(true);
    v.add_space_prefix = in.boolean(kAddPrefixKey).value_or(false);
    v.remove_extra_whitespaces = in.boolean(kRemoveSpacesKey).value_or(false);
    if (v.unk == kNoToken) in.bad(kModelKey, "found \"t5\" without an unknown token (id 2 or unknown_token_id)");
    if (v.add_bos && v.bos == kNoToken)
      in.bad(kAddBosKey, "found true, expected a BOS token id to add");
    if (v.add_eos && v.eos == kNoToken)
      in.bad(kAddEosKey, "found true, expected an EOS token id to add");
    std::string_view charsmap;
    if (const gguf::ArrayView* map = in.array(kCharsmapKey)) {
      const ValueType t = map->element_type();
      in.expect_elements(kCharsmapKey, *map, t == ValueType::kU8 || t == ValueType::kI8, "u8");
      // Published ones are under 400 KiB; the check at load visits each entry once.
      if (map->size() > kMaxCharsmapBytes)
        in.bad(kCharsmapKey, "found {} bytes, expected at most {}", map->size(), kMaxCharsmapBytes);
      const std::span<const uint8_t> bytes = map->raw_bytes();
      charsmap = std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size());
    }
    v.ugm = std::make_shared<const UgmTables>(build_ugm_tables(v, charsmap));
    return;
  }
  const bool spm = v.model == TokenizerModel::kSpm;
  // llama.cpp: SPM adds BOS and a space prefix; BPE as its pre-tokenizer says.
  v.add_bos = spm ? true : pre->add_bos;
  v.add_eos = false;
  v.clean_spaces = spm ? false : pre->clean_spaces;
  v.ignore_merges = spm ? false : pre->ignore_merges;
  v.add_space_prefix = spm;
  if (spm) v.add_space_prefix = in.boolean(kAddPrefixKey).value_or(true);
  v.add_bos = in.boolean(kAddBosKey).value_or(v.add_bos);
  v.add_eos = in.boolean(kAddEosKey).value_or(v.add_eos);
  if (v.add_bos && v.bos == kNoToken)
    in.bad(kAddBosKey, "found true, expected a BOS token id to add");
  if (v.add_eos && v.eos == kNoToken)
    in.bad(kAddEosKey, "found true, expected an EOS token id to add");
}

void index_bytes(const Loader& in, Vocab& v) {
  for (size_t i = 0; i < v.size(); ++i) {
    if (v.types[i] == TokenType::kByte && parse_byte_token(v.texts[i]) < 0) {
      in.bad(kTokensKey, "found byte token {} with text '{}', expected '<0xNN>'", i, v.texts[i]);
    }
  }
  v.byte_tokens.fill(kNoToken);
  if (v.model != TokenizerModel::kSpm) return;
  constexpr char kHex[] = "0123456789ABCDEF";
  for (int b = 0; b < 256; ++b) {
    const char name[] = {'<', '0', 'x', kHex[b >> 4], kHex[b & 15], '>'};
    TokenId id = v.find(std::string_view(name, sizeof(name)));
    if (id == kNoToken) id = v.find(std::string(1, static_cast<char>(b)));
    v.byte_tokens[b] = id;
  }
}

void mark_end_of_generation(Vocab& v) {
  for (const std::string_view text : kEotTexts) {
    if (v.eot != kNoToken) break;
    v.eot = v.find(text);
  }
  if (v.eom == kNoToken) v.eom = v.find("<|eom_id|>");
  v.eog.assign(v.size(), false);
  for (const std::string_view text : kEogTexts) {
    const TokenId id = v.find(text);
    if (id == kNoToken) continue;
    v.eog[id] = true;
    v.types[id] = TokenType::kControl;
  }
  for (const TokenId id : {v.eos, v.eot, v.eom}) {
    if (id != kNoToken) v.eog[id] = true;
  }
  // gpt-oss (harmony), as llama.cpp: the channel markers are always written
  // out as text, so a reply's channels can be parsed; and where a turn ends
  // with <|return|> or <|call|>, <|end|> only closes one message of it (the
  // analysis before the answer): it does not end generation and is text too.
  for (const std::string_view text : {"<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"}) {
    if (const TokenId id = v.find(text); id != kNoToken) v.types[id] = TokenType::kUserDefined;
  }
  const TokenId ret = v.find("<|return|>"), call = v.find("<|call|>"), end = v.find("<|end|>");
  if (ret != kNoToken && call != kNoToken && end != kNoToken && v.eog[ret] && v.eog[call] &&
      v.eog[end]) {
    v.eog[end] = false;
    v.types[end] = TokenType::kUserDefined;
    if (v.eot == end) v.eot = ret;
  }
}

void list_special_tokens(Vocab& v) {
  for (size_t i = 0; i < v.size(); ++i) {
    const TokenType t = v.types[i];
    if (!v.texts[i].empty() &&
        (t == TokenType::kControl || t == TokenType::kUserDefined || t == TokenType::kUnknown)) {
      v.special_tokens.push_back(static_cast<TokenId>(i));
    }
  }
  std::stable_sort(v.special_tokens.begin(), v.special_tokens.end(),
                   [&](TokenId a, TokenId b) { return v.texts[a].size() > v.texts[b].size(); });
}

}  // namespace

int parse_byte_token(std::string_view text) {
  const auto hex = [](char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  if (text.size() != 6 || text.substr(0, 3) != "<0x" || text[5] != '>') return -1;
  const int hi = hex(text[3]);
  const int lo = hex(text[4]);
  return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

Vocab load_vocab(const gguf::File& file) {
  const Loader in(file);
  Vocab v;
  const std::optional<std::string_view> model = in.string(kModelKey);
  if (!model)
    in.bad(kModelKey, "found nothing, expected a tokenizer model such as \"llama\" or \"gpt2\"");
  v.model_name = std::string(*model);
  if (*model == "llama") {
    v.model = TokenizerModel::kSpm;
  } else if (*model == "gpt2") {
    v.model = TokenizerModel::kBpe;
  } else if (*model == "bert") {
    v.model = TokenizerModel::kWpm;
  } else if (*model == "t5") {
    v.model = TokenizerModel::kUgm;
  } else {
    fail(ErrorCategory::kUnsupported,
         "[tokenizer {} {}] found \"{}\", expected \"llama\", \"gpt2\", \"bert\" or \"t5\"",
         file.name(), kModelKey, *model);
  }

  v.pre_name = std::string(in.string(kPreKey).value_or("default"));
  if (v.model == TokenizerModel::kBpe) {
    v.pre = find_pre_spec(v.pre_name);
    if (v.pre == nullptr) {
      fail(ErrorCategory::kUnsupported, "[tokenizer {} {}] found \"{}\", expected one of: {}",
           file.name(), kPreKey, v.pre_name, known_pre_names());
    }
  }

  const gguf::ArrayView* tokens = in.array(kTokensKey);
  if (tokens == nullptr) in.bad(kTokensKey, "found nothing, expected the token list");
  in.expect_elements(kTokensKey, *tokens, tokens->element_type() == ValueType::kString, "string");
  if (tokens->size() == 0 || tokens->size() > kMaxIds) {
    in.bad(kTokensKey, "found {} tokens, expected 1 to {}", tokens->size(), kMaxIds);
  }
  load_tokens(in, *tokens, v);
  load_scores_and_types(in, v);
  if (v.model == TokenizerModel::kBpe) load_merges(in, v);
  load_special_ids(in, v.pre, v);
  load_flags(in, v.pre, v);
  index_bytes(in, v);
  mark_end_of_generation(v);
  list_special_tokens(v);
  return v;
}

}  // namespace tessera::text
