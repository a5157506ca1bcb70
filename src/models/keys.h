// Reading `<architecture>.<suffix>` metadata keys with errors that name the
// file and the key: the shared hyperparameters (hparams.cpp) and each
// architecture's own (src/models/<arch>.cpp) go through it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "tessera/gguf/gguf.h"

namespace tessera {
struct Hparams;
}

namespace tessera::models {

class KeyReader {
 public:
  KeyReader(const gguf::File& file, std::string arch) : file_(file), arch_(std::move(arch)) {}

  std::string key(std::string_view suffix) const;
  const gguf::Value* find(std::string_view suffix) const;
  std::string_view file_name() const { return file_.name(); }

  // An unsigned value, or the largest element of a per-layer array whose
  // elements are all equal (differing ones are refused as unsupported).
  std::optional<int64_t> uint(std::string_view suffix) const;
  int64_t required(std::string_view suffix) const;           // uint(), or Error naming the key
  std::optional<float> real(std::string_view suffix) const;  // finite f32
  std::optional<std::string> string(std::string_view suffix) const;

  [[noreturn]] void bad(std::string_view suffix, const std::string& found,
                        std::string_view expected) const;
  void check_range(std::string_view suffix, int64_t v, int64_t lo, int64_t hi) const;

 private:
  const gguf::File& file_;
  std::string arch_;
};

// Hparams::n_cls_out from `<arch>.classifier.output_labels` (a reranker's
// labels: 1 to 4096; 1 when absent).
void read_cls_labels(const gguf::File& file, Hparams& hp);

// Hparams::swa_layers from `attention.sliding_window_pattern`: a per-layer
// array (nonzero: sliding window), or a period (default `period`), as
// llama.cpp's set_swa_pattern reads it: with `dense_first`, layer il is
// windowed unless il % period == 0 (ModernBERT), else when il % period <
// period - 1 (Gemma 3).
void read_swa_pattern(const KeyReader& r, Hparams& hp, int64_t period, bool dense_first);

}  // namespace tessera::models
