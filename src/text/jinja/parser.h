// Tokens to a syntax tree, following Jinja2's grammar and operator
// precedence (jinja2/parser.py): filters and tests bind tighter than any
// binary operator, `~` tighter than `+`, `not` looser than comparisons.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "jinja/ast.h"

namespace tessera::jinja {

struct Template {
  std::string name;
  ast::Body body;
};

// Throws ChatTemplateError (kInvalidFile) naming the line and column, what
// was found and what was expected. Blocks and brackets nest at most
// `max_depth` deep, expressions at most 4 * max_depth.
Template parse_template(std::string_view source, std::string name, size_t max_depth);

}  // namespace tessera::jinja
