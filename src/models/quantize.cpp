// quantize_model: each tensor of the input is copied or converted row by
// row (dequantized to f32, quantized to the target) into a streamed writer,
// so memory holds one converted tensor at a time; the input is mapped.
#include "tessera/models/quantize.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstring>
#include <string>
#include <span>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "imatrix.h"
#include "parallel_rows.h"
#include "tessera/core/error.h"
#include "tessera/core/quants.h"
#include "tessera/gguf/gguf.h"

namespace tessera {
namespace {

// llama_ftype numbers (include/llama.h) of the mixes with per-tensor rules.
enum Ftype : uint32_t {
  kQ4_0 = 2,
  kQ5_0 = 8,
  kQ2_K = 10,
  kQ3_K_S = 11,
  kQ3_K_M = 12,
  kQ3_K_L = 13,
  kQ4_K_S = 14,
  kQ4_K_M = 15,
  kQ5_K_S = 16,
  kQ5_K_M = 17,
  kQ6_K = 18,
  kIQ4_NL = 25,
  kIQ4_XS = 30,
  kMXFP4_MOE = 38,
};

// llama-quantize's QUANT_OPTIONS that tessera writes, in its order. Mixes
// needing an importance matrix (IQ1..IQ3, Q2_K_S) are not offered.
constexpr QuantizeMix kMixes[] = {
    {"Q4_0", 2, DType::kQ4_0},     {"Q4_1", 3, DType::kQ4_1},
    {"MXFP4_MOE", kMXFP4_MOE, DType::kMXFP4},                       {"Q5_0", 8, DType::kQ5_0},
    {"Q5_1", 9, DType::kQ5_1},     {"IQ4_NL", kIQ4_NL, DType::kIQ4_NL},
    {"IQ4_XS", kIQ4_XS, DType::kIQ4_XS}, {"Q2_K", kQ2_K, DType::kQ2_K},
    {"Q3_K_S", kQ3_K_S, DType::kQ3_K}, {"Q3_K_M", kQ3_K_M, DType::kQ3_K},
    {"Q3_K_L", kQ3_K_L, DType::kQ3_K}, {"Q4_K_S", kQ4_K_S, DType::kQ4_K},
    {"Q4_K_M", kQ4_K_M, DType::kQ4_K}, {"Q5_K_S", kQ5_K_S, DType::kQ5_K},
    {"Q5_K_M", kQ5_K_M, DType::kQ5_K}, {"Q6_K", kQ6_K, DType::kQ6_K},
    {"Q8_0", 7, DType::kQ8_0},     {"F16", 1, DType::kF16},        {"BF16", 32, DType::kBF16},
    {"F32", 0, DType::kF32},
};
constexpr std::pair<std::string_view, uint32_t> kAliases[] = {
    {"Q3_K", kQ3_K_M}, {"Q4_K", kQ4_K_M}, {"Q5_K", kQ5_K_M}};

// Tensor types tessera writes (--output-tensor-type, fallbacks).
constexpr DType kWritable[] = {DType::kF32,  DType::kF16,  DType::kBF16, DType::kQ8_0,
                               DType::kQ4_0, DType::kQ4_1, DType::kQ5_0, DType::kQ5_1,
                               DType::kQ2_K, DType::kQ3_K, DType::kQ4_K, DType::kQ5_K,
                               DType::kQ6_K, DType::kIQ4_NL, DType::kIQ4_XS, DType::kMXFP4};

bool iequals(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) ==
                  std::tolower(static_cast<unsigned char>(y));
         });
}

std::optional<uint32_t> parse_number(std::string_view s) {
  uint32_t v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
  return v;
}

bool is_plain_float(DType t) { return t == DType::kF32 || t == DType::kF16 || t == DType::kBF16; }

bool contains(std::string_view s, std::string_view part) { return s.find(part) != s.npos; }

