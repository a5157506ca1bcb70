// libFuzzer target for GBNF: the input is a grammar, then (after a NUL byte)
// a text. Grammar::parse may refuse the grammar only with tessera::Error,
// within Limits (the run's -timeout bounds each input: a grammar that takes
// seconds to compile is a finding). A grammar it accepts is matched against
// the text byte by byte, where again only tessera::Error may come. Limits
// bound the cost of one character, not of a text: the first kMaxText bytes
// are matched, so the timeout still finds a character that costs too much.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "tessera/core/error.h"
#include "tessera/grammar/grammar.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t nul = input.find('\0');
  const std::string_view text = input.substr(0, nul);
  const std::string_view sample = nul == std::string_view::npos ? std::string_view() : input.substr(nul + 1);
  std::shared_ptr<const tessera::grammar::Grammar> g;
  try {
    g = tessera::grammar::Grammar::parse(text);
  } catch (const tessera::Error&) {
    return 0;
  }
  constexpr size_t kMaxText = 32;
  try {
    tessera::grammar::Matcher m(g);
    for (const char c : sample.substr(0, kMaxText)) {
      const std::string_view byte(&c, 1);
      m.accept(byte);  // throws where allows() is false: one walk per byte, not two
    }
    (void)m.can_end();
    (void)m.must_end();
  } catch (const tessera::Error&) {
  }
  return 0;
}
