#include <algorithm>
#include <array>
#include <limits>
#include <map>
#include <mutex>
#include <unordered_map>
#include <utility>

#include <fmt/format.h>

#include "tessera/grammar/grammar.h"
#include "stacks.h"

namespace tessera::grammar {
namespace {

using Stack = Matcher::Stack;
using Partial = Matcher::Partial;

bool is_end(const Element* e) { return e->type == Element::kEnd || e->type == Element::kAlt; }

// The stacks one character's expansion meets, as a trie: a stack is the id
// of its top node, a node is (element, the stack below it), and nodes are
// interned (an open-addressed table), so equal stacks have one id. Pushing,
// popping and "seen before?" cost O(1) whatever the depth; only the stacks
// that come out are copied. One per thread, reused: clearing it costs the
// nodes used, not the table's size.
class StackTrie {
 public:
  static constexpr uint32_t kEmpty = 0;

  static StackTrie& scratch() {
    thread_local StackTrie trie;
    trie.reset();
    return trie;
  }

  uint32_t push(uint32_t below, const Element* e) {
    if (2 * nodes_.size() >= slots_.size()) grow();
    for (size_t i = slot(below, e);; i = (i + 1) & (slots_.size() - 1)) {
      const uint32_t id = slots_[i];
      if (id == kEmpty) {  // the node first: a failed push_back leaves the table as it was
        nodes_.push_back({e, below, nodes_[below].depth + 1, static_cast<uint32_t>(i), false});
        return slots_[i] = static_cast<uint32_t>(nodes_.size() - 1);
      }
      if (nodes_[id].e == e && nodes_[id].below == below) return id;
    }
  }
  const Element* top(uint32_t id) const { return nodes_[id].e; }
  uint32_t below(uint32_t id) const { return nodes_[id].below; }
  uint32_t depth(uint32_t id) const { return nodes_[id].depth; }
  // Marks `id` seen; whether it was already.
  bool see(uint32_t id) { return std::exchange(nodes_[id].seen, true); }

  // The stack `id` as a vector, bottom first.
  Stack to_stack(uint32_t id) const {
    Stack s(nodes_[id].depth);
    for (size_t k = s.size(); k-- > 0; id = nodes_[id].below) s[k] = nodes_[id].e;
    return s;
  }

  // The id of s[0, n). Stacks that share a bottom (as those of one state
  // mostly do) share its nodes, found by comparing with the previous stack
  // `prev` (whose prefixes' ids `chain_` holds) rather than by lookups.
  uint32_t intern(const Stack& s, size_t n, const Stack*& prev) {
    size_t common = 0;
    if (prev != nullptr) {
      const size_t m = std::min({n, prev->size(), chain_.size()});
      while (common < m && (*prev)[common] == s[common]) ++common;
    }
    chain_.resize(common);
    uint32_t id = common == 0 ? kEmpty : chain_[common - 1];
    for (size_t k = common; k < n; ++k) {
      id = push(id, s[k]);
      chain_.push_back(id);
    }
    prev = &s;
    return id;
  }

 private:
  struct Node {
    const Element* e;
    uint32_t below;
    uint32_t depth;
    uint32_t slot;  // where the table holds it
    bool seen;
  };

  void reset() {
    if (nodes_.size() > (size_t{1} << 20)) {  // a rare giant: give its memory back
      nodes_ = {};
      slots_ = {};
    }
    for (size_t id = 1; id < nodes_.size(); ++id) slots_[nodes_[id].slot] = kEmpty;
    nodes_.assign(1, Node{nullptr, kEmpty, 0, 0, false});
    chain_.clear();
  }
  size_t slot(uint32_t below, const Element* e) const {
    const uint64_t h = (reinterpret_cast<uintptr_t>(e) ^ (uint64_t{below} << 40)) * 0x9E3779B97F4A7C15ull;
    return static_cast<size_t>(h >> 32) & (slots_.size() - 1);
  }
  void grow() {
    slots_.assign(std::max<size_t>(1024, slots_.size() * 2), kEmpty);
    for (size_t id = 1; id < nodes_.size(); ++id) {
      size_t i = slot(nodes_[id].below, nodes_[id].e);
      while (slots_[i] != kEmpty) i = (i + 1) & (slots_.size() - 1);
      slots_[i] = static_cast<uint32_t>(id);
      nodes_[id].slot = static_cast<uint32_t>(i);
    }
  }