// ggml_n_dims: the dimensions up to the last one above 1 (at least one), not
// those the file declares: a [n, 1] tensor counts as 1-D.
int effective_dims(const gguf::TensorInfo& t) {
  int n = 1;
  for (int i = 1; i < static_cast<int>(t.n_dims); ++i) {
    if (t.ne[i] > 1) n = i + 1;
  }
  return n;
}

// llama-quantize's tensor_allows_quantization: 2-D and larger tensors named
// *weight, but not norms, MoE routers, position / token-type embeddings and
// the small 2-D tensors of some architectures (RWKV, Mamba, Gemma 3n, T5).
// (qwen2moe's [n_embd, 1] shared-expert gate stays as it is: 1-D by ggml_n_dims.)
bool allows_quantization(const gguf::TensorInfo& t) {
  const std::string_view n = t.name;
  if (effective_dims(t) < 2 || !n.ends_with("weight")) return false;
  constexpr std::string_view kKeep[] = {
      "_norm.weight", "ffn_gate_inp.weight", "ffn_gate_tid2eid.weight", "altup", "laurel",
      "per_layer_model_proj", "ssm_conv1d", "shortconv.conv.weight", "indexer.k_proj.weight",
      "indexer.q_proj.weight", "time_mix_first.weight", "time_mix_w0.weight",
      "time_mix_w1.weight", "time_mix_w2.weight", "time_mix_v0.weight", "time_mix_v1.weight",
      "time_mix_v2.weight", "time_mix_a0.weight", "time_mix_a1.weight", "time_mix_a2.weight",
      "time_mix_g1.weight", "time_mix_g2.weight", "time_mix_decay_w1.weight",
      "time_mix_decay_w2.weight", "time_mix_lerp_fused.weight", "attn_rel_b.weight",
      ".position_embd", "sam.pos_embd", "sam.neck.", "sam.net_", ".rel_pos", ".patch_embd",
      ".patch_merger", "a.rvq.codebook", "mm.a.code_embd"};
  for (std::string_view k : kKeep) {
    if (contains(n, k)) return false;
  }
  return n != "position_embd.weight" && n != "token_types.weight";
}

enum class Category { kTokenEmbd, kAttnV, kAttnK, kAttnQ, kAttnOutput, kFfnUp, kFfnGate, kFfnDown, kOutput, kOther };

// llama-quantize's tensor_get_category; a fused attn_qkv and MLA's attn_kv_b
// count as attn_v.
Category category_of(std::string_view n) {
  if (n == "output.weight") return Category::kOutput;
  if (n == "token_embd.weight" || n == "per_layer_token_embd.weight") return Category::kTokenEmbd;
  if (contains(n, "attn_qkv.weight") || contains(n, "attn_kv_b.weight") ||
      contains(n, "attn_v.weight")) {
    return Category::kAttnV;
  }
  if (contains(n, "attn_k.weight")) return Category::kAttnK;
  if (contains(n, "attn_q.weight")) return Category::kAttnQ;
  if (contains(n, "attn_output.weight")) return Category::kAttnOutput;
  if (contains(n, "ffn_up")) return Category::kFfnUp;
  if (contains(n, "ffn_gate")) return Category::kFfnGate;
  if (contains(n, "ffn_down")) return Category::kFfnDown;
  return Category::kOther;
}

// blk.N. prefix, or -1.
int layer_of(std::string_view n) {
  if (!n.starts_with("blk.")) return -1;
  int layer = -1;
  const auto [end, ec] = std::from_chars(n.data() + 4, n.data() + n.size(), layer);
  return ec == std::errc() && end < n.data() + n.size() && *end == '.' ? layer : -1;
}

// The model facts the rules read, from the file's metadata.
struct ModelFacts {
  std::string arch;
  int n_layer = 0;
  int n_gqa = 1;       // head_count / head_count_kv of the first layer
  int n_expert = 0;
  bool is_70b = false;  // llama.cpp's LLM_TYPE_70B: llama, 80 layers, grouped-query attention,
                        // not 8 experts
  bool tied = true;     // no output.weight: token_embd is the output head too
};

