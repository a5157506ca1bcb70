#include "session_file.h"

#include <array>
#include <cstring>
#include <fstream>

#include "tessera/core/error.h"
#include "tessera/gguf/gguf.h"
#include "tessera/runtime/buffer.h"

namespace tessera::serving {
namespace {

constexpr std::array<char, 4> kMagic{'T', 'S', 'S', 'N'};
constexpr uint32_t kVersion = 1;

struct Header {
  uint64_t model_id;
  uint32_t type_k, type_v, layers, n_tokens;
};

uint64_t fnv1a(uint64_t h, const void* data, size_t n) {
  const auto* p = static_cast<const uint8_t*>(data);
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 0x100000001b3ull;
  return h;
}

// Each layer's K then V tensor.
std::vector<Tensor*> cache_tensors(const KvCache& cache) {
  std::vector<Tensor*> out;
  for (size_t l = 0; l < cache.k().size(); ++l) {
    out.push_back(cache.k()[l]);
    out.push_back(cache.v()[l]);
  }
  return out;
}

}  // namespace

uint64_t session_model_id(const Model& model) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (const gguf::TensorInfo& t : model.file().tensors()) {
    h = fnv1a(h, t.name.data(), t.name.size());
    h = fnv1a(h, &t.type, sizeof t.type);
    h = fnv1a(h, t.ne.data(), sizeof t.ne);
  }
  const int64_t n_vocab = model.hparams().n_vocab;
  return fnv1a(h, &n_vocab, sizeof n_vocab);
}

void write_session(const std::filesystem::path& path, const Model& model, const KvCache& cache,
                   std::span<const TokenId> tokens, std::span<const int64_t> cells) {
  TESSERA_CHECK(tokens.size() == cells.size());
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) fail(ErrorCategory::kIo, "[session {}] cannot create the file", path.string());
  const std::vector<Tensor*> tensors = cache_tensors(cache);
  const Header h{session_model_id(model), static_cast<uint32_t>(cache.type_k()),
                 static_cast<uint32_t>(cache.type_v()), static_cast<uint32_t>(cache.k().size()),
                 static_cast<uint32_t>(tokens.size())};
  out.write(kMagic.data(), kMagic.size());
  out.write(reinterpret_cast<const char*>(&kVersion), sizeof kVersion);
  out.write(reinterpret_cast<const char*>(&h), sizeof h);
  out.write(reinterpret_cast<const char*>(tokens.data()),
            static_cast<std::streamsize>(tokens.size_bytes()));
  std::vector<uint8_t> row;
  for (const Tensor* t : tensors) {
    row.resize(t->row_size());
    for (int64_t c : cells) {
      t->buffer->get_tensor(*t, row.data(), static_cast<size_t>(c) * row.size(), row.size());
      out.write(reinterpret_cast<const char*>(row.data()), static_cast<std::streamsize>(row.size()));
    }
  }
  out.flush();
  if (!out) fail(ErrorCategory::kIo, "[session {}] write failed (disk full?)", path.string());
}

std::vector<TokenId> read_session(
    const std::filesystem::path& path, const Model& model, KvCache& cache,
    const std::function<std::vector<int64_t>(std::span<const TokenId>)>& claim,
    const std::function<void(std::span<const int64_t>)>& unclaim) {
  const std::string name = path.string();
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(ErrorCategory::kInvalidFile, "[session {}] cannot open the file", name);
  std::array<char, 4> magic{};
  uint32_t version = 0;
  Header h{};
  in.read(magic.data(), magic.size());
  in.read(reinterpret_cast<char*>(&version), sizeof version);
  in.read(reinterpret_cast<char*>(&h), sizeof h);
  if (!in || magic != kMagic) {
    fail(ErrorCategory::kInvalidFile, "[session {}] not a tessera session file", name);
  }
  if (version != kVersion) {
    fail(ErrorCategory::kInvalidFile, "[session {}] version {}, expected {}", name, version, kVersion);
  }
  if (h.model_id != session_model_id(model)) {
    fail(ErrorCategory::kInvalidFile, "[session {}] saved with another model than {}", name,
         model.file().name());
  }
  if (h.type_k != static_cast<uint32_t>(cache.type_k()) ||
      h.type_v != static_cast<uint32_t>(cache.type_v()) || h.layers != cache.k().size()) {
    fail(ErrorCategory::kInvalidFile,
         "[session {}] saved with cache types k {} v {}, this context has k {} v {}", name,
         dtype_from_raw(h.type_k) ? dtype_name(*dtype_from_raw(h.type_k)) : "?",
         dtype_from_raw(h.type_v) ? dtype_name(*dtype_from_raw(h.type_v)) : "?",
         dtype_name(cache.type_k()), dtype_name(cache.type_v()));
  }
  const std::vector<Tensor*> tensors = cache_tensors(cache);
  uint64_t expect = sizeof kMagic + sizeof version + sizeof h + uint64_t{h.n_tokens} * sizeof(TokenId);
  for (const Tensor* t : tensors) expect += uint64_t{h.n_tokens} * t->row_size();
  std::error_code ec;
  if (const uintmax_t size = std::filesystem::file_size(path, ec); ec || size != expect) {
    fail(ErrorCategory::kInvalidFile, "[session {}] {} bytes, expected {} for {} tokens (truncated?)",
         name, ec ? 0 : size, expect, h.n_tokens);
  }
  std::vector<TokenId> tokens(h.n_tokens);
  in.read(reinterpret_cast<char*>(tokens.data()), static_cast<std::streamsize>(tokens.size() * sizeof(TokenId)));
  for (TokenId t : tokens) {
    if (t < 0 || t >= model.hparams().n_vocab) {
      fail(ErrorCategory::kInvalidFile, "[session {}] token {} is outside the vocabulary", name, t);
    }
  }
  if (tokens.empty()) return tokens;
  const std::vector<int64_t> cells = claim(tokens);
  try {
    std::vector<uint8_t> row;
    for (Tensor* t : tensors) {
      row.resize(t->row_size());
      for (int64_t c : cells) {
        in.read(reinterpret_cast<char*>(row.data()), static_cast<std::streamsize>(row.size()));
        if (!in) fail(ErrorCategory::kInvalidFile, "[session {}] read failed", name);
        t->buffer->set_tensor(*t, row.data(), static_cast<size_t>(c) * row.size(), row.size());
      }
    }
  } catch (...) {
    unclaim(cells);
    throw;
  }
  return tokens;
}

}  // namespace tessera::serving
