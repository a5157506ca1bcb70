// Chat templates: a model's `tokenizer.chat_template` (a Jinja2 template)
// rendered over a conversation by a small sandboxed interpreter of the Jinja
// subset real templates use (src/text/jinja/).
//
// The template is untrusted model data. The interpreter has no file, network,
// environment or process access; its only globals are `raise_exception`,
// `strftime_now`, `namespace`, `range` and `dict`. Every render runs under
// ChatTemplateLimits (nesting depth, steps, loop iterations, output bytes,
// time) and fails with ChatTemplateError past them.
//
// Whitespace follows HF transformers' environment: trim_blocks and
// lstrip_blocks on, one trailing newline of the source dropped, values
// printed as Python prints them (None, True, ['a']), `tojson` as HF's
// (ensure_ascii off, `indent` honoured, keys in input order).
//
// A ChatTemplate is immutable after parse(); render() is const and may run
// on many threads at once.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "tessera/core/error.h"

namespace tessera {

namespace gguf {
class File;
}

struct ChatTemplateLimits {
  // Nested blocks and brackets in the source; nested macro calls at run time.
  size_t max_depth = 64;
  // Interpreter steps (expressions, statements, elements touched by filters).
  uint64_t max_steps = 10'000'000;
  // Loop iterations over the whole render.
  uint64_t max_loop_iterations = 100'000;
  // Bytes of output, and of any one string built during the render.
  size_t max_output_bytes = 4u << 20;
  // Elements of any one list built during the render.
  size_t max_list_items = 1u << 20;
  // Wall time of one render; zero for none.
  std::chrono::milliseconds max_time{200};
};

// An error that names the template and the line and column in its source:
// "[chat template NAME 3:14] found 'endfor', expected 'endif'". Parse errors
// have category kInvalidFile (the template's text is broken); render errors,
// limits and raise_exception() have kInvalidArgument (this conversation was
// refused).
class ChatTemplateError : public Error {
 public:
  ChatTemplateError(ErrorCategory category, std::string message, uint32_t line, uint32_t column,
                    std::optional<std::string> raised = std::nullopt)
      : Error(category, std::move(message)),
        line_(line),
        column_(column),
        raised_(std::move(raised)) {}

  uint32_t line() const { return line_; }      // 1-based; 0 when unknown
  uint32_t column() const { return column_; }  // 1-based, in bytes; 0 when unknown
  // The template's own text when it called raise_exception(msg).
  const std::optional<std::string>& raised_message() const { return raised_; }

 private:
  uint32_t line_;
  uint32_t column_;
  std::optional<std::string> raised_;
};

// What the template sees besides `messages`.
struct ChatTemplateInputs {
  bool add_generation_prompt = true;
  std::string bos_token;
  std::string eos_token;
  // `tools`; null leaves it undefined.
  nlohmann::ordered_json tools;
  // More variables, e.g. {"enable_thinking": true, "date_string": "26 Jul 2024"};
  // null or an object. They may not replace `messages` or the ones above.
  nlohmann::ordered_json extra_context;
  // The clock of strftime_now(); the current time when empty. Formatted in
  // the local time zone, as llama.cpp does.
  std::optional<std::chrono::system_clock::time_point> now;
  ChatTemplateLimits limits;
};

// What probe renders found the template to support.
struct ChatTemplateCaps {
  // It prints a system message's content. When false, apply() folds system
  // messages into the next user message, as llama.cpp does.
  bool supports_system_role = true;
};

struct ChatApplyOptions {
  // Drop bos_token from the front of the render: the tokenizer adds BOS itself.
  bool strip_leading_bos = true;
  // Drop eos_token from the end of the render.
  bool strip_trailing_eos = false;
};

class ChatTemplate {
 public:
  // Parses `source`. `name` appears in error messages (a model or file name).
  // Throws ChatTemplateError (kInvalidFile) naming line and column.
  static ChatTemplate parse(std::string_view source, std::string name = "chat template",
                            const ChatTemplateLimits& limits = {});

  // Exactly what the template prints for `messages` (a JSON list of
  // {"role", "content", ...} objects) and `inputs`. Throws ChatTemplateError.
  std::string render(const nlohmann::ordered_json& messages,
                     const ChatTemplateInputs& inputs) const;
  std::string render(const nlohmann::json& messages, const ChatTemplateInputs& inputs) const;

  // render() as a server uses it (llama.cpp's common_chat_templates_apply):
  // system messages folded into the next user turn when caps() says the
  // template has no system role, then options' strip rules.
  std::string apply(const nlohmann::ordered_json& messages, const ChatTemplateInputs& inputs,
                    const ChatApplyOptions& options = {}) const;

  const std::string& name() const;
  const std::string& source() const;
  const ChatTemplateCaps& caps() const;

 private:
  struct Impl;
  explicit ChatTemplate(std::shared_ptr<const Impl> impl);
  std::shared_ptr<const Impl> impl_;
};

// Templates for models without one, or asked for by name: chatml, llama2,
// llama3, gemma, phi3, mistral. Throws Error(kInvalidArgument) listing the
// names for an unknown one.
ChatTemplate builtin_chat_template(std::string_view name);
std::span<const std::string_view> builtin_chat_template_names();

// The template stored in a GGUF file: `tokenizer.chat_template`, or
// `tokenizer.chat_template.<variant>` (e.g. "tool_use") when a variant is
// named. Empty when the key is absent; Error(kInvalidFile) when it is not a
// string.
std::optional<std::string> gguf_chat_template(const gguf::File& file,
                                              std::string_view variant = {});

}  // namespace tessera