uint32_t first_u32(const gguf::Value* v) {
  if (v == nullptr) return 0;
  if (v->type() == gguf::ValueType::kArray) {
    return v->array().size() > 0 ? v->array().number<uint32_t>(0) : 0;
  }
  return v->u32();
}

ModelFacts read_facts(const gguf::File& file) {
  ModelFacts m;
  if (const gguf::Value* a = file.find("general.architecture")) m.arch = std::string(a->string());
  const auto key = [&](std::string_view suffix) { return file.find(m.arch + "." + std::string(suffix)); };
  m.n_layer = static_cast<int>(first_u32(key("block_count")));
  const uint32_t n_head = first_u32(key("attention.head_count"));
  const gguf::Value* kv = key("attention.head_count_kv");
  const uint32_t n_head_kv = kv != nullptr ? first_u32(kv) : n_head;
  m.n_gqa = n_head_kv > 0 ? static_cast<int>(n_head / n_head_kv) : 0;
  m.n_expert = static_cast<int>(first_u32(key("expert_count")));
  m.is_70b = m.arch == "llama" && m.n_layer == 80 && n_head != n_head_kv && m.n_expert != 8;
  m.tied = file.find_tensor("output.weight") == nullptr;
  return m;
}

// The first n/8 layers, the last n/8 and every third in between.
bool use_more_bits(int i, int n) { return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2; }

// llama_tensor_get_type_impl for the mixes tessera offers: the type tensor t
// gets in a `mix` file. Counts attn_v and ffn_down tensors as it goes, so
// tensors must come in llama.cpp's order (by layer, then name).
class MixRules {
 public:
  MixRules(const ModelFacts& m, const QuantizeOptions& o, int n_attn_v, bool has_imatrix)
      : m_(m), o_(o), ftype_(o.mix.ftype), n_attn_v_(n_attn_v), has_imatrix_(has_imatrix) {}

