// What the model and engine tests share: the models' paths and the
// error measure of ggml's tests.
#pragma once

#include <cstdlib>
#include <span>
#include <string>

#include "test_data.h"

namespace tessera::testing {

inline std::string stories() { return models_dir() + "/stories260K.gguf"; }
// 4 layers, 4 heads of 32 (2 KV heads), rope_freqs: quantized caches fit it.
inline std::string llama_fixture() { return fixtures_dir() + "/archs/llama.gguf"; }

// Normalized mean squared error of `got` against `want` (same length).
template <class A, class B>
double nmse(const A& got, const B& want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < std::size(want); ++i) {
    const double g = got[i], w = want[i];
    num += (g - w) * (g - w);
    den += w * w;
  }
  return num / den;
}

}  // namespace tessera::testing
