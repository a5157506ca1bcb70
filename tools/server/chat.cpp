#include "server/chat.h"

#include "server/http_error.h"
#include "tessera/error.h"

namespace tessera::server {
namespace {

// A message's text: a string, or the text parts of an array of parts.
std::string content_text(const nlohmann::json& m) {
  const auto c = m.find("content");
  if (c == m.end() || c->is_null()) return {};
  if (c->is_string()) return c->get<std::string>();
  std::string text;
  for (const auto& part : *c) {
    if (part.is_object() && part.value("type", "") == "text" && part.contains("text") &&
        part["text"].is_string()) {
      text += part["text"].get<std::string>();
    } else {
      bad_request("only text content parts are supported");
    }
  }
  return text;
}

std::string chatml(const nlohmann::json& messages, bool add_generation_prompt) {
  std::string out;
  for (const auto& m : messages) {
    out += "<|im_start|>" + m["role"].get<std::string>() + "\n" + content_text(m) + "<|im_end|>\n";
  }
  if (add_generation_prompt) out += "<|im_start|>assistant\n";
  return out;
}

}  // namespace

std::string builtin_chat_names() { return "chatml"; }

ChatRenderer make_chat_renderer(const gguf::File&, const Tokenizer&, const std::string& name) {
  if (!name.empty() && name != "chatml") {
    fail(ErrorCategory::kInvalidArgument, "[--chat-template] found '{}', expected one of: {}", name,
         builtin_chat_names());
  }
  return chatml;
}

}  // namespace tessera::server
