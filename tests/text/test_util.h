// Helpers for the tokenizer tests: the fixtures folder, small vocabularies
// written with gguf::Writer, and printable renderings of text and ids.
#pragma once

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "tessera/gguf/gguf.h"
#include "tessera/text/tokenizer.h"
#include "test_data.h"
#include "text/unicode.h"

namespace tessera::text::testing {

using tessera::testing::fixtures_dir;
using tessera::testing::models_dir;

// llama.cpp's vocab-only GGUFs and their test-tokenizer-0 sets.
inline std::filesystem::path fixture_dir() { return std::filesystem::path(fixtures_dir()) / "tokenizer"; }

inline std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// Bytes as a C-like literal: printable ASCII kept, the rest as \xNN.
inline std::string escaped(std::string_view text) {
  std::string out;
  for (const char c : text) {
    const auto u = static_cast<unsigned char>(c);
    if (u >= 0x20 && u < 0x7F && c != '\\') {
      out += c;
    } else {
      out += fmt::format("\\x{:02x}", u);
    }
  }
  return out;
}

inline std::string joined(const std::vector<TokenId>& ids) {
  return fmt::format("{}", fmt::join(ids, " "));
}

// A tokenizer over bytes written in memory; the bytes outlive the File only
// as long as the parse, which is all from_gguf() needs.
inline Tokenizer tokenizer_from(const gguf::Writer& w) {
  const std::vector<uint8_t> bytes = w.to_bytes();
  const gguf::File file = gguf::File::from_bytes(bytes, "test.gguf");
  return Tokenizer::from_gguf(file);
}

// The 256 `<0xNN>` byte tokens, in order.
inline std::vector<std::string> byte_tokens() {
  std::vector<std::string> out;
  for (int b = 0; b < 256; ++b) out.push_back(fmt::format("<0x{:02X}>", b));
  return out;
}

// A small llama (SPM) vocabulary: <unk> <s> </s>, 256 byte tokens, then
// `pieces` with `scores`.
inline gguf::Writer spm_writer(const std::vector<std::string>& pieces,
                               const std::vector<float>& scores) {
  std::vector<std::string> tokens = {"<unk>", "<s>", "</s>"};
  std::vector<float> all_scores(3, 0.0f);
  std::vector<int32_t> types = {2, 3, 3};
  for (const std::string& b : byte_tokens()) {
    tokens.push_back(b);
    all_scores.push_back(0.0f);
    types.push_back(6);
  }
  for (size_t i = 0; i < pieces.size(); ++i) {
    tokens.push_back(pieces[i]);
    all_scores.push_back(scores[i]);
    types.push_back(1);
  }
  gguf::Writer w;
  w.set_string("general.architecture", "llama");
  w.set_string("tokenizer.ggml.model", "llama");
  w.set_array_strings("tokenizer.ggml.tokens", tokens);
  w.set_array_f32("tokenizer.ggml.scores", all_scores);
  w.set_array_i32("tokenizer.ggml.token_type", types);
  return w;
}

// A small gpt2 (byte-level BPE) vocabulary: the 256 byte-level characters,
// then `extra` tokens, with `merges` in rank order.
// A small bert (WordPiece) vocabulary: [PAD], then [unusedN] up to id 99,
// [UNK] [CLS] [SEP] [MASK] at 100..103, then `pieces` (word-initial pieces
// with their U+2581 prefix, continuations bare, as llama.cpp's converter
// writes them).
inline gguf::Writer wpm_writer(const std::vector<std::string>& pieces) {
  std::vector<std::string> tokens = {"[PAD]"};
  std::vector<int32_t> types = {3};
  while (tokens.size() < 100) {
    tokens.push_back(fmt::format("[unused{}]", tokens.size()));
    types.push_back(3);
  }
  for (const char* t : {"[UNK]", "[CLS]", "[SEP]", "[MASK]"}) {
    tokens.push_back(t);
    types.push_back(tokens.size() == 101 ? 2 : 3);
  }
  for (const std::string& p : pieces) {
    tokens.push_back(p);
    types.push_back(1);
  }
  gguf::Writer w;
  w.set_string("general.architecture", "bert");
  w.set_string("tokenizer.ggml.model", "bert");
  w.set_array_strings("tokenizer.ggml.tokens", tokens);
  w.set_array_i32("tokenizer.ggml.token_type", types);
  return w;
}

// A t5 (Unigram) vocabulary: <pad> </s> <unk>, then `pieces` (type, score)
// as given, and the charsmap when one is given.
struct UgmPiece {
  std::string text;
  float score = -1.0f;
  int32_t type = 1;  // normal
};
inline gguf::Writer ugm_writer(const std::vector<UgmPiece>& pieces,
                               std::optional<std::vector<uint8_t>> charsmap = std::nullopt) {
  std::vector<std::string> tokens = {"<pad>", "</s>", "<unk>"};
  std::vector<float> scores = {0.0f, 0.0f, 0.0f};
  std::vector<int32_t> types = {3, 3, 2};
  for (const UgmPiece& p : pieces) {
    tokens.push_back(p.text);
    scores.push_back(p.score);
    types.push_back(p.type);
  }
  gguf::Writer w;
  w.set_string("general.architecture", "t5");
  w.set_string("tokenizer.ggml.model", "t5");
  w.set_array_strings("tokenizer.ggml.tokens", tokens);
  w.set_array_f32("tokenizer.ggml.scores", scores);
  w.set_array_i32("tokenizer.ggml.token_type", types);
  if (charsmap) w.set_array<uint8_t>("tokenizer.ggml.precompiled_charsmap", *charsmap);
  return w;
}

// A precompiled charsmap whose double array maps "a" to "b": the root's
// BASE 1 puts its child by 'a' at 1 ^ 0x61 = 96, a leaf whose BASE leads to
// entry `value_at` (96 ^ BASE), holding the replacement's offset into the
// strings "b\0".
inline std::vector<uint8_t> a_to_b_charsmap(uint32_t value_at, uint32_t offset) {
  std::vector<uint32_t> a(256, 0);
  a[0] = 1u << 10;                                          // root: BASE 1
  a[96] = ((96u ^ value_at) << 10) | (1u << 8) | 0x61u;     // 'a', a leaf
  if (value_at < a.size()) a[value_at] = (1u << 31) | offset;  // the value entry
  std::vector<uint8_t> out(4);
  const uint32_t blob = static_cast<uint32_t>(a.size() * 4);
  std::memcpy(out.data(), &blob, 4);
  out.resize(4 + blob);
  std::memcpy(out.data() + 4, a.data(), blob);
  out.push_back('b');
  out.push_back('\0');
  return out;
}

inline gguf::Writer bpe_writer(const std::vector<std::string>& extra,
                               const std::vector<std::string>& merges,
                               std::optional<std::string> pre = "gpt-2") {
  std::vector<std::string> tokens;
  for (int b = 0; b < 256; ++b) {
    std::string t;
    append_utf8(t, byte_to_code_point(static_cast<uint8_t>(b)));
    tokens.push_back(t);
  }
  tokens.insert(tokens.end(), extra.begin(), extra.end());
  gguf::Writer w;
  w.set_string("general.architecture", "gpt2");
  w.set_string("tokenizer.ggml.model", "gpt2");
  if (pre) w.set_string("tokenizer.ggml.pre", *pre);
  w.set_array_strings("tokenizer.ggml.tokens", tokens);
  w.set_array_i32("tokenizer.ggml.token_type", std::vector<int32_t>(tokens.size(), 1));
  w.set_array_strings("tokenizer.ggml.merges", merges);
  return w;
}

}  // namespace tessera::text::testing
