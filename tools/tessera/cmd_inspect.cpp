// `tessera inspect MODEL [--json] [--metadata]`: what a GGUF file holds.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <optional>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "tessera/core/error.h"
#include "tessera/gguf/gguf.h"
#include "tessera/models/model.h"

namespace tessera::cli {
namespace {

using nlohmann::json;

// Hyperparameters that llama.cpp reads as `<arch>.<suffix>`. Per-layer arrays
// are summarised by their largest element.
std::optional<uint64_t> arch_uint(const gguf::File& file, const std::string& arch,
                                  std::string_view suffix) {
  const gguf::Value* v = file.find(fmt::format("{}.{}", arch, suffix));
  if (v == nullptr) return std::nullopt;
  if (v->type() == gguf::ValueType::kArray) {
    const gguf::ArrayView& a = v->array();
    if (a.size() == 0) return std::nullopt;
    uint64_t best = 0;
    for (uint64_t i = 0; i < a.size(); ++i) best = std::max(best, a.number<uint64_t>(i));
    return best;
  }
  return v->u64();
}

// An f32 value as the double with the same shortest decimal form (1e-05, not
// 9.99999974737875e-06), so text and JSON show what the file's author wrote.
std::optional<double> arch_float(const gguf::File& file, const std::string& arch,
                                 std::string_view suffix) {
  const gguf::Value* v = file.find(fmt::format("{}.{}", arch, suffix));
  if (v == nullptr) return std::nullopt;
  return std::stod(fmt::format("{}", v->f32()));
}

std::optional<std::string> string_key(const gguf::File& file, std::string_view key) {
  const gguf::Value* v = file.find(key);
  if (v == nullptr) return std::nullopt;
  return std::string(v->string());
}

struct Facts {
  std::string architecture;
  std::optional<std::string> name;
  std::optional<uint64_t> n_ctx_train, n_embd, n_layer, n_head, n_head_kv, n_ff;
  double rope_freq_base = 10000.0;  // llama.cpp's default when the key is absent
  bool rope_freq_base_default = true;
  std::optional<double> norm_rms_eps;
  std::optional<double> norm_eps;       // LayerNorm's (encoders)
  bool encoder = false;                 // attention.causal false
  std::optional<uint64_t> pooling;      // llama.cpp's pooling_type
  std::optional<std::string> tokenizer_model;
  std::optional<uint64_t> n_vocab;
  uint64_t n_params = 0;
  uint64_t n_bytes = 0;
  std::map<std::string, int> type_counts;
  // Whether tessera can load the file: its architecture's keys and tensors.
  std::string error;                  // keys or architecture refused (empty: read)
  std::vector<std::string> problems;  // tensors missing, misshapen or of unread types
  bool loads() const { return error.empty() && problems.empty(); }
};

// The file against its architecture's declarations, as Model::load checks it.
void check(const gguf::File& file, Facts& f) {
  try {
    f.problems = check_tensors(file);
  } catch (const Error& e) {
    f.error = e.what();
  }
}

Facts gather(const gguf::File& file) {
  Facts f;
  f.architecture = string_key(file, "general.architecture").value_or("");
  f.name = string_key(file, "general.name");
  const std::string& a = f.architecture;
  if (!a.empty()) {
    f.n_ctx_train = arch_uint(file, a, "context_length");
    f.n_embd = arch_uint(file, a, "embedding_length");
    f.n_layer = arch_uint(file, a, "block_count");
    f.n_head = arch_uint(file, a, "attention.head_count");
    f.n_head_kv = arch_uint(file, a, "attention.head_count_kv");
    if (!f.n_head_kv) f.n_head_kv = f.n_head;  // no key: plain multi-head attention
    f.n_ff = arch_uint(file, a, "feed_forward_length");
    if (auto base = arch_float(file, a, "rope.freq_base")) {
      f.rope_freq_base = *base;
      f.rope_freq_base_default = false;
    }
    f.norm_rms_eps = arch_float(file, a, "attention.layer_norm_rms_epsilon");
    f.norm_eps = arch_float(file, a, "attention.layer_norm_epsilon");
    if (const gguf::Value* c = file.find(a + ".attention.causal"); c != nullptr && c->type() == gguf::ValueType::kBool) {
      f.encoder = !c->boolean();
    }
    f.pooling = arch_uint(file, a, "pooling_type");
  }
  f.tokenizer_model = string_key(file, "tokenizer.ggml.model");
  if (const gguf::Value* tokens = file.find("tokenizer.ggml.tokens")) {
    f.n_vocab = tokens->array().size();
  } else if (!a.empty()) {
    f.n_vocab = arch_uint(file, a, "vocab_size");
  }
  for (const gguf::TensorInfo& t : file.tensors()) {
    f.n_params += static_cast<uint64_t>(t.n_elements());
    f.n_bytes += t.nbytes;
    f.type_counts[std::string(dtype_name(t.type))] += 1;
  }
  check(file, f);
  return f;
}

std::string shape_string(const gguf::TensorInfo& t) {
  std::string s = "[";
  for (int d = 0; d < t.n_dims; ++d) s += fmt::format("{}{}", d ? ", " : "", t.ne[d]);
  return s + "]";
}

std::string human_bytes(uint64_t n) {
  if (n < 1024) return fmt::format("{} B", n);
  if (n < 1024 * 1024) return fmt::format("{:.2f} KiB", n / 1024.0);
  if (n < 1024ull * 1024 * 1024) return fmt::format("{:.2f} MiB", n / (1024.0 * 1024));
  return fmt::format("{:.2f} GiB", n / (1024.0 * 1024 * 1024));
}

template <class T>
std::string opt(const std::optional<T>& v) {
  return v ? fmt::format("{}", *v) : std::string("-");
}

template <class T>
json opt_json(const std::optional<T>& v) {
  return v ? json(*v) : json(nullptr);
}

void print_text(const gguf::File& file, const Facts& f, bool metadata) {
  fmt::print("file          {} ({}, GGUF v{}, {} metadata keys, alignment {})\n", file.name(),
             human_bytes(file.file_size()), file.version(), file.kvs().size(), file.alignment());
  fmt::print("architecture  {}\n", f.architecture.empty() ? "-" : f.architecture);
  fmt::print("name          {}\n", opt(f.name));
  fmt::print("context       {} (trained)\n", opt(f.n_ctx_train));
  fmt::print("embedding     {}\n", opt(f.n_embd));
  fmt::print("layers        {}\n", opt(f.n_layer));
  fmt::print("heads         {} (KV heads {})\n", opt(f.n_head), opt(f.n_head_kv));
  fmt::print("ffn size      {}\n", opt(f.n_ff));
  if (f.encoder) {
    static constexpr const char* kPooling[] = {"none", "mean", "cls", "last", "rank"};
    fmt::print("attention     both directions (an encoder: embeddings{}, no generation)\n",
               f.pooling && *f.pooling <= 4 ? fmt::format(", {} pooling", kPooling[*f.pooling]) : std::string());
  }
  if (!f.encoder || !f.rope_freq_base_default) {
    fmt::print("rope base     {}{}\n", f.rope_freq_base,
               f.rope_freq_base_default ? " (default: no key)" : "");
  }
  if (f.norm_eps && !f.norm_rms_eps) {
    fmt::print("norm eps      {} (LayerNorm)\n", *f.norm_eps);
  } else {
    fmt::print("rms norm eps  {}\n", opt(f.norm_rms_eps));
  }
  fmt::print("tokenizer     {}, {} tokens\n", opt(f.tokenizer_model), opt(f.n_vocab));
  fmt::print("tensors       {}, {} parameters, {}\n", file.tensors().size(), f.n_params,
             human_bytes(f.n_bytes));
  if (!f.type_counts.empty()) {
    std::string types;
    for (const auto& [type, count] : f.type_counts) {
      types += fmt::format("{}{} x {}", types.empty() ? "" : ", ", count, type);
    }
    fmt::print("types         {}\n", types);
  }
  if (f.loads()) {
    fmt::print("loads         yes: every tensor the {} graph reads is present\n", f.architecture);
  } else if (!f.error.empty()) {
    fmt::print("loads         no: {}\n", f.error);
  } else {
    fmt::print(
        "loads         no: architecture '{}' needs {} tensor{} this file lacks or holds "
        "otherwise:\n",
        f.architecture, f.problems.size(), f.problems.size() == 1 ? "" : "s");
    for (const std::string& p : f.problems) fmt::print("                {}\n", p);
  }
  if (metadata) {
    fmt::print("\nmetadata\n");
    for (const gguf::KeyValue& kv : file.kvs()) {
      fmt::print("  {:<44} {:<8} {}\n", kv.key, gguf::value_type_name(kv.value.type()),
                 kv.value.to_display_string());
    }
  }
  if (!file.tensors().empty()) {
    size_t width = 4;
    for (const gguf::TensorInfo& t : file.tensors()) width = std::max(width, t.name.size());
    fmt::print("\n{:<{}}  {:<7} {:<24} {:>12}\n", "name", width, "type", "shape", "bytes");
    for (const gguf::TensorInfo& t : file.tensors()) {
      fmt::print("{:<{}}  {:<7} {:<24} {:>12}\n", t.name, width, dtype_name(t.type),
                 shape_string(t), t.nbytes);
    }
  }
}

void print_json(const gguf::File& file, const Facts& f, bool metadata) {
  json out;
  out["file"] = file.name();
  out["version"] = file.version();
  out["architecture"] = f.architecture.empty() ? json(nullptr) : json(f.architecture);
  out["name"] = opt_json(f.name);
  out["n_tensors"] = file.tensors().size();
  out["n_params"] = f.n_params;
  out["n_bytes"] = f.n_bytes;
  out["hparams"] = {
      {"n_ctx_train", opt_json(f.n_ctx_train)}, {"n_embd", opt_json(f.n_embd)},
      {"n_layer", opt_json(f.n_layer)},         {"n_head", opt_json(f.n_head)},
      {"n_head_kv", opt_json(f.n_head_kv)},     {"n_ff", opt_json(f.n_ff)},
      {"rope_freq_base", f.rope_freq_base},     {"norm_rms_eps", opt_json(f.norm_rms_eps)},
      {"norm_eps", opt_json(f.norm_eps)},       {"encoder", f.encoder},
      {"pooling_type", opt_json(f.pooling)},
  };
  out["tokenizer"] = {{"model", opt_json(f.tokenizer_model)}, {"n_vocab", opt_json(f.n_vocab)}};
  out["type_counts"] = f.type_counts;
  out["loads"] = f.loads();
  out["load_error"] = f.error.empty() ? json(nullptr) : json(f.error);
  out["tensor_problems"] = f.problems;
  json tensors = json::array();
  for (const gguf::TensorInfo& t : file.tensors()) {
    json shape = json::array();
    for (int d = 0; d < t.n_dims; ++d) shape.push_back(t.ne[d]);
    tensors.push_back({{"name", std::string(t.name)},
                       {"type", std::string(dtype_name(t.type))},
                       {"shape", shape},
                       {"bytes", t.nbytes},
                       {"offset", t.offset}});
  }
  out["tensors"] = std::move(tensors);
  if (metadata) {
    json kvs = json::object();
    for (const gguf::KeyValue& kv : file.kvs()) {
      kvs[std::string(kv.key)] = kv.value.to_display_string();
    }
    out["metadata"] = std::move(kvs);
  }
  // Strings come from the file: replace invalid UTF-8 rather than throw.
  fmt::print("{}\n", out.dump(2, ' ', false, json::error_handler_t::replace));
}

}  // namespace

Runner add_inspect(CLI::App& app) {
  struct Options {
    std::string model;
    bool json = false;
    bool metadata = false;
  };
  auto opts = std::make_shared<Options>();
  CLI::App* cmd = app.add_subcommand(
      "inspect", "Show a GGUF file's architecture, hyperparameters, tokenizer and tensors");
  cmd->add_option("model", opts->model, "GGUF file")->required();
  cmd->add_flag("--json", opts->json, "Print one JSON object instead of text");
  cmd->add_flag("--metadata", opts->metadata, "Also list every metadata key and value");
  return [opts]() {
    const gguf::File file = gguf::File::open(opts->model);
    const Facts facts = gather(file);
    if (opts->json) {
      print_json(file, facts, opts->metadata);
    } else {
      print_text(file, facts, opts->metadata);
    }
    return 0;
  };
}

}  // namespace tessera::cli
