// libFuzzer target for the tokenizers.
//
// First byte < 0x80: the rest is text for one of the shared vocabularies
// (chosen by the low bits; bits 4 and 5 set add_special and parse_special).
// tokenize() must not throw, every id must be in range, and detokenize()
// must give an SPM input back byte for byte (U+2581 as a space). First byte >= 0x80: the rest
// is a GGUF file; Tokenizer::from_gguf may refuse it with tessera::Error,
// and a tokenizer it builds must then tokenize a fixed text safely.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tessera/core/error.h"
#include "tessera/gguf/gguf.h"
#include "tessera/text/tokenizer.h"

namespace {

using tessera::Tokenizer;

void require(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "fuzz_tokenizer: %s\n", what);
    std::abort();
  }
}

std::filesystem::path fixture_dir() {
  return std::filesystem::path(TESSERA_FIXTURES_DIR) / "tokenizer";
}

// Loaded once per process; libFuzzer calls the target many times.
const std::vector<Tokenizer>& vocabularies() {
  static const std::vector<Tokenizer> all = [] {
    std::vector<Tokenizer> out;
    for (const char* name : {"llama-spm", "gpt-2", "deepseek-llm", "falcon", "mpt", "phi-3",
                             "starcoder", "deepseek-coder", "bert-bge", "albert-ugm"}) {
      const auto path = fixture_dir() / (std::string("ggml-vocab-") + name + ".gguf");
      require(std::filesystem::exists(path), "a vocabulary of tests/fixtures/tokenizer is missing");
      out.push_back(Tokenizer::from_gguf(tessera::gguf::File::open(path)));
    }
    return out;
  }();
  return all;
}

void check(const Tokenizer& tok, std::string_view text, bool add_special, bool parse_special) {
  const std::vector<tessera::TokenId> ids = tok.tokenize(text, add_special, parse_special);
  for (const tessera::TokenId id : ids) {
    require(id >= 0 && static_cast<size_t>(id) < tok.n_vocab(), "id out of range");
    (void)tok.token_to_piece(id);
    (void)tok.is_eog(id);
  }
  const std::string back = tok.detokenize(ids, {.remove_special = true, .clean_spaces = false});
  if (tok.model() == tessera::TokenizerModel::kSpm && !parse_special) {
    // U+2581 in the input reads back as a space: SentencePiece's escape for it.
    std::string want;
    for (size_t i = 0; i < text.size(); ++i) {
      if (text.substr(i, 3) == "\xE2\x96\x81") {
        want += ' ';
        i += 2;
      } else {
        want += text[i];
      }
    }
    require(back == want, "SPM round trip lost bytes");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t mode = data[0];
  const std::string_view rest(reinterpret_cast<const char*>(data + 1), size - 1);
  if (mode < 0x80) {
    const std::vector<Tokenizer>& vocabs = vocabularies();
    check(vocabs[(mode & 0x0F) % vocabs.size()], rest, (mode & 0x10) != 0, (mode & 0x20) != 0);
    return 0;
  }
  std::optional<Tokenizer> tok;
  try {
    const auto file = tessera::gguf::File::from_bytes(
        {reinterpret_cast<const uint8_t*>(rest.data()), rest.size()}, "fuzz.gguf");
    tok.emplace(Tokenizer::from_gguf(file));
  } catch (const tessera::Error&) {
    return 0;  // refused: the expected outcome for most inputs
  }
  check(*tok, "Hello world! <s> 123 \xff\xfe \xe4\xb8\x80 \n\t", true, true);
  return 0;
}