  DType type_of(const gguf::TensorInfo& t, Category cat, std::string* note) {
    DType type = o_.mix.type;
    const bool falcon = m_.arch == "falcon";
    auto set = [&](DType to, std::string_view why) {
      if (to != type) *note = std::string(why);
      type = to;
    };
    if (cat == Category::kOutput || (m_.tied && cat == Category::kTokenEmbd)) {
      if (o_.output_type) {
        set(*o_.output_type, "--output-tensor-type");
      } else if (ftype_ == kMXFP4_MOE) {
        set(DType::kQ8_0, "output head, MXFP4_MOE");
      } else if (falcon || t.ne[0] % dtype_info(type).block_size != 0) {
        set(DType::kQ8_0, "output head");
      } else if (type != DType::kQ8_0) {
        set(DType::kQ6_K, "output head");
      }
    } else if (ftype_ == kMXFP4_MOE) {
      // Experts (3-D) in MXFP4, everything else in Q8_0; bailingmoe3's only for
      // its FFN experts. No counters advance.
      const bool ffn = cat == Category::kFfnUp || cat == Category::kFfnGate || cat == Category::kFfnDown;
      const bool experts = t.ne[2] > 1 && (m_.arch != "bailingmoe3" || ffn);
      set(experts ? DType::kMXFP4 : DType::kQ8_0, experts ? "experts, MXFP4_MOE" : "MXFP4_MOE");
    } else if (cat == Category::kTokenEmbd) {
      // token_embd keeps the mix's type unless --token-embedding-type (handled by the caller).
    } else if (cat == Category::kAttnV) {
      const int i = i_attn_v_++;
      if (ftype_ == kQ2_K) {
        set(m_.n_gqa >= 4 ? DType::kQ4_K : DType::kQ3_K, "attn_v");
      } else if (ftype_ == kQ3_K_M) {
        set(i < 2 ? DType::kQ5_K : DType::kQ4_K, "attn_v, first two layers");
      } else if (ftype_ == kQ3_K_L) {
        set(DType::kQ5_K, "attn_v");
      } else if ((ftype_ == kIQ4_NL || ftype_ == kIQ4_XS) && m_.n_gqa >= 4) {
        set(DType::kQ5_K, "attn_v, n_head / n_head_kv >= 4");
      } else if ((ftype_ == kQ4_K_M || ftype_ == kQ5_K_M) && use_more_bits(i, n_attn_v_)) {
        set(DType::kQ6_K, "attn_v, use_more_bits layer");
      } else if (ftype_ == kQ4_K_S && i < 4) {
        set(DType::kQ5_K, "attn_v, first four layers");
      }
      if (m_.is_70b && (type == DType::kQ3_K || type == DType::kQ4_K)) set(DType::kQ5_K, "attn_v, 70B");
      if (m_.n_expert == 8) set(DType::kQ8_0, "attn_v, 8 experts");
    } else if (cat == Category::kAttnK) {
      if (m_.n_expert == 8) set(DType::kQ8_0, "attn_k, 8 experts");
    } else if (cat == Category::kFfnDown) {
      int i = i_ffn_down_++;
      const int n = m_.n_layer;
      if (m_.n_expert > 1) {  // experts' tensors need not come in layer order
        i = layer_of(t.name);
        if (i < 0 || i >= n) {
          fail(ErrorCategory::kInvalidFile, "[quantize] tensor '{}': found layer {}, expected "
               "0..{} for a model of {} experts", t.name, i, n - 1, m_.n_expert);
        }
      }
      const bool more = use_more_bits(i, n);
      if (ftype_ == kQ2_K) {
        set(DType::kQ3_K, "ffn_down");
      } else if (ftype_ == kQ3_K_M) {
        set(i < n / 16 ? DType::kQ5_K : !falcon || more ? DType::kQ4_K : DType::kQ3_K,
            "ffn_down, first n/16 layers");
      } else if (ftype_ == kQ3_K_L) {
        set(falcon ? DType::kQ4_K : DType::kQ5_K, "ffn_down");
      } else if (ftype_ == kQ4_K_M) {
        if (falcon) {
          set(i < n / 16 ? DType::kQ6_K : more ? DType::kQ5_K : DType::kQ4_K, "ffn_down");
        } else if (more) {
          set(DType::kQ6_K, "ffn_down, use_more_bits layer");
        }
      } else if (i < n / 8 && (ftype_ == kIQ4_NL || ftype_ == kIQ4_XS) && !has_imatrix_) {
        set(DType::kQ5_K, "ffn_down, first n/8 layers");
      } else if (ftype_ == kQ5_K_M && more) {
        set(DType::kQ6_K, "ffn_down, use_more_bits layer");
      } else if (ftype_ == kQ4_K_S && !falcon && i < n / 8) {
        set(DType::kQ5_K, "ffn_down, first n/8 layers");
      } else if ((ftype_ == kQ4_0 || ftype_ == kQ5_0) && has_imatrix_ && i < n / 8) {
        // With an imatrix, llama-quantize guards the first ffn_down layers of Q4_0 / Q5_0.
        set(ftype_ == kQ4_0 ? DType::kQ4_1 : DType::kQ5_1, "ffn_down, first n/8 layers, imatrix");
      }
    } else if (cat == Category::kAttnOutput) {
      if (falcon) {
        if (ftype_ == kQ3_K_L) set(DType::kQ4_K, "attn_output");
      } else if (m_.n_expert == 8) {
        if (ftype_ == kQ2_K || ftype_ == kQ3_K_S || ftype_ == kQ3_K_M || ftype_ == kIQ4_NL ||
            ftype_ == kQ4_K_S || ftype_ == kQ4_K_M || ftype_ == kIQ4_XS) {
          set(DType::kQ5_K, "attn_output, 8 experts");
        }
      } else if (ftype_ == kQ2_K) {
        set(DType::kQ3_K, "attn_output");
      } else if (ftype_ == kQ3_K_M) {
        set(DType::kQ4_K, "attn_output");
      } else if (ftype_ == kQ3_K_L) {
        set(DType::kQ5_K, "attn_output");
      }
    }
    return type;
  }

