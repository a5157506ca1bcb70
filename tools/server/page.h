// The chat page served at GET /: tools/server/page/chat.html, compiled into
// the binary at build time (cmake/EmbedFile.cmake, tools/CMakeLists.txt).
#pragma once

#include <string_view>

namespace tessera::server {

// The page's HTML (UTF-8), with its CSS and JavaScript inline.
std::string_view chat_page();

}  // namespace tessera::server