  std::vector<Node> nodes_;
  std::vector<uint32_t> slots_;  // node ids by (below, element); kEmpty: free
  std::vector<uint32_t> chain_;  // intern(): the previous stack's prefixes
};

// Expands each stack of `work` (ids in `trie`, taken from the back) until
// its top is a character class (or it is empty: the grammar is complete),
// adding each result to `out` once. The walk is iterative, and a stack met
// twice (a rule reached again by another path, as ("a"?){0,n} does at every
// level) is expanded once: the cost is the number of distinct stacks, not
// of paths to them, each visit O(1). Limits bound both.
void expand(const Grammar& g, StackTrie& trie, std::vector<uint32_t>&& work, std::vector<Stack>& out) {
  size_t visits = 0;
  while (!work.empty()) {
    const uint32_t id = work.back();
    work.pop_back();
    if (++visits > Limits::kMaxExpansions) {
      fail(ErrorCategory::kInvalidArgument,
           "[grammar] too ambiguous: more than {} expansions for one character (limit kMaxExpansions)",
           Limits::kMaxExpansions);
    }
    if (trie.depth(id) > Limits::kMaxDepth) {
      fail(ErrorCategory::kInvalidArgument,
           "[grammar] rules nest deeper than {} elements on one stack (limit kMaxDepth)", Limits::kMaxDepth);
    }
    if (trie.see(id)) continue;
    const Element* top = trie.top(id);
    if (id == StackTrie::kEmpty || top->type != Element::kRuleRef) {
      if (out.size() == Limits::kMaxStacks) {
        fail(ErrorCategory::kInvalidArgument,
             "[grammar] too ambiguous: more than {} ways to continue at once (limit kMaxStacks)",
             Limits::kMaxStacks);
      }
      out.push_back(trie.to_stack(id));
      continue;
    }
    uint32_t below = trie.below(id);
    if (!is_end(top + 1)) below = trie.push(below, top + 1);
    // The alternatives, pushed last first so they come out in order.
    const std::vector<Element>& rule = g.rules()[top->value];
    const size_t mark = work.size();
    for (const Element* alt = rule.data();;) {
      work.push_back(is_end(alt) ? below : trie.push(below, alt));
      while (!is_end(alt)) ++alt;
      if (alt->type == Element::kEnd) break;
      ++alt;  // past kAlt
    }
    std::reverse(work.begin() + static_cast<ptrdiff_t>(mark), work.end());
  }
}

// Whether the class at `e` holds code point cp; `after` gets the element past it.
bool class_holds(const Element* e, uint32_t cp, const Element** after) {
  if (e->type == Element::kCharAny) {
    *after = e + 1;
    return true;
  }
  const bool negated = e->type == Element::kCharNot;
  bool found = false;
  do {
    if (e[1].type == Element::kCharRangeUpper) {
      found = found || (e->value <= cp && cp <= e[1].value);
      e += 2;
    } else {
      found = found || e->value == cp;
      e += 1;
    }
  } while (e->type == Element::kCharAlt);
  *after = e;
  return found != negated;
}

// Whether the class at `e` holds any code point of [lo, hi].
bool class_meets(const Element* e, uint32_t lo, uint32_t hi) {
  if (e->type == Element::kCharAny) return true;
  const bool negated = e->type == Element::kCharNot;
  std::vector<std::pair<uint32_t, uint32_t>> ranges;
  do {
    const uint32_t a = e->value;
    const uint32_t b = e[1].type == Element::kCharRangeUpper ? e[1].value : a;
    if (!negated && a <= hi && lo <= b) return true;
    ranges.emplace_back(a, b);
    e += e[1].type == Element::kCharRangeUpper ? 2 : 1;
  } while (e->type == Element::kCharAlt);
  if (!negated) return false;
  // A negated class meets [lo, hi] unless its ranges together cover it.
  std::sort(ranges.begin(), ranges.end());
  uint64_t next = lo;  // the first code point not yet covered
  for (const auto& [a, b] : ranges) {
    if (a > next) break;
    next = std::max<uint64_t>(next, uint64_t{b} + 1);
    if (next > hi) return false;
  }
  return true;
}

bool any_meets(const std::vector<Stack>& stacks, const Partial& p) {
  const int bits = 6 * p.remaining;
  const uint32_t lo = std::max(p.value << bits, p.min);
  const uint32_t hi = std::min<uint32_t>((p.value << bits) | ((1u << bits) - 1), 0x10FFFF);
  if (lo > hi) return false;
  if (lo >= 0xD800 && hi <= 0xDFFF) return false;  // only surrogates left: never valid UTF-8
  for (const Stack& s : stacks) {
    if (!s.empty() && class_meets(s.back(), lo, hi)) return true;
  }
  return false;
}

}  // namespace

std::vector<Stack> Matcher::advance(const Grammar& g, const std::vector<Stack>& stacks, uint32_t cp) {
  StackTrie& trie = StackTrie::scratch();
  std::vector<uint32_t> work;
  const Stack* prev = nullptr;
  for (const Stack& s : stacks) {
    if (s.empty()) continue;
    const Element* after = nullptr;
    if (!class_holds(s.back(), cp, &after)) continue;
    const uint32_t below = trie.intern(s, s.size() - 1, prev);
    work.push_back(is_end(after) ? below : trie.push(below, after));
  }
  std::reverse(work.begin(), work.end());
  std::vector<Stack> out;
  expand(g, trie, std::move(work), out);
  return out;
}

std::vector<Stack> initial_stacks(const Grammar& g) {
  const std::vector<Element>& root = g.rules()[g.root()];
  StackTrie& trie = StackTrie::scratch();
  std::vector<uint32_t> work;
  for (const Element* alt = root.data();;) {
    work.push_back(is_end(alt) ? StackTrie::kEmpty : trie.push(StackTrie::kEmpty, alt));
    while (!is_end(alt)) ++alt;
    if (alt->type == Element::kEnd) break;
    ++alt;
  }
  std::reverse(work.begin(), work.end());
  std::vector<Stack> out;
  expand(g, trie, std::move(work), out);
  return out;
}

Matcher::Step Matcher::step(const Grammar& g, const std::vector<Stack>& stacks, const Partial& p,
                           uint8_t byte, Partial& q, std::vector<Stack>& next) {
  q = p;
  if (p.remaining == 0) {
    if (byte < 0x80) {
      next = advance(g, stacks, byte);
      return next.empty() ? Step::kFail : Step::kNew;
    }
    if (byte >= 0xC2 && byte <= 0xDF) q = {byte & 0x1Fu, 1, 0x80};
    else if (byte >= 0xE0 && byte <= 0xEF) q = {byte & 0x0Fu, 2, 0x800};
    else if (byte >= 0xF0 && byte <= 0xF4) q = {byte & 0x07u, 3, 0x10000};
    else return Step::kFail;
    return any_meets(stacks, q) ? Step::kSame : Step::kFail;
  }
  if ((byte & 0xC0) != 0x80) return Step::kFail;
  q.value = (p.value << 6) | (byte & 0x3Fu);
  if (--q.remaining > 0) return any_meets(stacks, q) ? Step::kSame : Step::kFail;
  const uint32_t cp = q.value;
  q = {};
  if (cp < p.min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return Step::kFail;
  next = advance(g, stacks, cp);
  return next.empty() ? Step::kFail : Step::kNew;
}

bool Matcher::feed(const Grammar& g, std::vector<Stack>& stacks, Partial& p, uint8_t byte) {
  Partial q;
  std::vector<Stack> next;
  switch (step(g, stacks, p, byte, q, next)) {
    case Step::kFail: return false;
    case Step::kNew: stacks = std::move(next); break;
    case Step::kSame: break;
  }
  p = q;
  return true;
}

Matcher::Matcher(std::shared_ptr<const Grammar> grammar)
    : grammar_(std::move(grammar)), stacks_(grammar_->initial_stacks()) {}

bool Matcher::allows(std::string_view bytes) const {
  std::vector<Stack> stacks = stacks_;
  Partial p = partial_;
  for (char c : bytes) {
    if (!feed(*grammar_, stacks, p, static_cast<uint8_t>(c))) return false;
  }
  return true;
}

void Matcher::accept(std::string_view bytes) {
  std::vector<Stack> stacks = stacks_;
  Partial p = partial_;
  for (char c : bytes) {
    if (!feed(*grammar_, stacks, p, static_cast<uint8_t>(c))) {
      fail(ErrorCategory::kInvalidArgument, "[grammar] the text '{}' does not fit the grammar here",
           bytes);
    }
  }
  stacks_ = std::move(stacks);
  partial_ = p;
}

bool Matcher::can_end() const {
  return partial_.remaining == 0 &&
         std::any_of(stacks_.begin(), stacks_.end(), [](const Stack& s) { return s.empty(); });
}

bool Matcher::must_end() const {
  return partial_.remaining == 0 &&
         std::all_of(stacks_.begin(), stacks_.end(), [](const Stack& s) { return s.empty(); });
}

// ---- the sampler stage --------------------------------------------------------------

namespace {

// Every token's bytes in a trie, built once per tokenizer and shared.
struct TokenTrie {
  struct Node {
    uint32_t first_edge = 0, n_edges = 0;
    uint32_t first_token = 0, n_tokens = 0;
  };
  std::vector<Node> nodes;
  std::vector<std::pair<uint8_t, uint32_t>> edges;  // byte, child node
  std::vector<int32_t> tokens;                      // ending at a node
  std::vector<std::string> bytes;                   // per token id
  std::vector<bool> eog;
  std::vector<uint32_t> below;  // per node: tokens ending at it or under it

  explicit TokenTrie(const Tokenizer& tok) {
    const auto n = static_cast<int32_t>(tok.n_vocab());
    bytes.resize(static_cast<size_t>(n));
    eog.resize(static_cast<size_t>(n));
    std::vector<int32_t> order;
    for (int32_t id = 0; id < n; ++id) {
      eog[static_cast<size_t>(id)] = tok.is_eog(id);
      bytes[static_cast<size_t>(id)] = tok.token_to_piece(id, /*render_special=*/false);
      if (!bytes[static_cast<size_t>(id)].empty()) order.push_back(id);
    }
    std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
      return bytes[static_cast<size_t>(a)] < bytes[static_cast<size_t>(b)];
    });
    // Build from the sorted pieces: depth-first, so each node's edges and
    // tokens are contiguous.
    nodes.push_back({});
    build(0, order, 0, order.size(), 0);
    below.assign(nodes.size(), 0);
    for (size_t k = nodes.size(); k-- > 0;) {  // children come after their parents
      below[k] += nodes[k].n_tokens;
      for (uint32_t e = 0; e < nodes[k].n_edges; ++e) below[k] += below[edges[nodes[k].first_edge + e].second];
    }
  }

  void build(uint32_t node, const std::vector<int32_t>& order, size_t begin, size_t end, size_t depth) {
    size_t i = begin;
    const auto first_token = static_cast<uint32_t>(tokens.size());
    while (i < end && bytes[static_cast<size_t>(order[i])].size() == depth) tokens.push_back(order[i++]);
    nodes[node].first_token = first_token;
    nodes[node].n_tokens = static_cast<uint32_t>(tokens.size()) - first_token;
    // Children: runs of the same byte at `depth`.
    std::vector<std::tuple<uint8_t, size_t, size_t>> runs;
    while (i < end) {
      const auto b = static_cast<uint8_t>(bytes[static_cast<size_t>(order[i])][depth]);
      size_t j = i;
      while (j < end && static_cast<uint8_t>(bytes[static_cast<size_t>(order[j])][depth]) == b) ++j;
      runs.emplace_back(b, i, j);
      i = j;
    }
    nodes[node].first_edge = static_cast<uint32_t>(edges.size());
    nodes[node].n_edges = static_cast<uint32_t>(runs.size());
    for (const auto& [b, lo, hi] : runs) {
      edges.emplace_back(b, static_cast<uint32_t>(nodes.size()));
      nodes.push_back({});
    }
    for (uint32_t k = 0; k < runs.size(); ++k) {
      const auto& [b, lo, hi] = runs[k];
      build(edges[nodes[node].first_edge + k].second, order, lo, hi, depth + 1);
    }
  }
};

std::shared_ptr<const TokenTrie> trie_for(const Tokenizer& tok) {
  static std::mutex mutex;
  static std::map<const Tokenizer*, std::weak_ptr<const TokenTrie>> cache;
  std::lock_guard lock(mutex);
  std::weak_ptr<const TokenTrie>& slot = cache[&tok];
  std::shared_ptr<const TokenTrie> trie = slot.lock();
  if (!trie || trie->bytes.size() != tok.n_vocab()) {
    trie = std::make_shared<const TokenTrie>(tok);
    slot = trie;
  }
  return trie;
}

// The matcher's states met so far (stacks and pending UTF-8 bytes), each
// with an id, and the transitions between them by byte: a walk of the token
// trie is then one table lookup per node once its states are known, and a
// state seen before gets its mask from the cache.
class StateTable {
 public:
  explicit StateTable(const Grammar& g) : g_(g) {}