 private:
  const ModelFacts& m_;
  const QuantizeOptions& o_;
  uint32_t ftype_;
  int n_attn_v_;
  bool has_imatrix_;
  int i_attn_v_ = 0;
  int i_ffn_down_ = 0;
};

// llama-quantize's tensor_type_fallback for rows no multiple of `type`'s block:
// the nearest type with blocks of 32, else F16.
DType fallback_type(DType type, int64_t ne0, std::string* note) {
  if (ne0 % dtype_info(type).block_size == 0) return type;
  DType to = DType::kF16;
  switch (type) {
    case DType::kIQ4_XS: to = DType::kIQ4_NL; break;
    case DType::kQ2_K:
    case DType::kQ3_K: to = DType::kQ4_0; break;
    case DType::kQ4_K: to = DType::kQ5_0; break;
    case DType::kQ5_K: to = DType::kQ5_1; break;
    case DType::kQ6_K: to = DType::kQ8_0; break;
    default: break;  // llama-quantize stops here ("no fallback"); tessera writes F16
  }
  if (ne0 % dtype_info(to).block_size != 0) to = DType::kF16;
  *note = fmt::format("rows of {} are no multiple of {}'s block of {}", ne0, dtype_name(type),
                      dtype_info(type).block_size);
  return to;
}

struct Plan {
  DType to;
  std::string note;
};

// The order llama-quantize visits and writes tensors in: by layer (non-layer
// ones first), then name.
std::vector<size_t> visit_order(std::span<const gguf::TensorInfo> tensors) {
  std::vector<size_t> order(tensors.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    const int la = layer_of(tensors[a].name), lb = layer_of(tensors[b].name);
    return la != lb ? la < lb : tensors[a].name < tensors[b].name;
  });
  return order;
}

// Each tensor's type (indexed as the file's tensors), following llama_tensor_get_type.
std::vector<Plan> plan_tensors(const gguf::File& file, const QuantizeOptions& o, bool has_imatrix) {
  const std::span<const gguf::TensorInfo> tensors = file.tensors();
  const ModelFacts facts = read_facts(file);
  const std::vector<size_t> order = visit_order(tensors);
  int n_attn_v = 0;
  for (const gguf::TensorInfo& t : tensors) n_attn_v += category_of(t.name) == Category::kAttnV;
  MixRules rules(facts, o, n_attn_v, has_imatrix);
  const bool quantized = dtype_info(o.mix.type).quantized;

  std::vector<Plan> plans(tensors.size());
  for (size_t i : order) {
    const gguf::TensorInfo& t = tensors[i];
    Plan& p = plans[i];
    p.to = t.type;
    if (!allows_quantization(t)) continue;
    const Category cat = category_of(t.name);
    if (o.token_embedding_type && cat == Category::kTokenEmbd) {
      p = {*o.token_embedding_type, "--token-embedding-type"};
      continue;
    }
    if (o.output_type && cat == Category::kOutput) {
      p = {*o.output_type, "--output-tensor-type"};
      continue;
    }
    p.to = o.mix.type;
    if (!quantized) continue;
    if (!o.pure) p.to = rules.type_of(t, cat, &p.note);
    p.to = fallback_type(p.to, t.ne[0], &p.note);
  }
  return plans;
}

}  // namespace

