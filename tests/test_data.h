// Where the tests' data lives in the repository: models/ (the default model
// and the small real models tests load) and tests/fixtures/ (llama.cpp's
// reference outputs: archs, tokenizer, chat-templates), each with its
// PROVENANCE.md. TESSERA_MODELS_DIR and TESSERA_FIXTURES_DIR in the
// environment override the paths the build compiled in (the staged GPU
// check carries copies of a few files).
#pragma once

#include <cstdlib>
#include <string>

namespace tessera::testing {

inline std::string data_dir_from(const char* env_var, const char* built_in) {
  if (const char* env = std::getenv(env_var); env != nullptr && *env != '\0') return env;
  return built_in;
}
inline std::string models_dir() { return data_dir_from("TESSERA_MODELS_DIR", TESSERA_MODELS_DIR); }
inline std::string fixtures_dir() {
  return data_dir_from("TESSERA_FIXTURES_DIR", TESSERA_FIXTURES_DIR);
}

}  // namespace tessera::testing
