// Errors that name the template and a position in its source.
#pragma once

#include <string>
#include <string_view>

#include "jinja/lexer.h"
#include "tessera/text/chat_template.h"

namespace tessera::jinja {

// Throws ChatTemplateError "[chat template NAME L:C] message".
[[noreturn]] void fail_at(ErrorCategory category, std::string_view name, Loc loc,
                          std::string_view message);

// A parse error: kInvalidFile.
[[noreturn]] inline void fail_parse(std::string_view name, Loc loc, std::string_view message) {
  fail_at(ErrorCategory::kInvalidFile, name, loc, message);
}

}  // namespace tessera::jinja
