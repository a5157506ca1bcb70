// What the model-running subcommands share: the model flags and loading a
// model (with progress on stderr for loads over a second).
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include <CLI/CLI.hpp>

#include "tessera/dist/mpi.h"
#include "tessera/engine/placement.h"
#include "tessera/models/model.h"
#include "tessera/runtime/runtime.h"
#include "tessera/serving/loaded_model.h"
#include "tessera/serving/serving.h"
#include "tessera/text/tokenizer.h"

namespace tessera::cli {

struct ModelFlags {
  std::string model;
  int threads = 0;  // 0: one per physical core
  int gpu_layers = -1;
  std::string device;
  bool cpu_moe = false;  // --cpu-moe: every layer's experts in host memory
  int n_cpu_moe = 0;     // --n-cpu-moe N: the first N layers' experts
  std::string weights_cache = "default";  // --weights-cache DIR, or off
  // Commands that split a model across MPI ranks (run, perplexity) set the
  // job; null or one rank: the whole model in this process.
  const MpiWorld* world = nullptr;
  std::vector<double> split_ranks;  // --split-ranks: the ranks' shares of the weights
};

// -m/--model, -t/--threads, --gpu-layers (--ngl), --device, --cpu-moe, --n-cpu-moe.
void add_model_flags(CLI::App& cmd, ModelFlags& flags);
// --split-ranks, for the commands that run across MPI ranks.
void add_split_flags(CLI::App& cmd, ModelFlags& flags);

using serving::LoadedModel;

// Loads flags.model with the engine's placement; `context` says what the
// context will hold (its size and cache types), for the memory estimate. The
// placement line goes to stderr when a GPU is there.
//
// Across MPI ranks (flags.world of more than one rank), every rank calls it:
// each checks it has the same file as rank 0 (size and header hash), loads
// its own layers (pipeline.h) and learns whether every rank did; a failure
// anywhere is thrown on every rank as one Error naming the rank and host.
LoadedModel load_model(const ModelFlags& flags, const PlacementOptions& context = {});

// On a worker rank (flags.world's rank > 0): loads this rank's stage with
// load_model and runs the front's commands until it stops. Returns 0.
int serve_stage(const ModelFlags& flags);
// Whether this process is a worker rank of an MPI job.
inline bool is_worker(const ModelFlags& flags) { return flags.world != nullptr && flags.world->rank() > 0; }

using serving::cpu_threads;
using serving::set_cpu_threads;

// --cache-type-k/-ctk and --cache-type-v/-ctv, as llama.cpp spells them:
// f16 (default), f32, bf16, q8_0, q4_0, q4_1, q5_0, q5_1.
struct CacheTypeFlags {
  std::string k = "f16";
  std::string v = "f16";
};
void add_cache_type_flags(CLI::App& cmd, CacheTypeFlags& flags);
DType cache_type(const std::string& flag, const std::string& value);
// Each cache type's block size must divide the model's head size; the error
// names the flag.
void check_cache_types(const Model& model, const CacheTypeFlags& flags);

// The sampling and stopping flags `run` and `chat` share, as llama.cpp
// spells them: --temp, --top-k, --top-p, --min-p, --repeat-penalty,
// --repeat-last-n, --presence-penalty, --frequency-penalty, -s/--seed,
// --ignore-eos, --stop (repeatable).
struct SamplingFlags {
  SamplerParams sampler;
  int64_t seed = -1;  // -1: random
  bool ignore_eos = false;
  std::vector<std::string> stop;
  std::string grammar;       // --grammar: GBNF text
  std::string grammar_file;  // --grammar-file
  std::string json_schema;       // -j/--json-schema
  std::string json_schema_file;  // --json-schema-file
  bool print_grammar = false;    // --print-grammar
};
// `seed_help` says how the seed is used (e.g. "turn i uses seed + i").
void add_sampling_flags(CLI::App& cmd, SamplingFlags& flags, const std::string& seed_help);
// The generation parameters of sequence (or turn) `i`: seed + i, wrapping
// below 0xFFFFFFFF (the "random" value); max_tokens `n_predict` (-1: until
// the end of text or the slot is full), at most `room`.
// With --grammar or --grammar-file, the output keeps to it (a parse error
// names the flag, the line and the column).
serving::GenerationParams generation_params(const SamplingFlags& flags, int i, int64_t n_predict,
                                            int64_t room, const Tokenizer& tokenizer);
// The GBNF text --grammar, --grammar-file, -j or --json-schema-file give
// (empty: none); `flag` gets the flag's name for messages.
std::string grammar_text(const SamplingFlags& flags, std::string* flag = nullptr);

// Milliseconds since `start`.
inline double ms_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
      .count();
}

}  // namespace tessera::cli
