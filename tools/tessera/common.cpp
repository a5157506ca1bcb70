#include "common.h"

#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <optional>

#include <fmt/format.h>

#include "tessera/core/error.h"
#include "tessera/engine/pipeline.h"
#include "tessera/grammar/grammar.h"

namespace tessera::cli {

void add_model_flags(CLI::App& cmd, ModelFlags& flags) {
  cmd.add_option("-m,--model", flags.model, "GGUF model file")->required();
  cmd.add_option("-t,--threads", flags.threads, "CPU threads (default: one per physical core)")
      ->check(CLI::Range(0, 1024));
  cmd.add_option("--gpu-layers,--n-gpu-layers,--ngl", flags.gpu_layers,
                 "(-ngl) Layers on the GPU, counting the output layer as llama.cpp does "
                 "(n_layer + 1: all; default: all that fit; 0: none)")
      ->check(CLI::Range(-1, 100000));
  cmd.add_option("--device", flags.device, "Device for offloaded layers, e.g. CUDA0");
  cmd.add_flag("--cpu-moe", flags.cpu_moe,
               "(-cmoe) Keep every layer's mixture-of-experts weights in host memory (the experts run "
               "on the CPU, the rest of each offloaded layer on the GPU)");
  cmd.add_option("--n-cpu-moe", flags.n_cpu_moe,
                 "(-ncmoe) Keep the experts of the first N layers in host memory")
      ->check(CLI::Range(0, 100000));
  cmd.add_option("--weights-cache", flags.weights_cache,
                 "Directory of weights images: the CPU's weights in its kernels' layout, written on a "
                 "first load of a model (64 MiB or more) and mapped on later ones; 'off': none "
                 "(default: $TESSERA_WEIGHTS_CACHE, else $XDG_CACHE_HOME/tessera/weights, else "
                 "~/.cache/tessera/weights)");
}

void add_split_flags(CLI::App& cmd, ModelFlags& flags) {
  cmd.add_option("--split-ranks", flags.split_ranks,
                 "Under mpirun: each rank's share of the layers, as proportions (e.g. 3,1); "
                 "default: balanced by bytes")
      ->delimiter(',')
      ->check(CLI::PositiveNumber);
}

namespace {

constexpr std::string_view kCacheTypes[] = {"f16", "f32", "bf16", "q8_0", "q4_0",
                                            "q4_1", "q5_0", "q5_1"};

}  // namespace

void add_cache_type_flags(CLI::App& cmd, CacheTypeFlags& flags) {
  cmd.add_option("--cache-type-k", flags.k, "(-ctk) KV cache type for keys: f16, f32, bf16, q8_0, "
                 "q4_0, q4_1, q5_0, q5_1 (quantized: the head size must be a multiple of 32)")
      ->capture_default_str();
  cmd.add_option("--cache-type-v", flags.v, "(-ctv) KV cache type for values (as -ctk)")
      ->capture_default_str();
}

DType cache_type(const std::string& flag, const std::string& value) {
  for (std::string_view name : kCacheTypes) {
    if (value == name) {
      if (auto t = dtype_from_name(name)) return *t;
    }
  }
  std::string known;
  for (std::string_view name : kCacheTypes) known += fmt::format("{}{}", known.empty() ? "" : ", ", name);
  fail(ErrorCategory::kInvalidArgument, "[{} {}] unknown cache type, expected one of {}", flag,
       value, known);
}

void check_cache_types(const Model& model, const CacheTypeFlags& flags) {
  const int64_t head = model.hparams().head_dim;
  for (const auto& [flag, value] : {std::pair{"--cache-type-k", &flags.k},
                                    std::pair{"--cache-type-v", &flags.v}}) {
    const DTypeInfo& info = dtype_info(cache_type(flag, *value));
    if (head % info.block_size != 0) {
      fail(ErrorCategory::kInvalidArgument,
           "[{} {}] needs the model's head size ({}) to be a multiple of its block size {}; "
           "f16, bf16 and f32 always fit",
           flag, *value, head, info.block_size);
    }
  }
}

namespace {

// FNV-1a of the file's header (keys and tensor infos) and its size: what
// tells the ranks' files apart without reading the weights.
std::string file_identity(const std::string& path) {
  const gguf::File file = gguf::File::open(path);
  std::ifstream in(path, std::ios::binary);
  std::string header(file.header_size(), '\0');
  if (!in.read(header.data(), static_cast<std::streamsize>(header.size()))) {
    fail(ErrorCategory::kIo, "[-m {}] cannot read the header", path);
  }
  uint64_t h = 0xcbf29ce484222325ull;
  for (char c : header) h = (h ^ static_cast<unsigned char>(c)) * 0x100000001b3ull;
  return fmt::format("{} bytes, header hash {:016x}", file.file_size(), h);
}

// Every rank's `status` ("" when fine); when any is not, throws on every
// rank one Error listing them, led by `what`.
void agree(Transport& t, const std::string& status, const std::string& what) {
  const std::vector<std::string> all = t.all_gather(t.host() + '\n' + status);
  std::string list;
  for (size_t r = 0; r < all.size(); ++r) {
    const size_t nl = all[r].find('\n');
    if (nl + 1 < all[r].size()) {
      list += fmt::format("\n  {} {}", rank_name(t, static_cast<int>(r), all[r].substr(0, nl)),
                          all[r].substr(nl + 1));
    }
  }
  if (list.empty()) return;
  t.mark_peers_done();  // every rank throws this one
  fail(ErrorCategory::kInvalidArgument, "[mpi] {}:{}", what, list);
}

// Every rank's part of a model split across the job's ranks.
LoadedModel load_stage(const ModelFlags& flags, serving::LoadOptions o) {
  Transport& t = *flags.world->transport();
  std::string identity, status;
  try {
    identity = file_identity(flags.model);
  } catch (const std::exception& e) {
    status = e.what();
  }
  agree(t, status, fmt::format("the model cannot be opened on every rank"));
  const std::vector<std::string> ids = t.all_gather(identity);
  if (identity != ids[0]) status = fmt::format("{}: {}; rank 0's: {}", flags.model, identity, ids[0]);
  agree(t, status, "the ranks' model files differ");

  std::vector<LayerRange> ranges;
  try {
    const gguf::File file = gguf::File::open(flags.model);
    ranges = split_layers(file, read_hparams(file).n_layer, t.size(), flags.split_ranks);
  } catch (const Error&) {
    t.mark_peers_done();  // the same file and flags: every rank throws this one
    throw;
  }
  auto pipeline = std::make_shared<Pipeline>(t, ranges);
  o.placement.pipeline = pipeline;
  std::optional<LoadedModel> out;
  try {
    out = serving::load(o);
  } catch (const std::exception& e) {
    status = e.what();
  }
  agree(t, status, "loading failed");
  pipeline->start();
  if (t.rank() == 0) {
    std::string where;
    for (size_t r = 0; r < ranges.size(); ++r) {
      where += fmt::format("{}{}: {}-{}", r ? ", " : "", r, ranges[r].begin, ranges[r].end - 1);
    }
    fmt::print(stderr, "pipeline: {} ranks, layers per rank {}\n", t.size(), where);
  }
  return std::move(*out);
}

}  // namespace

int serve_stage(const ModelFlags& flags) {
  // A worker ends when rank 0 stops the pipeline. mpirun passes Ctrl-C and
  // SIGTERM to every rank; they are rank 0's to act on (it finishes or
  // cancels what runs, then sends stop), so a worker does not die under a
  // pass rank 0 still waits for. (A rank 0 that dies still ends the job:
  // mpirun kills the rest.)
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGINT);
  sigaddset(&stop, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);
  LoadedModel lm = load_model(flags);
  lm.pipeline->serve(*lm.model);
  return 0;
}