  int32_t intern(std::vector<Stack>&& stacks, const Partial& p) {
    std::string key(reinterpret_cast<const char*>(&p), sizeof p);
    for (const Stack& s : stacks) {
      key.append(reinterpret_cast<const char*>(s.data()), s.size() * sizeof(s[0]));
      key.append(sizeof(void*), '\xff');  // no element pointer is all ones
    }
    const auto [it, added] = ids_.emplace(std::move(key), static_cast<int32_t>(states_.size()));
    if (added) {
      states_.push_back({std::move(stacks), p});
      next_.emplace_back();
      next_.back().fill(kUnknown);
    }
    return it->second;
  }

  // The state after `byte`, or -1: an array lookup once known. An ASCII
  // byte's transition holds for every byte of the same run between the
  // bounds of the classes atop the stacks, so one step fills the run (a
  // string's characters are one or two steps, not 90).
  int32_t next(int32_t state, uint8_t byte) {
    int32_t& slot = next_[static_cast<size_t>(state)][byte];
    if (slot != kUnknown) return slot;
    Partial q;
    std::vector<Stack> stacks;
    int32_t to = -1;
    const auto& [from, p] = states_[static_cast<size_t>(state)];
    uint32_t lo = byte, hi = byte;
    if (p.remaining == 0 && byte < 0x80) same_run(from, byte, lo, hi);
    switch (Matcher::step(g_, from, p, byte, q, stacks)) {
      case Matcher::Step::kFail: break;
      case Matcher::Step::kSame: to = intern(std::vector<Stack>(from), q); break;
      case Matcher::Step::kNew: to = intern(std::move(stacks), q); break;
    }
    auto& row = next_[static_cast<size_t>(state)];  // intern() may have moved next_
    for (uint32_t b = lo; b <= hi; ++b) row[b] = to;
    return to;
  }

