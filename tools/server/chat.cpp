#include "server/chat.h"

#include <memory>

#include <fmt/format.h>

#include "server/http_error.h"
#include "tessera/chat_template.h"
#include "tessera/error.h"

namespace tessera::server {

std::string builtin_chat_names() {
  std::string s;
  for (std::string_view n : builtin_chat_template_names()) s += (s.empty() ? "" : ", ") + std::string(n);
  return s;
}

ChatRenderer make_chat_renderer(const gguf::File& file, const Tokenizer& tokenizer,
                                const std::string& name) {
  // --chat-template NAME, else the model's own, else ChatML (llama.cpp's fallback).
  std::shared_ptr<const ChatTemplate> tmpl;
  if (!name.empty()) {
    tmpl = std::make_shared<ChatTemplate>(builtin_chat_template(name));
  } else if (std::optional<std::string> source = gguf_chat_template(file)) {
    tmpl = std::make_shared<ChatTemplate>(ChatTemplate::parse(*source, file.name()));
  } else {
    tmpl = std::make_shared<ChatTemplate>(builtin_chat_template("chatml"));
  }
  auto piece = [&](TokenId id) {
    return id >= 0 && static_cast<size_t>(id) < tokenizer.n_vocab()
               ? std::string(tokenizer.token_text(id))
               : std::string();
  };
  const std::string bos = piece(tokenizer.bos()), eos = piece(tokenizer.eos());
  return [tmpl, bos, eos](const nlohmann::json& messages, bool add_generation_prompt) {
    ChatTemplateInputs in;
    in.add_generation_prompt = add_generation_prompt;
    in.bos_token = bos;
    in.eos_token = eos;
    in.extra_context = {{"enable_thinking", true}};  // as llama.cpp passes it
    try {
      // The tokenizer adds BOS itself when the model asks for it.
      return tmpl->apply(nlohmann::ordered_json(messages), in, {.strip_leading_bos = true});
    } catch (const ChatTemplateError& e) {
      // A conversation the template refuses (raise_exception, limits) is
      // the client's to fix.
      throw HttpError(400, e.raised_message() ? *e.raised_message() : std::string(e.what()));
    }
  };
}

}  // namespace tessera::server
