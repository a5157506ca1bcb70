// GBNF text to rules. Repetitions become generated rules:
//   x*      -> r ::= x r |            x+ -> x x*          x? -> r ::= x |
//   x{m,n}  -> m copies of x, then n - m nested optionals  x{m,} -> m copies, then x*
#include <algorithm>
#include <cstring>
#include <list>
#include <map>
#include <mutex>

#include <fmt/format.h>

#include "stacks.h"
#include "tessera/grammar/grammar.h"

namespace tessera::grammar {

class Parser {
 public:
  Parser(std::string_view text, Grammar& g) : text_(text), g_(g) {}

  void parse_all() {
    skip(true);
    while (pos_ < text_.size()) {
      const size_t name_at = pos_;
      const std::string name = parse_name();
      skip(false);
      if (!consume("::=")) error(pos_, "expected '::=' after the rule name '{}'", name);
      skip(true);
      const uint32_t id = rule_id(name, name_at);
      if (defined_[id]) error(name_at, "rule '{}' is defined twice", name);
      defined_[id] = true;
      std::vector<Element> body;
      parse_alternates(body, name, false);
      body.push_back({Element::kEnd, 0});
      g_.rules_[id] = std::move(body);
      skip(false);
      if (pos_ < text_.size() && text_[pos_] != '\n' && text_[pos_] != '\r') {
        error(pos_, "expected the end of the line after rule '{}'", name);
      }
      skip(true);
    }
    for (uint32_t i = 0; i < g_.rules_.size(); ++i) {
      if (!defined_[i]) error(first_use_[i], "rule '{}' is used but never defined", g_.names_[i]);
    }
  }

  [[noreturn]] void error_at_rule(uint32_t rule, const std::string& what) {
    error(first_use_[rule], "{}", what);
  }

  uint32_t find(std::string_view name) const {
    const auto it = ids_.find(std::string(name));
    return it == ids_.end() ? UINT32_MAX : it->second;
  }

 private:
  template <typename... Args>
  [[noreturn]] void error(size_t at, fmt::format_string<Args...> f, Args&&... args) {
    size_t line = 1, col = 1;
    for (size_t i = 0; i < at && i < text_.size(); ++i) {
      if (text_[i] == '\n') ++line, col = 1;
      else ++col;
    }
    fail(ErrorCategory::kInvalidArgument, "[grammar] line {}, column {}: {}", line, col,
         fmt::format(f, std::forward<Args>(args)...));
  }

  // Spaces and comments; newlines too when `newlines`.
  void skip(bool newlines) {
    while (pos_ < text_.size()) {
      const char c = text_[pos_];
      if (c == '#') {
        while (pos_ < text_.size() && text_[pos_] != '\n') ++pos_;
      } else if (c == ' ' || c == '\t' || (newlines && (c == '\n' || c == '\r'))) {
        ++pos_;
      } else {
        break;
      }
    }
  }

  bool consume(std::string_view s) {
    if (text_.substr(pos_, s.size()) != s) return false;
    pos_ += s.size();
    return true;
  }

  static bool name_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
  }

  std::string parse_name() {
    const size_t start = pos_;
    while (pos_ < text_.size() && name_char(text_[pos_])) ++pos_;
    if (pos_ == start) error(start, "expected a rule name");
    return std::string(text_.substr(start, pos_ - start));
  }

  uint32_t rule_id(const std::string& name, size_t at) {
    const auto [it, added] = ids_.emplace(name, static_cast<uint32_t>(g_.rules_.size()));
    if (added) {
      if (g_.rules_.size() >= Limits::kMaxRules) {
        error(at, "more than {} rules, generated ones counted (limit kMaxRules)", Limits::kMaxRules);
      }
      g_.rules_.emplace_back();
      g_.names_.push_back(name);
      defined_.push_back(false);
      first_use_.push_back(at);
    }
    return it->second;
  }

  uint32_t new_rule(const std::string& base, size_t at) {
    std::string name;
    do name = fmt::format("{}_{}", base, ++generated_); while (ids_.contains(name));
    const uint32_t id = rule_id(name, at);
    defined_[id] = true;
    return id;
  }

