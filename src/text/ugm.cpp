// Unigram (tokenizer.ggml.model = "t5": T5's and XLM-RoBERTa's SentencePiece
// vocabularies), as llama.cpp runs it (docs/text.md, "Tokenizers"): the
// text normalized by the vocabulary's precompiled charsmap and whitespace
// rules, then the most probable segmentation found by Viterbi over a trie of
// the pieces, scores summed in double as SentencePiece does.
#include <algorithm>
#include <cfloat>
#include <cstring>
#include <limits>

#include "tessera/core/error.h"
#include "models.h"

namespace tessera::text {
namespace {

constexpr std::string_view kEscapedSpace = "\xE2\x96\x81";  // U+2581
constexpr float kUnknownPenalty = 10.0f;                    // below the lowest score

// The length of the UTF-8 sequence at text[at] as llama.cpp decodes it (lead
// byte and continuation bytes only, no overlong or surrogate checks), or 0
// where it is malformed.
size_t sequence_length(std::string_view text, size_t at) {
  const auto b = static_cast<uint8_t>(text[at]);
  size_t n = 0;
  if (!(b & 0x80)) return 1;
  if (!(b & 0x40)) return 0;
  if (!(b & 0x20)) n = 2;
  else if (!(b & 0x10)) n = 3;
  else if (!(b & 0x08)) n = 4;
  else return 0;
  if (at + n > text.size()) return 0;
  for (size_t k = 1; k < n; ++k) {
    if ((static_cast<uint8_t>(text[at + k]) & 0xC0) != 0x80) return 0;
  }
  return n;
}

// The code units a lead byte announces (a stray continuation byte: 1).
size_t lead_length(uint8_t b) {
  constexpr uint8_t kLengths[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
  return kLengths[b >> 4];
}

[[noreturn]] void bad_charsmap(std::string_view what) {
  fail(ErrorCategory::kInvalidFile, "[tokenizer tokenizer.ggml.precompiled_charsmap] {}", what);
}

// The fields of a double-array entry: BASE (bits 10-30, shifted 8 more when
// bit 9 is set), LCHECK (the byte that leads here, bits 0-7, with bit 31 so
// a value entry never matches), LEAF (bit 8).
uint32_t xcda_base(uint32_t e) { return (e >> 10) << ((e & (1u << 9)) >> 6); }
uint32_t xcda_lcheck(uint32_t e) { return e & ((1u << 31) | 0xFFu); }
bool xcda_leaf(uint32_t e) { return (e >> 8) & 1; }

// Walks every node a match can reach (the child of state s by byte c is
// entry s ^ c where its LCHECK is c; the next state is that index ^ its
// BASE) and checks that each leaf's state names a replacement inside the
// strings, NUL-ended: tokenize() then cannot read outside the charsmap.
// Each entry is visited once, so the walk costs 255 lookups per entry.
void check_charsmap(const UgmTables& t) {
  const std::vector<uint32_t>& a = t.xcda;
  if (a.empty()) bad_charsmap("found an empty double array");
  std::vector<bool> seen(a.size(), false);
  std::vector<uint32_t> states{xcda_base(a[0])};
  while (!states.empty()) {
    const uint32_t s = states.back();
    states.pop_back();
    for (uint32_t c = 1; c < 256; ++c) {
      const uint32_t i = s ^ c;
      if (i >= a.size() || xcda_lcheck(a[i]) != c || seen[i]) continue;
      seen[i] = true;
      const uint32_t next = i ^ xcda_base(a[i]);
      if (xcda_leaf(a[i])) {
        if (next >= a.size()) bad_charsmap(fmt::format("found leaf {} pointing past the double array", i));
        const uint32_t offset = a[next] & 0x7FFFFFFFu;
        if (offset >= t.replacements.size() || t.replacements.find('\0', offset) == std::string::npos) {
          bad_charsmap(fmt::format("found leaf {} naming replacement {}, outside the {} bytes of NUL-ended strings",
                                   i, offset, t.replacements.size()));
        }
      }
      states.push_back(next);
    }
  }
}

class Normalizer {
 public:
  explicit Normalizer(const UgmTables& t) : t_(t) {}

  // SentencePiece's normalization as llama.cpp does it: each prefix replaced
  // by the charsmap's longest match (user-defined tokens kept as they are,
  // malformed bytes as U+FFFD), spaces escaped to U+2581, runs of spaces
  // merged and a space put in front as the vocabulary says.
  std::string operator()(const Vocab& v, std::string_view in) const {
    std::string out;
    out.reserve(in.size() * 3);
    const bool prepend = v.add_space_prefix;
    const bool merge = v.remove_extra_whitespaces;
    bool prepended = false, in_word = false;
    for (size_t at = 0; at < in.size();) {
      const auto [piece, consumed] = prefix(in, at);
      for (const char c : piece) {
        if (c != ' ') {
          if (!in_word) {
            in_word = true;
            if ((prepend && !prepended) || merge) {
              out += kEscapedSpace;
              prepended = true;
            }
          }
          out += c;
        } else {
          in_word = false;
          if (!merge) out += kEscapedSpace;
        }
      }
      at += consumed;
    }
    return out;
  }

 private:
  // The replacement of the prefix of in at `at`, and the bytes it consumes.
  std::pair<std::string_view, size_t> prefix(std::string_view in, size_t at) const {
    const std::string_view rest = in.substr(at);
    // As llama.cpp: the bytes a walk of the user-defined tokens' trie
    // follows pass unchanged, whether a token ends there or not, so a
    // prefix of "£" (C2 A3) keeps the C2 of "½" from the charsmap.
    if (const size_t n = t_.user_defined.path_length(rest); n > 0) return {rest.substr(0, n), n};
    size_t longest = 0;
    uint32_t offset = 0;
    if (!t_.xcda.empty()) {
      // The longest input prefix the XOR-compressed double array holds: a
      // node's child by byte c is at BASE ^ c, and is one when its LCHECK is
      // c; a leaf's BASE leads to the entry holding the replacement's offset.
      // An index past the array ends the match (load checked every node
      // reachable inside it, and the replacement each leaf names).
      const std::vector<uint32_t>& a = t_.xcda;
      uint32_t node = xcda_base(a[0]);
      for (size_t k = 0; k < rest.size(); ++k) {
        const auto c = static_cast<uint8_t>(rest[k]);
        if (c == 0) break;
        node ^= c;
        if (node >= a.size() || xcda_lcheck(a[node]) != c) break;
        const bool leaf = xcda_leaf(a[node]);
        node ^= xcda_base(a[node]);
        if (leaf) {
          longest = k + 1;
          offset = a[node] & 0x7FFFFFFFu;
        }
      }
    }
    if (longest > 0) {
      const std::string_view strings = t_.replacements;
      return {strings.substr(offset, strings.find('\0', offset) - offset), longest};
    }
    const size_t n = sequence_length(in, at);
    if (n == 0) return {"\xEF\xBF\xBD", 1};  // U+FFFD for one malformed byte
    return {rest.substr(0, n), n};
  }

  const UgmTables& t_;
};

}  // namespace

size_t ByteTrie::path_length(std::string_view s) const {
  size_t k = 0;
  for (uint32_t node = 0; k < s.size() && !nodes.empty(); ++k) {
    node = child(node, static_cast<uint8_t>(s[k]));
    if (node == kNone) break;
  }
  return k;
}

uint32_t ByteTrie::child(uint32_t node, uint8_t byte) const {
  const Node& n = nodes[node];
  const auto* first = edges.data() + n.first_edge;
  const auto* last = first + n.n_edges;
  const auto* it = std::lower_bound(first, last, byte, [](const Edge& e, uint8_t b) { return e.byte < b; });
  return it != last && it->byte == byte ? it->child : kNone;
}

ByteTrie ByteTrie::build(const std::vector<std::string>& texts, const std::vector<TokenId>& ids) {
  ByteTrie t;
  std::vector<TokenId> order(ids);
  std::sort(order.begin(), order.end(), [&](TokenId a, TokenId b) { return texts[a] < texts[b]; });
  t.nodes.push_back({});
  // Breadth by node: each node's children made together, so its edges are
  // contiguous (and sorted, as the texts are). Work items: a node and its
  // range of `order`, all sharing the node's `depth` bytes.
  struct Item {
    uint32_t node;
    size_t begin, end, depth;
  };
  std::vector<Item> work{{0, 0, order.size(), 0}};
  while (!work.empty()) {
    const Item it = work.back();
    work.pop_back();
    size_t i = it.begin;
    while (i < it.end && texts[order[i]].size() == it.depth) t.nodes[it.node].token = order[i++];
    t.nodes[it.node].first_edge = static_cast<uint32_t>(t.edges.size());
    while (i < it.end) {
      const auto b = static_cast<uint8_t>(texts[order[i]][it.depth]);
      size_t j = i;
      while (j < it.end && static_cast<uint8_t>(texts[order[j]][it.depth]) == b) ++j;
      const auto child = static_cast<uint32_t>(t.nodes.size());
      t.nodes.push_back({});
      t.edges.push_back({b, child});
      ++t.nodes[it.node].n_edges;
      work.push_back({child, i, j, it.depth + 1});
      i = j;
    }
  }
  return t;
}

UgmTables build_ugm_tables(const Vocab& v, std::string_view charsmap) {
  UgmTables t;
  if (!charsmap.empty()) {
    // A u32 byte count, that many bytes of double array, then NUL-ended strings.
    uint32_t blob = 0;
    if (charsmap.size() < sizeof blob) bad_charsmap("found fewer than 4 bytes");
    std::memcpy(&blob, charsmap.data(), sizeof blob);
    if (blob % 4 != 0 || blob > charsmap.size() - sizeof blob) {
      bad_charsmap(fmt::format("found a double array of {} bytes in {}, expected a multiple of 4 that fits",
                               blob, charsmap.size()));
    }
    t.xcda.resize(blob / 4);
    std::memcpy(t.xcda.data(), charsmap.data() + sizeof blob, blob);
    t.replacements = std::string(charsmap.substr(sizeof blob + blob));
    check_charsmap(t);
  }
  std::vector<TokenId> pieces, user_defined;
  float min_score = std::numeric_limits<float>::max();
  for (size_t i = 0; i < v.size(); ++i) {
    const TokenType type = v.types[i];
    if (type == TokenType::kNormal) min_score = std::min(min_score, v.scores[i]);
    if (v.texts[i].empty()) continue;
    if (type == TokenType::kNormal || type == TokenType::kUserDefined || type == TokenType::kUnused) {
      pieces.push_back(static_cast<TokenId>(i));
    }
    if (type == TokenType::kUserDefined) user_defined.push_back(static_cast<TokenId>(i));
  }
  t.pieces = ByteTrie::build(v.texts, pieces);
  t.user_defined = ByteTrie::build(v.texts, user_defined);
  t.unknown_score = min_score - kUnknownPenalty;  // in float, as llama.cpp keeps it
  return t;
}

void ugm_tokenize(const Vocab& v, std::string_view text, std::vector<TokenId>& out) {
  const UgmTables& t = *v.ugm;
  const std::string norm = Normalizer(t)(v, text);
  const size_t n = norm.size();
  if (n == 0) return;
  // best[k]: the best segmentation of norm[0, k): its last token, where that
  // token starts, and the score.
  struct Best {
    TokenId token;
    size_t from;
    double score;
  };
  std::vector<Best> best(n + 1, {v.unk, 0, -DBL_MAX});
  best[0] = {v.unk, 0, 0.0};
  for (size_t at = 0; at < n;) {
    const size_t units = std::min(lead_length(static_cast<uint8_t>(norm[at])), n - at);
    const double here = best[at].score;
    bool whole_found = false;  // a token that is exactly this code point
    uint32_t node = 0;
    for (size_t k = at; k < n; ++k) {
      node = t.pieces.child(node, static_cast<uint8_t>(norm[k]));
      if (node == ByteTrie::kNone) break;
      const TokenId id = t.pieces.nodes[node].token;
      if (id == kNoToken) continue;
      if (k + 1 - at == units) whole_found = true;
      const double score = here + (v.types[id] == TokenType::kUserDefined ? 0.0 : v.scores[id]);
      if (score > best[k + 1].score) best[k + 1] = {id, at, score};
    }
    if (!whole_found) {
      const double score = here + t.unknown_score;
      if (score > best[at + units].score) best[at + units] = {v.unk, at, score};
    }
    at += units;
  }
  // Back from the end; a run of unknown tokens is one.
  const size_t mark = out.size();
  bool prev_unknown = false;
  for (size_t k = n;;) {
    const Best& b = best[k];
    const bool unknown = b.token == v.unk;
    if (!(prev_unknown && unknown)) out.push_back(b.token);
    if (b.from == 0) break;
    prev_unknown = unknown;
    k = b.from;
  }
  std::reverse(out.begin() + static_cast<ptrdiff_t>(mark), out.end());
}

}  // namespace tessera::text
