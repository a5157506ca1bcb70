// The architecture fixtures of shared/fixtures/archs (PROVENANCE.md there):
// a random-weight GGUF per architecture with llama.cpp's prompt logits and
// greedy tokens.
#pragma once

#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "models/model_test_util.h"
#include "tessera/gguf/gguf.h"

namespace tessera::testing {

inline const std::array<std::string, 10> kFixtureArchs = {"llama",   "qwen2",   "qwen3",    "gemma3",
                                                          "phi3",    "qwen3moe", "mixtral", "qwen2moe",
                                                          "gpt_oss", "olmoe"};

// Per prompt position, the NMSE of the engine's logits against llama.cpp's.
// Both sides round weights and the KV cache to f16 and sum in f32, in other
// orders (llama.cpp also rounds activations to f16 for its matmuls); the
// worst measured is 2.9e-5 (llama, whose weights are the largest), and
// llama.cpp's own batch and one-token runs differ by up to 0.0057 in a
// logit. ggml's whole-model limit, 2e-3, would let a missing rope_freqs
// (6.8e-4) pass; 1e-4 does not (tests/models/arch_loader_test.cpp).
inline constexpr double kArchNmseLimit = 1e-4;

struct ArchFixture {
  std::string architecture;     // general.architecture (mixtral's is llama)
  std::string gguf;             // path of NAME.gguf
  std::vector<int32_t> prompt;  // 24 ids, BOS first
  std::vector<int32_t> greedy;  // llama.cpp's 24 greedy tokens after the prompt
  int64_t n_vocab = 0;
  double min_margin = 0;      // smallest top-1/top-2 gap along the greedy path
  std::vector<float> logits;  // [prompt][n_vocab], one batch

  static ArchFixture load(const std::string& name) {
    const std::string dir = fixtures_dir() + "/archs/";
    std::ifstream js(dir + name + ".json");
    if (!js) throw std::runtime_error("cannot open " + dir + name + ".json");
    const nlohmann::json j = nlohmann::json::parse(js);
    ArchFixture f;
    f.gguf = dir + name + ".gguf";
    f.architecture = j.at("architecture").get<std::string>();
    f.prompt = j.at("prompt").get<std::vector<int32_t>>();
    f.greedy = j.at("greedy").get<std::vector<int32_t>>();
    f.n_vocab = j.at("n_vocab").get<int64_t>();
    f.min_margin = j.at("min_margin").get<double>();
    const std::string logits_path = dir + j.at("logits").get<std::string>();
    std::ifstream lf(logits_path, std::ios::binary);
    f.logits.resize(f.prompt.size() * static_cast<size_t>(f.n_vocab));
    lf.read(reinterpret_cast<char*>(f.logits.data()),
            static_cast<std::streamsize>(f.logits.size() * sizeof(float)));
    if (!lf) throw std::runtime_error("short read of " + logits_path);
    return f;
  }
};

// A copy of the GGUF at `path` in the temp folder, without the tensors named
// in `skip`, with `edit` applied to its keys (and tensors) before writing.
inline std::filesystem::path rewrite_gguf(const std::string& path, const std::string& tag,
                                          const std::function<void(gguf::Writer&)>& edit,
                                          const std::vector<std::string>& skip = {}) {
  const gguf::File src = gguf::File::open(path);
  gguf::Writer w;
  for (const gguf::KeyValue& kv : src.kvs()) w.set_value(kv.key, kv.value);
  for (const gguf::TensorInfo& t : src.tensors()) {
    if (std::find(skip.begin(), skip.end(), t.name) != skip.end()) continue;
    w.add_tensor(t.name, t.type, std::span(t.ne.data(), static_cast<size_t>(t.n_dims)),
                 src.tensor_data(t));
  }
  edit(w);
  const auto out = std::filesystem::temp_directory_path() /
                   ("tessera-arch-" + tag + "-" + std::to_string(::getpid()) + ".gguf");
  w.write(out);
  return out;
}

}  // namespace tessera::testing