std::optional<QuantizeMix> quantize_mix_from_name(std::string_view name) {
  const std::optional<uint32_t> number = parse_number(name);
  for (const auto& [alias, ftype] : kAliases) {
    if (!number && iequals(alias, name)) return quantize_mix_from_name(std::to_string(ftype));
  }
  for (const QuantizeMix& m : kMixes) {
    if (number ? m.ftype == *number : iequals(m.name, name)) return m;
  }
  return std::nullopt;
}

std::optional<QuantizeMix> quantize_mix_of(DType type) {
  for (const QuantizeMix& m : kMixes) {
    const bool plain = m.ftype < kQ2_K || m.ftype == kQ6_K || m.ftype == 32;
    if (plain && m.type == type) return m;
  }
  return std::nullopt;
}

std::string quantize_mix_names() {
  std::string s;
  for (const QuantizeMix& m : kMixes) s += (s.empty() ? "" : ", ") + fmt::format("{} ({})", m.name, m.ftype);
  return s;
}

std::optional<DType> quantize_type_from_name(std::string_view name) {
  const std::optional<uint32_t> number = parse_number(name);
  for (DType t : kWritable) {
    if (number) {
      const std::optional<QuantizeMix> m = quantize_mix_of(t);
      if (m && m->ftype == *number) return t;
    } else if (iequals(dtype_name(t), name)) {
      return t;
    }
  }
  return std::nullopt;
}

std::string quantize_type_names() {
  std::string s;
  for (DType t : kWritable) {
    std::string n(dtype_name(t));
    for (char& c : n) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    s += (s.empty() ? "" : ", ") + n;
  }
  return s;
}