LoadedModel load_model(const ModelFlags& flags, const PlacementOptions& context) {
  const auto start = std::chrono::steady_clock::now();
  serving::LoadOptions o{.model = flags.model, .threads = flags.threads, .placement = context};
  o.placement.gpu_layers = flags.gpu_layers;
  o.placement.n_cpu_moe = flags.cpu_moe ? int64_t{1} << 30 : flags.n_cpu_moe;
  o.placement.device = flags.device;
  o.placement.weights_cache = flags.weights_cache == "default" ? serving::default_weights_cache()
                                                                 : serving::weights_cache_dir(flags.weights_cache);
  o.device_flag = "--device";
  bool shown = false;
  // A line redrawn in place on a terminal; into a log, one line per 25%.
  const bool tty = isatty(fileno(stderr)) != 0;
  int last_quarter = -1;
  o.progress = [&](uint64_t done, uint64_t total) {
    if (ms_since(start) < 1000.0 && !shown) return;
    shown = true;
    const double pct = total ? 100.0 * double(done) / double(total) : 100.0;
    if (tty) {
      fmt::print(stderr, "\rloading {}: {:3.0f}%", flags.model, pct);
      if (done == total) fmt::print(stderr, "\n");
    } else if (const int quarter = static_cast<int>(pct / 25); quarter != last_quarter) {
      last_quarter = quarter;
      fmt::print(stderr, "loading {}: {:3.0f}%\n", flags.model, pct);
    }
  };
  const bool split = flags.world != nullptr && flags.world->size() > 1;
  if (split && flags.world->rank() > 0) o.progress = nullptr;  // rank 0 speaks for the job
  LoadedModel out = split ? load_stage(flags, o) : serving::load(o);
  if (!out.placement.empty() && !is_worker(flags)) fmt::print(stderr, "{}\n", out.placement);
  if (const std::string line = serving::weights_image_line(*out.model); !line.empty()) {
    fmt::print(stderr, "{}\n", line);
  }
  // What the devices the model landed on say about themselves (a GPU
  // without cuBLAS runs its prefill on the CPU), once each.
  for (const Device* d : out.model->devices()) {
    for (const std::string& note : d->notes()) {
      fmt::print(stderr, "warning: {}: {}\n", d->name(), note);
    }
  }
  return out;
}

}  // namespace tessera::cli

