#include "tessera/chat.h"

#include <fmt/format.h>

#include "tessera/chat_template.h"
#include "tessera/error.h"
#include "tessera/gguf.h"

namespace tessera::serving {
namespace {

void check_messages(const nlohmann::json& messages) {
  if (!messages.is_array() || messages.empty()) throw ChatError("'messages' must be a non-empty array");
  for (const nlohmann::json& m : messages) {
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string()) {
      throw ChatError("each message must be an object with a string 'role'");
    }
    const auto c = m.find("content");
    if (c != m.end() && !c->is_string() && !c->is_null() && !c->is_array()) {
      throw ChatError("a message's 'content' must be a string, an array of parts or null");
    }
  }
}

}  // namespace

std::string ChatRenderer::builtin_names() {
  std::string s;
  for (std::string_view n : builtin_chat_template_names()) s += (s.empty() ? "" : ", ") + std::string(n);
  return s;
}

ChatRenderer::ChatRenderer(const gguf::File& file, const Tokenizer& tokenizer,
                           const std::string& name) {
  if (!name.empty()) {
    template_ = std::make_shared<ChatTemplate>(builtin_chat_template(name));
  } else if (std::optional<std::string> source = gguf_chat_template(file)) {
    template_ = std::make_shared<ChatTemplate>(ChatTemplate::parse(*source, file.name()));
  } else {
    template_ = std::make_shared<ChatTemplate>(builtin_chat_template("chatml"));
  }
  auto piece = [&](TokenId id) {
    return id >= 0 && static_cast<size_t>(id) < tokenizer.n_vocab()
               ? std::string(tokenizer.token_text(id))
               : std::string();
  };
  bos_ = piece(tokenizer.bos());
  eos_ = piece(tokenizer.eos());
}

std::string ChatRenderer::render(const nlohmann::json& messages, bool add_generation_prompt) const {
  check_messages(messages);
  ChatTemplateInputs in;
  in.add_generation_prompt = add_generation_prompt;
  in.bos_token = bos_;
  in.eos_token = eos_;
  in.extra_context = {{"enable_thinking", true}};  // as llama.cpp passes it
  try {
    // The tokenizer adds BOS itself when the model asks for it.
    return template_->apply(nlohmann::ordered_json(messages), in, {.strip_leading_bos = true});
  } catch (const ChatTemplateError& e) {
    throw ChatError(e.raised_message() ? *e.raised_message() : std::string(e.what()));
  } catch (const std::exception& e) {
    throw ChatError(fmt::format("the chat template failed on these messages: {}", e.what()));
  }
}

}  // namespace tessera::serving
