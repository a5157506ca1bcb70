// The session file the generator's save_session / load_session write and
// read: one sequence's tokens and its rows of every layer's K and V, bound to
// the model and the cache types it was made with.
//
//   "TSSN" u32 version (1) u64 model id u32 type_k u32 type_v u32 layers
//   u32 n_tokens, i32 tokens[n_tokens], then per layer: the K rows, the V
//   rows, in order of position (row bytes as the cache tensors hold them)
//
// Little-endian, as GGUF is.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <span>
#include <vector>

#include "tessera/engine/kv_cache.h"
#include "tessera/models/model.h"
#include "tessera/text/tokenizer.h"

namespace tessera::serving {

// What identifies a model for a session: every tensor's name, type and
// shape and the vocabulary size, hashed.
uint64_t session_model_id(const Model& model);

// Writes the rows `cells` (in order of position) and their `tokens`.
void write_session(const std::filesystem::path& path, const Model& model, const KvCache& cache,
                   std::span<const TokenId> tokens, std::span<const int64_t> cells);

// Reads a session; `claim(n)` returns n cells to hold its rows (at
// positions 0..n-1), `unclaim` gives them back when the file fails after the
// claim. Throws Error(kInvalidFile) naming the file.
std::vector<TokenId> read_session(
    const std::filesystem::path& path, const Model& model, KvCache& cache,
    const std::function<std::vector<int64_t>(std::span<const TokenId>)>& claim,
    const std::function<void(std::span<const int64_t>)>& unclaim);

}  // namespace tessera::serving
