// libFuzzer target for what the server does with a client's bytes before
// any model runs: the HTTP/1.1 request parser with the server's limits
// (Boost.Beast's, as tools/server/http.cpp sets it up), Content-Encoding
// decoding under the body limit, and the JSON body into typed requests
// (completions, chat with the chat renderer, embeddings, tokenize).
//
// Every refusal must be one of the server's error types (HttpError,
// ChatError, tessera::Error, a JSON type error it maps to 400); anything
// else escaping, a crash or a sanitizer report is a finding.
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>

#include <boost/beast/http.hpp>

#include "server/http.h"
#include "server/http_error.h"
#include "server/oai.h"
#include "tessera/core/error.h"
#include "tessera/gguf/gguf.h"
#include "tessera/serving/chat.h"
#include "tessera/text/tokenizer.h"

namespace {

namespace bhttp = boost::beast::http;
using nlohmann::json;

constexpr size_t kBodyLimit = size_t{1} << 20;

struct Vocabulary {
  tessera::gguf::File file;
  tessera::Tokenizer tokenizer;
  tessera::serving::ChatRenderer chat;
  explicit Vocabulary(tessera::gguf::File f)
      : file(std::move(f)), tokenizer(tessera::Tokenizer::from_gguf(file)), chat(file, tokenizer) {}
};

const Vocabulary& vocabulary() {
  static const Vocabulary v = [] {
    return Vocabulary(
        tessera::gguf::File::open(std::filesystem::path(TESSERA_MODELS_DIR) / "stories260K.gguf"));
  }();
  return v;
}

// The body as each endpoint reads it.
void requests(const std::string& body) {
  const Vocabulary& v = vocabulary();
  const json j = tessera::server::parse_body(body);
  for (bool chat : {false, true}) {
    try {
      tessera::server::parse_completion(j, chat, v.tokenizer, v.chat);
    } catch (const tessera::server::HttpError&) {
    } catch (const tessera::serving::ChatError&) {
    } catch (const tessera::Error&) {
    } catch (const json::type_error&) {
    }
  }
  try {
    tessera::server::parse_embeddings(j, v.tokenizer);
  } catch (const tessera::server::HttpError&) {
  }
  try {
    const auto t = tessera::server::parse_tokenize(j);
    if (t.content.size() < 4096) v.tokenizer.tokenize(t.content, t.add_special, true);
  } catch (const tessera::server::HttpError&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  bhttp::request_parser<bhttp::string_body> parser;
  parser.header_limit(16 << 10);
  parser.body_limit(kBodyLimit);
  parser.eager(true);
  boost::beast::error_code ec;
  const auto* p = reinterpret_cast<const char*>(data);
  size_t used = 0;
  while (used < size && !parser.is_done()) {
    const size_t n = parser.put(boost::asio::buffer(p + used, size - used), ec);
    if (ec == bhttp::error::need_more) break;
    if (ec) return 0;  // refused: the server answers 400 / 413 / 431
    if (n == 0) break;
    used += n;
  }
  if (!parser.is_done()) return 0;
  const auto& req = parser.get();
  const auto encoding = req[bhttp::field::content_encoding];
  try {
    const std::string body = tessera::server::decode_body(
        std::string_view(encoding.data(), encoding.size()), req.body(), kBodyLimit);
    requests(body);
  } catch (const tessera::server::HttpError&) {
  }
  return 0;
}