  // One code point of a literal or class, escapes decoded.
  uint32_t parse_char() {
    if (pos_ >= text_.size()) error(pos_, "unexpected end of the grammar");
    const auto c = static_cast<unsigned char>(text_[pos_]);
    if (c == '\\') {
      if (pos_ + 1 >= text_.size()) error(pos_, "unexpected end after '\\'");
      const char e = text_[pos_ + 1];
      pos_ += 2;
      switch (e) {
        case 'n': return '\n';
        case 'r': return '\r';
        case 't': return '\t';
        case '\\': case '"': case '[': case ']': case '-': case '^': return static_cast<uint32_t>(e);
        case 'x': return parse_hex(2);
        case 'u': return parse_hex(4);
        case 'U': return parse_hex(8);
        default: error(pos_ - 2, "unknown escape '\\{}'", e);
      }
    }
    // UTF-8 decode.
    const int n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (n == 0 || pos_ + static_cast<size_t>(n) > text_.size()) error(pos_, "invalid UTF-8");
    uint32_t cp = n == 1 ? c : c & (0x7F >> n);
    for (int i = 1; i < n; ++i) {
      const auto b = static_cast<unsigned char>(text_[pos_ + static_cast<size_t>(i)]);
      if ((b & 0xC0) != 0x80) error(pos_, "invalid UTF-8");
      cp = (cp << 6) | (b & 0x3F);
    }
    pos_ += static_cast<size_t>(n);
    return cp;
  }

  uint32_t parse_hex(int digits) {
    uint32_t v = 0;
    for (int i = 0; i < digits; ++i) {
      if (pos_ >= text_.size()) error(pos_, "expected {} hex digits", digits);
      const char h = text_[pos_++];
      int d = h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10 : h >= 'A' && h <= 'F' ? h - 'A' + 10 : -1;
      if (d < 0) error(pos_ - 1, "expected a hex digit, found '{}'", h);
      v = v * 16 + static_cast<uint32_t>(d);
    }
    if (v > 0x10FFFF) error(pos_, "code point {:#x} is beyond Unicode", v);
    return v;
  }

  void parse_alternates(std::vector<Element>& out, const std::string& rule, bool nested) {
    parse_sequence(out, rule, nested);
    while (pos_ < text_.size() && text_[pos_] == '|') {
      ++pos_;
      skip(true);
      out.push_back({Element::kAlt, 0});
      parse_sequence(out, rule, nested);
    }
  }

  void parse_sequence(std::vector<Element>& out, const std::string& rule, bool nested) {
    size_t last_start = out.size();  // where the last item's elements begin
    bool have_last = false;
    while (pos_ < text_.size()) {
      const char c = text_[pos_];
      const size_t at = pos_;
      if (c == '"') {
        ++pos_;
        last_start = out.size();
        while (pos_ < text_.size() && text_[pos_] != '"') out.push_back({Element::kChar, parse_char()});
        if (!consume("\"")) error(at, "unterminated literal");
        have_last = true;
      } else if (c == '[') {
        ++pos_;
        last_start = out.size();
        Element::Type first = Element::kChar;
        if (consume("^")) first = Element::kCharNot;
        bool any = false;
        while (pos_ < text_.size() && text_[pos_] != ']') {
          const uint32_t lo = parse_char();
          out.push_back({any ? Element::kCharAlt : first, lo});
          any = true;
          if (pos_ + 1 < text_.size() && text_[pos_] == '-' && text_[pos_ + 1] != ']') {
            ++pos_;
            const uint32_t hi = parse_char();
            if (hi < lo) error(at, "range {:#x}-{:#x} runs backwards", lo, hi);
            out.push_back({Element::kCharRangeUpper, hi});
          }
        }
        if (!consume("]")) error(at, "unterminated character class");
        if (!any) error(at, "empty character class");
        have_last = true;
      } else if (c == '.') {
        ++pos_;
        last_start = out.size();
        out.push_back({Element::kCharAny, 0});
        have_last = true;
      } else if (name_char(c)) {
        last_start = out.size();
        const std::string name = parse_name();
        out.push_back({Element::kRuleRef, rule_id(name, at)});
        have_last = true;
      } else if (c == '(') {
        if (++depth_ > Limits::kMaxNesting) {
          error(at, "groups nest deeper than {} levels (limit kMaxNesting)", Limits::kMaxNesting);
        }
        ++pos_;
        skip(true);
        const uint32_t sub = new_rule(rule, at);
        std::vector<Element> body;
        parse_alternates(body, rule, true);
        body.push_back({Element::kEnd, 0});
        g_.rules_[sub] = std::move(body);
        if (!consume(")")) error(at, "expected ')' to close the group");
        --depth_;
        last_start = out.size();
        out.push_back({Element::kRuleRef, sub});
        have_last = true;
      } else if (c == '*' || c == '+' || c == '?' || c == '{') {
        if (!have_last) error(at, "'{}' follows nothing", c);
        int64_t lo = 0, hi = -1;  // hi -1: unbounded
        ++pos_;
        if (c == '+') lo = 1;
        if (c == '?') hi = 1;
        if (c == '{') {
          skip(false);
          lo = parse_int();
          skip(false);
          if (consume(",")) {
            skip(false);
            hi = pos_ < text_.size() && text_[pos_] != '}' ? parse_int() : -1;
          } else {
            hi = lo;
          }
          skip(false);
          if (!consume("}")) error(at, "expected '}}' to close the repetition");
          if (hi >= 0 && hi < lo) error(at, "repetition {{{},{}}} has max < min", lo, hi);
          if (lo > 4096 || hi > 4096) error(at, "repetition counts above 4096 are not supported");
        }
        repeat(out, last_start, lo, hi, rule, at);
        have_last = false;  // x** is an error, as in llama.cpp
      } else {
        break;
      }
      skip(nested);
    }
  }

