#include "pre_tokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <array>

#include "tessera/core/error.h"
#include "unicode.h"

namespace tessera::text {
namespace {

// The patterns are HF tokenizers' own (tokenizer.json), as llama.cpp lists
// them per pre-tokenizer type. PCRE2 runs lookahead and (?i:) directly, so
// the originals are used where llama.cpp has to adapt them.

constexpr std::string_view kGpt2 =
    R"re('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)re";
constexpr std::string_view kLlama3 =
    R"re((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";
constexpr std::string_view kQwen2 =
    R"re((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";
constexpr std::string_view kTekken =
    R"re([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";
constexpr std::string_view kGpt4o =
    R"re([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";
constexpr std::string_view kSeedCoder =
    R"re((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1}| ?[^\s\p{L}\p{N}\r\n]+|\s*[\r\n]+|\s+(?!\S)|\s+)re";
constexpr std::string_view kPoro =
    R"re( ?[^(\s|.,!?\x{2026}\x{3002}\x{FF0C}\x{3001}\x{0964}\x{06D4}\x{060C})]+)re";
constexpr std::string_view kCjk = R"re([\x{4E00}-\x{9FA5}\x{0800}-\x{4E00}\x{AC00}-\x{D7FF}]+)re";

constexpr std::array<std::string_view, 1> kGpt2List = {kGpt2};
constexpr std::array<std::string_view, 1> kLlama3List = {kLlama3};
constexpr std::array<std::string_view, 1> kQwen2List = {kQwen2};
constexpr std::array<std::string_view, 1> kTekkenList = {kTekken};
constexpr std::array<std::string_view, 1> kGpt4oList = {kGpt4o};
constexpr std::array<std::string_view, 1> kSeedCoderList = {kSeedCoder};
constexpr std::array<std::string_view, 1> kPoroList = {kPoro};
constexpr std::array<std::string_view, 2> kVikingList = {kPoro, R"re(\p{N})re"};
constexpr std::array<std::string_view, 2> kStarcoderList = {R"re(\p{N})re", kGpt2};

constexpr std::array<std::string_view, 4> kDefaultList = {
    R"re([\p{P}\$\+<=>\^~\|]+)re",
    kGpt2,
    R"re(\p{N}+)re",
    R"re([0-9][0-9][0-9])re",
};
constexpr std::array<std::string_view, 3> kFalconList = {
    R"re([\p{P}\$\+<=>\^~\|`]+)re",
    kGpt2,
    R"re([0-9][0-9][0-9])re",
};
// The cased-letter class of DeepSeek's tokenizer.json, written with escapes
// so that no Unicode normalisation of this file can change it.
constexpr std::array<std::string_view, 6> kDeepseekLlmList = {
    R"re([\r\n])re",
    R"re(\s?[A-Za-z\x{B5}\x{C0}-\x{D6}\x{D8}-\x{F6}\x{F8}-\x{1BA}\x{1BC}-\x{1BF}\x{1C4}-\x{293}\x{295}-\x{2AF}\x{370}-\x{373}\x{376}\x{377}\x{37B}-\x{37D}\x{37F}\x{386}\x{388}-\x{38A}\x{38C}\x{38E}-\x{3A1}\x{3A3}-\x{3F5}\x{3F7}-\x{481}\x{48A}-\x{52F}\x{531}-\x{556}\x{10A0}-\x{10C5}\x{13A0}-\x{13F5}\x{13F8}-\x{13FD}\x{1C90}-\x{1CBA}\x{1CBD}-\x{1CBF}\x{1D00}-\x{1D2B}\x{1D6B}-\x{1D77}\x{1D79}-\x{1D9A}\x{1E00}-\x{1F15}\x{1F18}-\x{1F1D}\x{1F20}-\x{1F45}\x{1F48}-\x{1F4D}\x{1F50}-\x{1F57}\x{1F59}\x{1F5B}\x{1F5D}\x{1F5F}-\x{1F7D}\x{1F80}-\x{1FB4}\x{1FB6}-\x{1FBC}\x{1FBE}\x{1FC2}-\x{1FC4}\x{1FC6}-\x{1FCC}\x{1FD0}-\x{1FD3}\x{1FD6}-\x{1FDB}\x{1FE0}-\x{1FEC}\x{1FF2}-\x{1FF4}\x{1FF6}-\x{1FFC}\x{2102}\x{2107}\x{210A}-\x{2113}\x{2115}\x{2119}-\x{211D}\x{2124}\x{2126}\x{2128}\x{212A}-\x{212D}\x{212F}-\x{2134}\x{2139}\x{213C}-\x{213F}\x{2145}-\x{2149}\x{214E}\x{2183}\x{2184}\x{2C00}-\x{2C7B}\x{2C7E}-\x{2CE4}\x{2CEB}-\x{2CEE}\x{2CF2}\x{2CF3}\x{A640}-\x{A66D}\x{A680}-\x{A69B}\x{A722}-\x{A76F}\x{A771}-\x{A787}\x{A78B}-\x{A78E}\x{AB70}-\x{ABBF}\x{FB00}-\x{FB06}\x{FB13}-\x{FB17}\x{FF21}-\x{FF3A}\x{FF41}-\x{FF5A}\x{10400}-\x{1044F}\x{104B0}-\x{104D3}\x{104D8}-\x{104FB}\x{10C80}-\x{10CB2}\x{10CC0}-\x{10CF2}\x{118A0}-\x{118DF}\x{1E900}-\x{1E943}]+)re",
    R"re(\s?[!-/:-~\x{FF01}-\x{FF0F}\x{FF1A}-\x{FF5E}\x{2018}-\x{201F}\x{3000}-\x{3002}]+)re",
    R"re(\s+$)re",
    kCjk,
    R"re(\p{N}+)re",
};
constexpr std::array<std::string_view, 5> kDeepseekCoderList = {
    R"re([\r\n])re", R"re(\s?\p{L}+)re", R"re(\s?\p{P}+)re", kCjk, R"re(\p{N})re",
};
constexpr std::array<std::string_view, 3> kDeepseekV3List = {
    R"re(\p{N}{1,3})re",
    R"re([\x{4E00}-\x{9FA5}\x{3040}-\x{309F}\x{30A0}-\x{30FF}]+)re",
    R"re([!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re",
};
constexpr std::array<std::string_view, 6> kChameleonList = {
    R"re(<sentinel:[0-9]+>)re",    R"re((IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z)re",
    R"re(([\t\n]|    |  ))re",     R"re(\p{N})re",
    R"re([\p{P}!-/:-@\[-`{-~])re", kGpt2,
};

struct NamedSpec {
  std::string_view names;  // space-separated aliases; the first is canonical
  PreSpec spec;
};

// Flags follow llama.cpp's loader: BPE models clean spaces unless listed.
constexpr NamedSpec kSpecs[] = {
    {"default", {"default", kDefaultList}},
    {"llama3 llama-v3 llama-bpe falcon3 falcon-h1 pixtral midm-2.0 lfm2",
     {"llama3", kLlama3List, /*add_bos=*/true, /*clean_spaces=*/true, /*ignore_merges=*/true}},
    {"dbrx smaug-bpe", {"dbrx", kLlama3List}},
    {"deepseek-llm", {"deepseek-llm", kDeepseekLlmList, false, false}},
    {"deepseek-coder", {"deepseek-coder", kDeepseekCoderList, false, false}},
    {"deepseek-v3", {"deepseek-v3", kDeepseekV3List, false, false}},
    {"falcon", {"falcon", kFalconList}},
    {"mpt olmo jais", {"mpt", kGpt2List}},
    {"trillion granite-docling", {"trillion", kGpt2List, false, false}},
    {"gpt-2 phi-2 jina-es jina-de gigachat jina-v2-es jina-v2-de a.x-4.0 mellum modern-bert "
     "exaone4 jina-v1-en jina-v2-code roberta-bpe",
     {"gpt-2", kGpt2List}},
    {"starcoder refact codeshell exaone minerva-7b", {"starcoder", kStarcoderList}},
    {"command-r smollm", {"command-r", kStarcoderList, false, false}},
    {"qwen2 deepseek-r1-qwen kormo f2llmv2 hunyuan", {"qwen2", kQwen2List, false, false}},
    {"stablelm2 megrez", {"stablelm2", kQwen2List}},
    {"poro-chat", {"poro-chat", kPoroList, false, false}},
    {"bloom gpt3-finnish", {"bloom", kPoroList}},
    {"viking", {"viking", kVikingList, false, false}},
    {"chatglm-bpe glm4", {"chatglm-bpe", kLlama3List, false, true, false, /*no_bos=*/true}},
    {"tekken", {"tekken", kTekkenList, true, false, true}},
    {"chameleon", {"chameleon", kChameleonList, true, false}},
    {"gpt-4o llama4", {"gpt-4o", kGpt4oList, false, false}},
    {"seed-coder", {"seed-coder", kSeedCoderList, false, false}},
};

bool has_name(std::string_view names, std::string_view name) {
  while (!names.empty()) {
    const size_t space = names.find(' ');
    if (names.substr(0, space) == name) return true;
    if (space == std::string_view::npos) break;
    names.remove_prefix(space + 1);
  }
  return false;
}

struct CodeFree {
  void operator()(pcre2_code* c) const { pcre2_code_free(c); }
};
struct MatchDataFree {
  void operator()(pcre2_match_data* m) const { pcre2_match_data_free(m); }
};
struct MatchContextFree {
  void operator()(pcre2_match_context* m) const { pcre2_match_context_free(m); }
};
using Code = std::unique_ptr<pcre2_code, CodeFree>;
using MatchData = std::unique_ptr<pcre2_match_data, MatchDataFree>;

// Bounds a single match: backtracking steps and heap (KiB) for the interpreter.
constexpr uint32_t kMatchLimit = 10'000'000;
constexpr uint32_t kHeapLimitKiB = 64 * 1024;

struct Span {
  size_t begin;
  size_t size;
};

}  // namespace

const PreSpec* find_pre_spec(std::string_view name) {
  if (name.empty()) name = "default";
  for (const NamedSpec& s : kSpecs) {
    if (has_name(s.names, name)) return &s.spec;
  }
  return nullptr;
}

std::string known_pre_names() {
  std::string out;
  for (const NamedSpec& s : kSpecs) {
    for (const char c : s.names) out += c == ' ' ? std::string_view(", ") : std::string_view(&c, 1);
    if (&s != &kSpecs[std::size(kSpecs) - 1]) out += ", ";
  }
  return out;
}

struct RegexSplitter::Impl {
  std::vector<Code> codes;
  std::unique_ptr<pcre2_match_context, MatchContextFree> context;

