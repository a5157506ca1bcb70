// The chat renderer `tessera chat`, the server and the Node package share: a
// conversation (an array of {role, content} messages) to prompt text, by a
// built-in template named on the command line, else the model's
// tokenizer.chat_template, else ChatML (llama.cpp's fallback).
#pragma once

#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tessera/serving/tool_calls.h"
#include "tessera/text/tokenizer.h"

namespace tessera {
class ChatTemplate;
namespace gguf {
class File;
}
}  // namespace tessera

namespace tessera::serving {

// A conversation the template refuses (its raise_exception, its limits) or
// a malformed message: the caller's to fix.
class ChatError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class ChatRenderer {
 public:
  // `builtin_name` empty: the model's template; with "{{" or "{%" in it: a
  // Jinja template's source (llama.node's chat_template). Throws
  // Error(kInvalidArgument) for an unknown built-in name (listing the names)
  // and Error(kInvalidFile) for a template that does not parse.
  ChatRenderer(const gguf::File& file, const Tokenizer& tokenizer,
               const std::string& builtin_name = {});

  // The prompt text for `messages`; a leading BOS is left to the tokenizer.
  // Messages take OpenAI's shapes: content a string, an array of text parts
  // (joined) or null; other fields (name, tool_calls) go to the template.
  // Throws ChatError.
  // `kwargs`: more variables for the template (llama-server's
  // chat_template_kwargs, e.g. {"enable_thinking": false}).
  // `tools`: OpenAI's tools array for the template (null: none). Assistant
  // tool calls in the history take their arguments as objects; a template
  // that knows no tools gets them described in a system message
  // (tool_messages()).
  std::string render(const nlohmann::ordered_json& messages, bool add_generation_prompt,
                     const nlohmann::json& kwargs = nlohmann::json::object(),
                     const nlohmann::ordered_json& tools = nullptr) const;
  // The prompt's tokens: the template's own markers become special tokens,
  // the text of the messages never does (a user typing "</s>" gets text).
  std::vector<TokenId> tokenize(const nlohmann::ordered_json& messages, bool add_generation_prompt,
                                const Tokenizer& tokenizer,
                                const nlohmann::json& kwargs = nlohmann::json::object(),
                                const nlohmann::ordered_json& tools = nullptr) const;

  // The format the template's model writes tool calls in, and whether the
  // template renders `tools` itself.
  ToolFormat tool_format() const { return tools_.format; }
  bool native_tools() const { return tools_.prints_tools; }

  // The built-in templates' names, comma-separated (for --help).
  static std::string builtin_names();

 private:
  nlohmann::ordered_json prepare(const nlohmann::ordered_json& messages,
                                 const nlohmann::ordered_json& tools) const;
  std::string apply(const nlohmann::ordered_json& messages, bool add_generation_prompt,
                    const nlohmann::json& kwargs, const nlohmann::ordered_json& tools) const;

  std::shared_ptr<const ChatTemplate> template_;
  std::string bos_, eos_;
  TemplateTools tools_;
};

// Whether a prompt leaves the model inside its thinking: its last tokens
// render as "<think>" (and maybe a newline), as reasoning models' templates
// open it.
bool prompt_opens_thinking(const std::vector<TokenId>& prompt, const Tokenizer& tokenizer);

}  // namespace tessera::serving