  int64_t parse_int() {
    const size_t start = pos_;
    int64_t v = 0;
    while (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9') {
      v = v * 10 + (text_[pos_++] - '0');
      if (v > 1000000) error(start, "repetition count too large");
    }
    if (pos_ == start) error(start, "expected a number");
    return v;
  }

  // out[from..] is one item; replaces it by its repetition lo..hi times.
  void repeat(std::vector<Element>& out, size_t from, int64_t lo, int64_t hi, const std::string& rule,
              size_t at) {
    std::vector<Element> item(out.begin() + static_cast<ptrdiff_t>(from), out.end());
    // The copies this adds: lo of the item, and a rule of item + 3 per optional.
    const uint64_t added = static_cast<uint64_t>(lo) * item.size() +
                           static_cast<uint64_t>(hi < 0 ? 1 : hi - lo) * (item.size() + 3);
    if ((elements_ += added) > Limits::kMaxElements) {
      error(at, "repetitions expand to more than {} elements (limit kMaxElements)", Limits::kMaxElements);
    }
    out.resize(from);
    for (int64_t i = 0; i < lo; ++i) out.insert(out.end(), item.begin(), item.end());
    if (hi < 0) {  // star: r ::= item r |
      const uint32_t r = new_rule(rule, at);
      std::vector<Element> body = item;
      body.push_back({Element::kRuleRef, r});
      body.push_back({Element::kAlt, 0});
      body.push_back({Element::kEnd, 0});
      g_.rules_[r] = std::move(body);
      out.push_back({Element::kRuleRef, r});
      return;
    }
    // Nested optionals: r_k ::= item r_{k-1} | ;  r_1 ::= item |
    uint32_t inner = UINT32_MAX;
    for (int64_t k = 0; k < hi - lo; ++k) {
      const uint32_t r = new_rule(rule, at);
      std::vector<Element> body = item;
      if (inner != UINT32_MAX) body.push_back({Element::kRuleRef, inner});
      body.push_back({Element::kAlt, 0});
      body.push_back({Element::kEnd, 0});
      g_.rules_[r] = std::move(body);
      inner = r;
    }
    if (inner != UINT32_MAX) out.push_back({Element::kRuleRef, inner});
  }

  std::string_view text_;
  Grammar& g_;
  size_t pos_ = 0;
  std::map<std::string, uint32_t> ids_;
  std::vector<bool> defined_;
  std::vector<size_t> first_use_;
  int generated_ = 0;
  size_t depth_ = 0;       // groups open
  uint64_t elements_ = 0;  // added by repetitions (the text bounds the rest)
};

