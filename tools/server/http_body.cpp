// Content-Encoding of request bodies, decoded under a size limit: the
// output is checked after every block, so a small body that expands to
// gigabytes costs at most `limit` bytes and a block.
#include <brotli/decode.h>
#include <zlib.h>

#include "server/http.h"
#include "server/http_error.h"

namespace tessera::server {
namespace {

constexpr size_t kBlock = size_t{64} << 10;

[[noreturn]] void too_large(size_t limit) {
  throw HttpError(413, fmt::format("the body, decoded, is larger than the server accepts ({} bytes)", limit));
}

std::string inflate_body(std::string_view body, size_t limit) {
  z_stream zs{};
  // 32 + 15: a gzip or zlib header, detected; the largest window.
  if (inflateInit2(&zs, 32 + 15) != Z_OK) throw HttpError(500, "cannot start zlib");
  std::string out;
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(body.data()));
  zs.avail_in = static_cast<uInt>(body.size());
  int rc = Z_OK;
  while (rc != Z_STREAM_END) {
    const size_t at = out.size();
    out.resize(at + kBlock);
    zs.next_out = reinterpret_cast<Bytef*>(out.data() + at);
    zs.avail_out = static_cast<uInt>(kBlock);
    rc = inflate(&zs, Z_NO_FLUSH);
    out.resize(at + kBlock - zs.avail_out);
    if (out.size() > limit) {
      inflateEnd(&zs);
      too_large(limit);
    }
    if (rc != Z_OK && rc != Z_STREAM_END) {
      inflateEnd(&zs);
      throw HttpError(400, fmt::format("the compressed body is corrupt or cut short (zlib: {})",
                                       zs.msg != nullptr ? zs.msg : "no progress"));
    }
  }
  inflateEnd(&zs);
  return out;
}

std::string unbrotli_body(std::string_view body, size_t limit) {
  BrotliDecoderState* s = BrotliDecoderCreateInstance(nullptr, nullptr, nullptr);
  if (s == nullptr) throw HttpError(500, "cannot start brotli");
  std::string out;
  size_t in_left = body.size();
  const auto* in = reinterpret_cast<const uint8_t*>(body.data());
  BrotliDecoderResult rc = BROTLI_DECODER_RESULT_NEEDS_MORE_OUTPUT;
  while (rc == BROTLI_DECODER_RESULT_NEEDS_MORE_OUTPUT) {
    const size_t at = out.size();
    out.resize(at + kBlock);
    size_t out_left = kBlock;
    auto* next = reinterpret_cast<uint8_t*>(out.data() + at);
    rc = BrotliDecoderDecompressStream(s, &in_left, &in, &out_left, &next, nullptr);
    out.resize(at + kBlock - out_left);
    if (out.size() > limit) {
      BrotliDecoderDestroyInstance(s);
      too_large(limit);
    }
  }
  BrotliDecoderDestroyInstance(s);
  if (rc != BROTLI_DECODER_RESULT_SUCCESS) {
    throw HttpError(400, "the brotli body is corrupt or cut short");
  }
  return out;
}

}  // namespace

std::string decode_body(std::string_view encoding, std::string_view body, size_t limit) {
  if (encoding.empty() || iequals(encoding, "identity")) return std::string(body);
  if (iequals(encoding, "gzip") || iequals(encoding, "x-gzip") ||
      iequals(encoding, "deflate")) {
    return inflate_body(body, limit);
  }
  if (iequals(encoding, "br")) return unbrotli_body(body, limit);
  throw HttpError(415, fmt::format("Content-Encoding '{}' is not supported (gzip, deflate, br)",
                                   encoding.substr(0, 100)));
}

}  // namespace tessera::server