  size_t size() const { return states_.size(); }
  void clear() {
    states_.clear();
    ids_.clear();
    next_.clear();
  }

 private:
  // [lo, hi]: the widest run of ASCII around `byte` that no class atop
  // `stacks` starts or ends inside (each class holds all of it or none).
  static void same_run(const std::vector<Stack>& stacks, uint32_t byte, uint32_t& lo, uint32_t& hi) {
    lo = 0;
    hi = 0x7F;
    for (const Stack& s : stacks) {
      if (s.empty()) continue;
      const Element* e = s.back();
      if (e->type == Element::kCharAny) continue;
      do {
        const uint32_t a = e->value;
        const uint32_t b = e[1].type == Element::kCharRangeUpper ? e[1].value : a;
        if (byte < a) {
          hi = std::min(hi, a - 1);
        } else if (byte > b) {
          lo = std::max(lo, b + 1);
        } else {
          lo = std::max(lo, a);
          hi = std::min(hi, b);
        }
        e += e[1].type == Element::kCharRangeUpper ? 2 : 1;
      } while (e->type == Element::kCharAlt);
    }
  }

  const Grammar& g_;
  std::vector<std::pair<std::vector<Stack>, Partial>> states_;
  std::unordered_map<std::string, int32_t> ids_;
  static constexpr int32_t kUnknown = -2;
  std::vector<std::array<int32_t, 256>> next_;  // per state and byte: the next state, -1, or kUnknown
};

class GrammarStage final : public SamplerStage {
 public:
  GrammarStage(std::shared_ptr<const Grammar> g, const Tokenizer& tok)
      : grammar_(g), matcher_(std::move(g)), trie_(trie_for(tok)), table_(*grammar_) {}