namespace {

// Rules that can match the empty text, in time linear in the grammar: an
// alternative holding no character is nullable once every rule it refers to
// is; each rule found nullable counts down the alternatives that use it.
std::vector<bool> nullable_rules(const Grammar& g) {
  const auto& rules = g.rules();
  std::vector<bool> nullable(rules.size(), false);
  std::vector<uint32_t> alt_rule;               // per alternative: its rule
  std::vector<uint32_t> waiting;                // per alternative: refs not yet nullable
  std::vector<std::vector<uint32_t>> users(rules.size());  // per rule: alternatives naming it, once per ref
  std::vector<uint32_t> ready;
  for (uint32_t r = 0; r < rules.size(); ++r) {
    bool has_char = false;
    uint32_t refs = 0;
    std::vector<uint32_t> named;
    for (const Element& e : rules[r]) {
      if (e.type == Element::kAlt || e.type == Element::kEnd) {
        const auto id = static_cast<uint32_t>(waiting.size());
        alt_rule.push_back(r);
        waiting.push_back(has_char ? UINT32_MAX : refs);
        if (!has_char) {
          for (uint32_t n : named) users[n].push_back(id);
          if (refs == 0) ready.push_back(r);
        }
        has_char = false;
        refs = 0;
        named.clear();
      } else if (e.type == Element::kRuleRef) {
        ++refs;
        named.push_back(e.value);
      } else if (e.type != Element::kCharRangeUpper && e.type != Element::kCharAlt) {
        has_char = true;
      }
    }
  }
  while (!ready.empty()) {
    const uint32_t r = ready.back();
    ready.pop_back();
    if (nullable[r]) continue;
    nullable[r] = true;
    for (const uint32_t a : users[r]) {
      if (--waiting[a] == 0) ready.push_back(alt_rule[a]);
    }
  }
  return nullable;
}

// A rule that can reach itself without consuming a character would expand
// forever: refused.
void check_left_recursion(const Grammar& g, Parser& p) {
  const auto& rules = g.rules();
  const std::vector<bool> nullable = nullable_rules(g);
  // first[r]: rules r can start with.
  std::vector<std::vector<uint32_t>> first(rules.size());
  for (size_t r = 0; r < rules.size(); ++r) {
    bool at_start = true;
    for (const Element& e : rules[r]) {
      if (e.type == Element::kAlt || e.type == Element::kEnd) {
        at_start = true;
      } else if (at_start && e.type == Element::kRuleRef) {
        first[r].push_back(e.value);
        at_start = nullable[e.value];
      } else if (e.type != Element::kCharRangeUpper && e.type != Element::kCharAlt) {
        at_start = false;
      }
    }
  }
  enum { kNew, kOpen, kDone };
  std::vector<int> state(rules.size(), kNew);
  std::vector<std::pair<uint32_t, size_t>> stack;
  for (uint32_t start = 0; start < rules.size(); ++start) {
    if (state[start] != kNew) continue;
    stack.push_back({start, 0});
    state[start] = kOpen;
    while (!stack.empty()) {
      auto& [r, i] = stack.back();
      if (i == first[r].size()) {
        state[r] = kDone;
        stack.pop_back();
        continue;
      }
      const uint32_t next = first[r][i++];
      if (state[next] == kOpen) {
        p.error_at_rule(next, fmt::format("rule '{}' is left-recursive (it can reach itself "
                                          "before any character)", g.rule_name(next)));
      }
      if (state[next] == kNew) {
        state[next] = kOpen;
        stack.push_back({next, 0});
      }
    }
  }
}

}  // namespace

std::shared_ptr<const Grammar> Grammar::parse(std::string_view text, std::string_view root) {
  auto g = std::make_shared<Grammar>();
  Parser p(text, *g);
  p.parse_all();
  const uint32_t r = p.find(root);
  if (r == UINT32_MAX) {
    fail(ErrorCategory::kInvalidArgument, "[grammar] line 1, column 1: no rule '{}' to start from",
         root);
  }
  g->root_ = r;
  check_left_recursion(*g, p);
  g->initial_ = grammar::initial_stacks(*g);
  return g;
}

std::shared_ptr<const Grammar> parse_cached(std::string_view text, std::string_view root) {
  // Bounded by entries and by what they hold: texts and elements.
  static constexpr size_t kEntries = 32, kBytes = size_t{32} << 20;
  struct Entry {
    std::string key;
    std::shared_ptr<const Grammar> grammar;
    size_t bytes;
  };
  static std::mutex mutex;
  static std::list<Entry> recent;  // newest first
  static size_t held = 0;
  std::string key(root);
  key += '\0';
  key += text;
  {
    std::lock_guard lock(mutex);
    for (auto it = recent.begin(); it != recent.end(); ++it) {
      if (it->key == key) {
        recent.splice(recent.begin(), recent, it);
        return it->grammar;
      }
    }
  }
  std::shared_ptr<const Grammar> g = Grammar::parse(text, root);  // outside the lock
  size_t bytes = key.size();
  for (const auto& rule : g->rules()) bytes += rule.size() * sizeof(Element);
  for (const auto& s : g->initial_stacks()) bytes += s.size() * sizeof(s[0]);
  if (bytes > kBytes / 4) return g;  // too big to keep
  std::lock_guard lock(mutex);
  recent.push_front({std::move(key), g, bytes});
  held += bytes;
  while (recent.size() > kEntries || held > kBytes) {
    held -= recent.back().bytes;
    recent.pop_back();
  }
  return g;
}

}  // namespace tessera::grammar
