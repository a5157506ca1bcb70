// Inside the grammar library: the stacks a match starts from, found when a
// grammar is parsed (matcher.cpp) and kept in it (gbnf.cpp).
#pragma once

#include <vector>

#include "tessera/grammar/grammar.h"

namespace tessera::grammar {

// Throws Error(kInvalidArgument) past Limits.
std::vector<Matcher::Stack> initial_stacks(const Grammar& g);

}  // namespace tessera::grammar