  // Splits one piece of `text` with `code`, appending the pieces to `out`.
  void split_piece(const pcre2_code* code, pcre2_match_data* md, std::string_view text, Span piece,
                   std::vector<Span>& out) const {
    const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data() + piece.begin);
    const size_t n = piece.size;
    size_t last = 0;  // end of the last piece emitted
    size_t pos = 0;   // where the next search starts
    while (pos < n) {
      int rc = pcre2_match(code, subject, n, pos, PCRE2_NO_UTF_CHECK, md, context.get());
      if (rc == PCRE2_ERROR_JIT_STACKLIMIT) {
        rc = pcre2_match(code, subject, n, pos, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, md,
                         context.get());
      }
      if (rc <= 0) break;  // no match, or a resource limit: the rest stays whole
      const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
      const size_t start = ov[0];
      const size_t end = ov[1];
      if (start < pos || end < start || end > n) break;
      if (start == end) {  // an empty match splits nothing; step over one character
        if (start >= n) break;
        const size_t step = utf8_sequence_length(text, piece.begin + start);
        pos = start + (step == 0 ? 1 : step);
        continue;
      }
      if (start > last) out.push_back({piece.begin + last, start - last});
      out.push_back({piece.begin + start, end - start});
      last = pos = end;
    }
    if (last < n) out.push_back({piece.begin + last, n - last});
  }
};