namespace tessera::cli {

void add_sampling_flags(CLI::App& cmd, SamplingFlags& f, const std::string& seed_help) {
  SamplerParams& s = f.sampler;
  cmd.add_option("--temp", s.temp, "Temperature (0: greedy)")->capture_default_str();
  cmd.add_option("--top-k", s.top_k, "Top-k (0: off)")->capture_default_str();
  cmd.add_option("--top-p", s.top_p, "Top-p (1: off)")->capture_default_str()->check(CLI::Range(0.0, 1.0));
  cmd.add_option("--min-p", s.min_p, "Min-p (0: off)")->capture_default_str()->check(CLI::Range(0.0, 1.0));
  cmd.add_option("--repeat-penalty", s.repeat_penalty, "Repetition penalty (1: off)")->capture_default_str();
  cmd.add_option("--repeat-last-n", s.repeat_last_n, "Tokens the penalties look at (-1: all)")
      ->capture_default_str()
      ->check(CLI::Range(-1, 1 << 30));
  cmd.add_option("--presence-penalty", s.presence_penalty, "Presence penalty")->capture_default_str();
  cmd.add_option("--frequency-penalty", s.frequency_penalty, "Frequency penalty")->capture_default_str();
  cmd.add_option("-s,--seed", f.seed, "Random seed (-1 or absent: random); " + seed_help)
      ->check(CLI::Range(int64_t{-1}, int64_t{0xFFFFFFFE}));
  cmd.add_flag("--ignore-eos", f.ignore_eos, "Keep generating past end-of-generation tokens");
  cmd.add_option("--stop", f.stop,
                 "Stop when the text contains this string (repeatable); the text ends before it")
      ->allow_extra_args(false)
      ->check([](const std::string& v) { return v.empty() ? std::string("--stop: an empty string") : std::string(); });
  auto* g = cmd.add_option("--grammar", f.grammar, "GBNF grammar the output keeps to (llama.cpp's syntax; start rule: root)");
  auto* gf = cmd.add_option("--grammar-file", f.grammar_file, "File with a GBNF grammar")->excludes(g);
  auto* j = cmd.add_option("-j,--json-schema", f.json_schema,
                           "JSON schema the output keeps to (any JSON object: "
                           "'{\"type\": \"object\"}'); unsupported keywords are errors")->excludes(g)->excludes(gf);
  cmd.add_option("--json-schema-file", f.json_schema_file, "File with a JSON schema")
      ->excludes(g)->excludes(gf)->excludes(j);
  cmd.add_flag("--print-grammar", f.print_grammar,
               "Print the GBNF grammar of --grammar(-file) or the JSON schema (-j) and exit (no model is loaded)");
}

std::string grammar_text(const SamplingFlags& f, std::string* flag_out) {
  auto read = [](const std::string& flag, const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) fail(ErrorCategory::kIo, "[{} {}] cannot read the file", flag, path);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  std::string text, flag;
  if (!f.grammar.empty()) text = f.grammar, flag = "--grammar";
  if (!f.grammar_file.empty()) text = read("--grammar-file", f.grammar_file), flag = "--grammar-file " + f.grammar_file;
  if (!f.json_schema.empty() || !f.json_schema_file.empty()) {
    flag = f.json_schema.empty() ? "--json-schema-file " + f.json_schema_file : "--json-schema";
    const std::string schema = f.json_schema.empty() ? read("--json-schema-file", f.json_schema_file) : f.json_schema;
    try {
      text = grammar::json_schema_to_grammar(nlohmann::ordered_json::parse(schema));
    } catch (const nlohmann::json::parse_error& e) {
      fail(ErrorCategory::kInvalidArgument, "[{}] not valid JSON: {}", flag, e.what());
    } catch (const Error& e) {
      fail(ErrorCategory::kInvalidArgument, "[{}] {}", flag, e.what());
    }
  }
  if (flag_out != nullptr) *flag_out = flag;
  return text;
}

serving::GenerationParams generation_params(const SamplingFlags& f, int i, int64_t n_predict,
                                            int64_t room, const Tokenizer& tokenizer) {
  serving::GenerationParams p;
  std::string flag;
  const std::string text = grammar_text(f, &flag);
  if (!flag.empty()) {
    try {
      p.masks = grammar::masks(grammar::Grammar::parse(text), tokenizer);
    } catch (const Error& e) {
      fail(ErrorCategory::kInvalidArgument, "[{}] {}", flag, e.what());
    }
  }
  p.sampling = f.sampler;
  p.sampling.seed = f.seed < 0 ? 0xFFFFFFFF : static_cast<uint32_t>((f.seed + i) % 0xFFFFFFFF);
  p.ignore_eos = f.ignore_eos;
  p.stop = f.stop;
  p.max_tokens = static_cast<int32_t>(n_predict < 0 ? -1 : std::min(n_predict, std::max<int64_t>(room, 0)));
  return p;
}

}  // namespace tessera::cli
