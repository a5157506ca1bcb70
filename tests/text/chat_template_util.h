// Helpers for the chat-template tests: render a template string with
// variables, and expect a ChatTemplateError.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "tessera/text/chat_template.h"

namespace tessera::text::testing {

inline std::string render_with(std::string_view source, nlohmann::ordered_json vars,
                               nlohmann::ordered_json messages = nlohmann::ordered_json::array(),
                               const ChatTemplateLimits& limits = {}) {
  ChatTemplateInputs in;
  in.add_generation_prompt = false;
  in.extra_context = std::move(vars);
  in.limits = limits;
  return ChatTemplate::parse(source, "t", limits).render(messages, in);
}

inline std::string render(std::string_view source) {
  return render_with(source, nlohmann::ordered_json::object());
}

// The error a parse or render of `source` throws; fails the test when none.
inline ChatTemplateError error_of(std::string_view source,
                                  nlohmann::ordered_json vars = nlohmann::ordered_json::object(),
                                  const ChatTemplateLimits& limits = {}) {
  try {
    const std::string out =
        render_with(source, std::move(vars), nlohmann::ordered_json::array(), limits);
    ADD_FAILURE() << "expected an error, rendered " << out.size() << " bytes";
  } catch (const ChatTemplateError& e) {
    return e;
  }
  return ChatTemplateError(ErrorCategory::kInternal, "no error", 0, 0);
}

}  // namespace tessera::text::testing