  std::string_view name() const override { return "grammar"; }

  void apply(Candidates& c) override {
    started_ = true;
    if (table_.size() > kMaxTable) {  // a grammar with endless states: start over
      table_.clear();
      masks_.clear();
    }
    const int32_t state = table_.intern(std::vector<Stack>(matcher_.stacks()), matcher_.partial());
    auto it = masks_.find(state);
    if (it == masks_.end() && c.pick_limit > 0 && broad(state) && best_valid(c, state)) return;
    if (it == masks_.end()) {
      if (masks_.size() >= kMaxMasks) masks_.clear();
      allowed_.assign(trie_->bytes.size(), 0);
      if (!matcher_.must_end()) visit(0, state);
      it = masks_.emplace(state, allowed_).first;
    }
    const std::vector<uint8_t>& allowed = it->second;
    const bool end_ok = matcher_.can_end();
    bool any = false;
    for (TokenData& t : c.data) {
      const auto id = static_cast<size_t>(t.id);
      const bool ok = trie_->eog[id] ? end_ok : allowed[id] != 0;
      if (!ok) t.logit = -std::numeric_limits<float>::infinity();
      any = any || (ok && t.logit > -std::numeric_limits<float>::infinity());
    }
    if (!any) {
      fail(ErrorCategory::kInvalidArgument, "[grammar] no token can continue the output here{}",
           end_ok ? "" : " (and it may not end)");
    }
    if (c.sorted) {
      std::sort(c.data.begin(), c.data.end(), [](const TokenData& a, const TokenData& b) {
        return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
      });
    }
  }