RegexSplitter::RegexSplitter(std::span<const std::string_view> patterns)
    : impl_(std::make_unique<Impl>()) {
  impl_->context.reset(pcre2_match_context_create(nullptr));
  if (!impl_->context) fail(ErrorCategory::kOutOfMemory, "[tokenizer regex] no match context");
  pcre2_set_match_limit(impl_->context.get(), kMatchLimit);
  pcre2_set_heap_limit(impl_->context.get(), kHeapLimitKiB);
  for (const std::string_view pattern : patterns) {
    int error = 0;
    PCRE2_SIZE offset = 0;
    Code code(pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                            PCRE2_UTF | PCRE2_UCP | PCRE2_DOLLAR_ENDONLY, &error, &offset,
                            nullptr));
    if (!code) {
      std::array<PCRE2_UCHAR, 256> message{};
      pcre2_get_error_message(error, message.data(), message.size());
      fail(ErrorCategory::kInternal, "[tokenizer regex] pattern '{}' at {}: {}", pattern, offset,
           reinterpret_cast<const char*>(message.data()));
    }
    // JIT is an optimisation; the interpreter serves when it is unavailable.
    pcre2_jit_compile(code.get(), PCRE2_JIT_COMPLETE);
    impl_->codes.push_back(std::move(code));
  }
}

RegexSplitter::RegexSplitter(RegexSplitter&&) noexcept = default;
RegexSplitter& RegexSplitter::operator=(RegexSplitter&&) noexcept = default;
RegexSplitter::~RegexSplitter() = default;

std::vector<std::string_view> RegexSplitter::split(std::string_view text) const {
  std::vector<Span> pieces;
  if (!text.empty()) pieces.push_back({0, text.size()});
  std::vector<Span> next;
  for (const Code& code : impl_->codes) {
    MatchData md(pcre2_match_data_create_from_pattern(code.get(), nullptr));
    if (!md) throw std::bad_alloc();
    next.clear();
    next.reserve(pieces.size() * 2);
    for (const Span piece : pieces) impl_->split_piece(code.get(), md.get(), text, piece, next);
    pieces.swap(next);
  }
  std::vector<std::string_view> out;
  out.reserve(pieces.size());
  for (const Span piece : pieces) out.push_back(text.substr(piece.begin, piece.size));
  return out;
}

}  // namespace tessera::text