QuantizeSummary quantize_model(const std::filesystem::path& in, const std::filesystem::path& out,
                               const QuantizeOptions& o, const QuantizeProgress& progress) {
  std::error_code ec;
  if (std::filesystem::equivalent(in, out, ec)) {
    fail(ErrorCategory::kInvalidArgument, "[quantize] output {}: found the input file, expected "
         "another path", out.string());
  }
  const std::optional<QuantizeMix> known = quantize_mix_from_name(std::to_string(o.mix.ftype));
  if (!known || known->type != o.mix.type) {
    fail(ErrorCategory::kInvalidArgument, "[quantize] type {} ({}): expected one of {}",
         o.mix.name, o.mix.ftype, quantize_mix_names());
  }
  for (const std::optional<DType>& t : {o.output_type, o.token_embedding_type}) {
    if (t && !dtype_info(*t).has_quantize) {
      fail(ErrorCategory::kInvalidArgument, "[quantize] tensor type {}: expected one of {}",
           dtype_name(*t), quantize_type_names());
    }
  }
  const gguf::File file = gguf::File::open(in);
  // Outlives the tensor fills below, which run inside w.write.
  const ImportanceMatrix imatrix_data =
      o.imatrix.empty() ? ImportanceMatrix{} : load_importance_matrix(o.imatrix);
  const ImportanceMatrix* imatrix = &imatrix_data;
  std::vector<Plan> plans = plan_tensors(file, o, !imatrix->values.empty());

  // The keys as llama-quantize writes them: the input's in order but for the
  // split.* ones, then the quantization version and file type last.
  gguf::Writer w;
  for (const gguf::KeyValue& kv : file.kvs()) {
    if (kv.key == "general.file_type" || kv.key == "general.quantization_version" ||
        kv.key.starts_with("split.")) {
      continue;
    }
    w.set_value(kv.key, kv.value);
  }
  w.set_u32("general.quantization_version", 2);
  w.set_u32("general.file_type", o.mix.ftype);
  if (!imatrix->values.empty()) {  // the keys llama-quantize records
    w.set_string("quantize.imatrix.file", o.imatrix.string());
    if (!imatrix->datasets.empty()) w.set_string("quantize.imatrix.dataset", imatrix->datasets[0]);
    w.set_u32("quantize.imatrix.entries_count", static_cast<uint32_t>(imatrix->values.size()));
    if (imatrix->chunk_count > 0) w.set_u32("quantize.imatrix.chunks_count", imatrix->chunk_count);
  }

  QuantizeSummary summary;
  std::vector<QuantizeTensor> report;
  report.reserve(file.tensors().size());
  const int threads = default_tool_threads(o.threads);
  // Tensors in llama-quantize's order, shaped by ggml_n_dims (trailing 1s dropped).
  for (size_t ti : visit_order(file.tensors())) {
    const gguf::TensorInfo& t = file.tensors()[ti];
    Plan& p = plans[ti];
    const DTypeInfo& from = dtype_info(t.type);
    if (p.to != t.type) {
      if (!from.has_dequantize) {
        fail(ErrorCategory::kUnsupported, "[quantize {}] tensor '{}': found type {}, expected a "
             "type tessera can read", file.name(), t.name, from.name);
      }
      if (!is_plain_float(t.type) && !o.allow_requantize) {
        fail(ErrorCategory::kInvalidArgument, "[quantize {}] tensor '{}': found {}, expected "
             "f32, f16 or bf16 weights; requantizing adds a second rounding error, pass "
             "--allow-requantize to do it anyway", file.name(), t.name, from.name);
      }
    }
    const std::vector<int64_t> shape(t.ne.begin(), t.ne.begin() + effective_dims(t));
    const uint64_t bytes_out = *row_bytes(p.to, t.ne[0]) * static_cast<uint64_t>(t.n_elements() / t.ne[0]);
    // The tensor's importance, one row of ne0 per expert (ne[2]); as
    // llama-quantize, a tensor without an entry is quantized without one, and
    // token_embd (whose imatrix rows never match) too.
    const std::vector<float>* importance = p.to != t.type ? imatrix->find(t.name) : nullptr;
    if (importance != nullptr && importance->size() != static_cast<size_t>(t.ne[0] * t.ne[2])) {
      if (t.name != "token_embd.weight") {
        fail(ErrorCategory::kInvalidFile, "[quantize {}] tensor '{}': found {} importance values in "
             "{}, expected {} (ne0 x experts)", file.name(), t.name, importance->size(),
             o.imatrix.string(), t.ne[0] * t.ne[2]);
      }
      importance = nullptr;
    }
    report.push_back({t.name, t.type, p.to, t.nbytes, bytes_out, std::move(p.note), importance != nullptr});
    summary.bytes_in += t.nbytes;
    summary.bytes_out += bytes_out;
    ++summary.tensors;
    const std::span<const uint8_t> src = file.tensor_data(t);
    if (p.to == t.type) {
      w.add_tensor(t.name, t.type, shape, [src](std::span<uint8_t> dst) {
        std::memcpy(dst.data(), src.data(), dst.size());
      });
      continue;
    }
    ++summary.converted;
    const DType from_type = t.type, to = p.to;
    const int64_t n = t.ne[0];
    const int64_t rows_per_expert = t.ne[1];
    w.add_tensor(t.name, to, shape, [=](std::span<uint8_t> dst) {
      const size_t in_row = *row_bytes(from_type, n), out_row = *row_bytes(to, n);
      const auto rows = static_cast<int64_t>(dst.size() / out_row);
      parallel_rows(rows, threads, [&](int64_t begin, int64_t end) {
        std::vector<float> v(static_cast<size_t>(n));
        for (int64_t r = begin; r < end; ++r) {
          dequantize_row(from_type, src.data() + static_cast<size_t>(r) * in_row, v.data(), n);
          const float* qw = importance != nullptr
                                ? importance->data() + (r / rows_per_expert) * n
                                : nullptr;
          quantize_row_weighted(to, v.data(), dst.data() + static_cast<size_t>(r) * out_row, n, qw);
        }
      });
    });
  }
  w.write(out, [&](size_t i, size_t count, std::string_view) {
    if (progress) progress(i, count, report[i]);
  });
  return summary;
}

}  // namespace tessera