  void accept(int32_t token) override {
    if (!started_) return;  // a prompt token
    const auto id = static_cast<size_t>(token);
    if (id >= trie_->bytes.size() || trie_->eog[id]) return;
    matcher_.accept(trie_->bytes[id]);
  }

 private:
  static constexpr size_t kMaxTable = size_t{1} << 14;  // states (1 KiB of transitions each)
  static constexpr size_t kMaxMasks = 64;

  // With a pick limit k: the tokens in order of logit, each checked alone,
  // until k fit; the rest cannot be picked and get -inf. False (nothing
  // changed) when that takes more checks than a walk of the trie would.
  // A token is checked through the state table (a lookup per byte once its
  // transitions are known), not by advancing the matcher's stacks.
  bool best_valid(Candidates& c, int32_t state) {
    // a ranks before b: a higher logit, or the same and a lower id. As the
    // heap's "less", it keeps the worst of the heap on top.
    const auto outranks = [&](uint32_t a, uint32_t b) {
      const TokenData& x = c.data[a];
      const TokenData& y = c.data[b];
      return x.logit > y.logit || (x.logit == y.logit && x.id < y.id);
    };
    // The best `budget` finite candidates, in one pass with a small heap
    // (worst on top: most candidates lose to it at one comparison).
    const size_t limit = static_cast<size_t>(c.pick_limit);
    const size_t budget = 4 * limit + 64;
    order_.clear();
    size_t finite = 0;
    for (uint32_t i = 0; i < c.data.size(); ++i) {
      if (!(c.data[i].logit > -std::numeric_limits<float>::infinity())) continue;
      ++finite;
      if (order_.size() < budget) {
        order_.push_back(i);
        std::push_heap(order_.begin(), order_.end(), outranks);
      } else if (outranks(i, order_.front())) {
        std::pop_heap(order_.begin(), order_.end(), outranks);
        order_.back() = i;
        std::push_heap(order_.begin(), order_.end(), outranks);
      }
    }
    std::sort_heap(order_.begin(), order_.end(), outranks);  // best first
    const bool end_ok = matcher_.can_end(), must_end = matcher_.must_end();
    keep_.clear();
    for (const uint32_t i : order_) {
      if (keep_.size() == limit) break;
      const auto id = static_cast<size_t>(c.data[i].id);
      bool ok = trie_->eog[id] ? end_ok : !must_end && !trie_->bytes[id].empty();
      if (ok && !trie_->eog[id]) {
        int32_t s = state;
        for (const char b : trie_->bytes[id]) {
          if ((s = table_.next(s, static_cast<uint8_t>(b))) < 0) break;
        }
        ok = s >= 0;
      }
      if (ok) keep_.push_back(i);
    }
    // Fewer than k fit among the best `budget`: more may lie below, and the
    // walk is the cheaper way to find them.
    if (keep_.size() < limit && finite > order_.size()) return false;
    if (keep_.empty()) {
      fail(ErrorCategory::kInvalidArgument, "[grammar] no token can continue the output here{}",
           end_ok ? "" : " (and it may not end)");
    }
    std::sort(keep_.begin(), keep_.end());
    size_t k = 0;
    for (uint32_t i = 0; i < c.data.size(); ++i) {
      if (k < keep_.size() && keep_[k] == i) {
        ++k;
      } else {
        c.data[i].logit = -std::numeric_limits<float>::infinity();
      }
    }
    if (c.sorted) {
      std::sort(c.data.begin(), c.data.end(), [](const TokenData& a, const TokenData& b) {
        return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
      });
    }
    return true;
  }

