// The chat renderer the server and `tessera chat` use: a built-in template by
// name (--chat-template), else the model's tokenizer.chat_template, else
// ChatML. A conversation the template refuses is an HttpError 400.
#pragma once

#include <string>

#include "server/server.h"
#include "tessera/gguf.h"
#include "tessera/tokenizer.h"

namespace tessera::server {

ChatRenderer make_chat_renderer(const gguf::File& file, const Tokenizer& tokenizer,
                                const std::string& builtin_name);
std::string builtin_chat_names();

}  // namespace tessera::server