  // Whether a walk from `state` would enter the subtrees of more than
  // kBroad tokens (a string's inside: most of the vocabulary); checking the
  // best tokens one by one pays only there. Where few first bytes fit (a
  // key, punctuation, digits) the walk is short and its mask reusable.
  bool broad(int32_t state) {
    static constexpr uint32_t kBroad = 4096;
    const TokenTrie::Node& root = trie_->nodes[0];
    uint32_t reach = 0;
    for (uint32_t k = 0; k < root.n_edges && reach <= kBroad; ++k) {
      const auto& [byte, child] = trie_->edges[root.first_edge + k];
      if (table_.next(state, byte) >= 0) reach += trie_->below[child];
    }
    return reach > kBroad;
  }

  // Marks the tokens under `node` that fit from `state`; a byte that breaks
  // the grammar prunes its whole subtree.
  void visit(uint32_t node, int32_t state) {
    const TokenTrie::Node& n = trie_->nodes[node];
    for (uint32_t k = 0; k < n.n_tokens; ++k) allowed_[static_cast<size_t>(trie_->tokens[n.first_token + k])] = 1;
    for (uint32_t k = 0; k < n.n_edges; ++k) {
      const auto& [byte, child] = trie_->edges[n.first_edge + k];
      if (const int32_t to = table_.next(state, byte); to >= 0) visit(child, to);
    }
  }

  std::shared_ptr<const Grammar> grammar_;
  Matcher matcher_;
  std::shared_ptr<const TokenTrie> trie_;
  StateTable table_;
  std::unordered_map<int32_t, std::vector<uint8_t>> masks_;  // by state
  std::vector<uint8_t> allowed_;
  std::vector<uint32_t> order_, keep_;  // best_valid's heap and finds
  bool started_ = false;
};

}  // namespace

std::unique_ptr<SamplerStage> stage(std::shared_ptr<const Grammar> grammar, const Tokenizer& tokenizer) {
  return std::make_unique<GrammarStage>(std::move(grammar), tokenizer);
}

std::function<std::vector<std::unique_ptr<SamplerStage>>()> masks(
    std::shared_ptr<const Grammar> grammar, const Tokenizer& tokenizer) {
  return [grammar = std::move(grammar), &tokenizer] {
    std::vector<std::unique_ptr<SamplerStage>> v;
    v.push_back(stage(grammar, tokenizer));
    return v;
  };
}

}  // namespace tessera::grammar
