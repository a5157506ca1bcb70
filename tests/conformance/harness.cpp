#include "conformance/harness.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <map>
#include <memory>

#include "backends/cpu/cpu_backend.h"
#include "tessera/backends/builtin.h"
#include "tessera/core/error.h"
#include "tessera/core/half.h"
#include "tessera/core/quants.h"
#include "tessera/runtime/buffer.h"
#include "tessera/runtime/runtime.h"
#include "tessera/runtime/stream.h"

namespace tessera::conformance {
namespace {

// Three threads: row splits come out uneven on every op.
constexpr int kCpuThreads = 3;
constexpr size_t kGap = 256;          // sentinel bytes before, between and after tensors
constexpr uint8_t kUnwritten = 0xff;  // NaN in f32/f16/bf16, -1 in i32

Runtime& runtime() {
  static const std::unique_ptr<Runtime> rt = [] {
    auto r = make_runtime(/*load_modules=*/false);
    {
      auto& cpu = dynamic_cast<cpu::CpuDevice&>(r->device("CPU0"));
      cpu.set_threads(kCpuThreads);
      cpu.set_min_work_per_thread(0);  // exercise the row splits on small shapes
    }
    return r;
  }();
  return *rt;
}

cpu::CpuDevice& cpu0() {
  return dynamic_cast<cpu::CpuDevice&>(runtime().device("CPU0"));
}

uint32_t next_seed() {
  if (const char* s = std::getenv("TESSERA_TEST_SEED")) return static_cast<uint32_t>(std::stoul(s));
  return std::random_device{}();
}

// Cases run and skipped per target, printed once at the end.
struct Tally {
  std::map<std::string, std::pair<int, int>> counts;
  ~Tally() {
    for (const auto& [name, c] : counts) {
      std::cout << fmt::format("[conformance] {}: {} cases run, {} skipped\n", name, c.first,
                               c.second);
    }
  }
};
Tally& tally() {
  static Tally t;
  return t;
}

size_t align_up(size_t n, size_t a) {
  return (n + a - 1) / a * a;
}

double decode(DType type, const uint8_t* p) {
  switch (type) {
    case DType::kF32: {
      float v;
      std::memcpy(&v, p, sizeof v);
      return v;
    }
    case DType::kF16:
    case DType::kBF16: {
      uint16_t h;
      std::memcpy(&h, p, sizeof h);
      return type == DType::kF16 ? fp16_to_fp32(h) : bf16_to_fp32(h);
    }
    case DType::kI32: {
      int32_t v;
      std::memcpy(&v, p, sizeof v);
      return v;
    }
    case DType::kI64: {
      int64_t v;
      std::memcpy(&v, p, sizeof v);
      return static_cast<double>(v);
    }
    default:
      TESSERA_CHECK(false, "decode {}", dtype_name(type));
  }
  return 0.0;
}

// Values (row-major over `t`'s shape) of a tensor whose element 0 is at `base`.
std::vector<double> decode_tensor(const Tensor& t, const uint8_t* base) {
  std::vector<double> out;
  out.reserve(static_cast<size_t>(t.n_elements()));
  const DTypeInfo& info = dtype_info(t.type);
  std::vector<float> row(static_cast<size_t>(t.ne[0]));
  for_each_index({1, t.ne[1], t.ne[2], t.ne[3]}, [&](int64_t, int64_t i1, int64_t i2, int64_t i3) {
    const uint8_t* r = base + i1 * t.nb[1] + i2 * t.nb[2] + i3 * t.nb[3];
    if (info.quantized) {
      dequantize_row(t.type, r, row.data(), t.ne[0]);
      out.insert(out.end(), row.begin(), row.end());
    } else {
      for (int64_t i0 = 0; i0 < t.ne[0]; ++i0) out.push_back(decode(t.type, r + i0 * t.nb[0]));
    }
  });
  return out;
}

// Random blocks of a type tessera can read but not write (Q2_K, Q3_K, Q5_K):
// random quants with small positive f16 scales.
std::vector<uint8_t> random_blocks(DType type, size_t bytes, std::mt19937& rng) {
  std::vector<uint8_t> out(bytes);
  for (uint8_t& b : out) b = static_cast<uint8_t>(rng());
  std::vector<size_t> scales;  // offsets of the f16 scale fields in a block
  switch (type) {
    case DType::kQ2_K:
      scales = {offsetof(block_q2_K, d), offsetof(block_q2_K, dmin)};
      break;
    case DType::kQ3_K:
      scales = {offsetof(block_q3_K, d)};
      break;
    case DType::kQ5_K:
      scales = {offsetof(block_q5_K, d), offsetof(block_q5_K, dmin)};
      break;
    default:
      TESSERA_CHECK(false, "no random blocks for {}", dtype_name(type));
  }
  std::uniform_real_distribution<float> dist(0.002f, 0.02f);
  const size_t block = dtype_info(type).block_bytes;
  for (size_t at = 0; at + block <= bytes; at += block) {
    for (size_t off : scales) {
      const uint16_t h = fp32_to_fp16(dist(rng));
      std::memcpy(out.data() + at + off, &h, sizeof h);
    }
  }
  return out;
}

// Bytes of a contiguous tensor holding `v` (quantized row by row).
std::vector<uint8_t> encode(const Tensor& t, const std::vector<float>& v, std::mt19937& rng) {
  std::vector<uint8_t> bytes(t.n_bytes());
  if (t.type == DType::kI32) {
    for (size_t i = 0; i < v.size(); ++i) {
      const auto x = static_cast<int32_t>(std::lrint(v[i]));
      std::memcpy(bytes.data() + 4 * i, &x, 4);
    }
    return bytes;
  }
  if (t.type == DType::kI64) {
    for (size_t i = 0; i < v.size(); ++i) {
      const auto x = static_cast<int64_t>(std::llrint(v[i]));
      std::memcpy(bytes.data() + 8 * i, &x, 8);
    }
    return bytes;
  }
  if (!dtype_info(t.type).has_quantize) return random_blocks(t.type, bytes.size(), rng);
  const size_t row = t.row_size();
  for (int64_t r = 0; r < t.n_rows(); ++r) {
    quantize_row(t.type, v.data() + r * t.ne[0], bytes.data() + static_cast<size_t>(r) * row,
                 t.ne[0]);
  }
  return bytes;
}

// Rounds reference values the way storing them in the node's type does.
void round_to_type(const Tensor& node, std::vector<double>& v) {
  if (node.type == DType::kI32) return;
  std::vector<float> f(v.begin(), v.end());
  const DTypeInfo& info = dtype_info(node.type);
  const size_t row = info.block_bytes * static_cast<size_t>(node.ne[0] / info.block_size);
  std::vector<uint8_t> bytes(row);
  for (int64_t r = 0; r < node.n_rows(); ++r) {
    float* x = f.data() + r * node.ne[0];
    quantize_row(node.type, x, bytes.data(), node.ne[0]);
    dequantize_row(node.type, bytes.data(), x, node.ne[0]);
  }
  v.assign(f.begin(), f.end());
}

struct Leaf {
  Tensor* t;
  bool weight;  // placed in the device's weights buffer type
  std::vector<uint8_t> bytes;
  std::vector<float> values;  // dequantized bytes, for quantized leaves
};

class LeafValues final : public HostValues {
 public:
  explicit LeafValues(const std::vector<Leaf>& leaves) {
    for (const Leaf& l : leaves) by_root_.emplace(l.t, &l);
  }
  double at(const Tensor& t, int64_t i0, int64_t i1, int64_t i2, int64_t i3) const override {
    const Tensor* root = t.view_src != nullptr ? t.view_src : &t;
    const auto it = by_root_.find(root);
    TESSERA_CHECK(it != by_root_.end(), "{} is not an input or a view of one", t.describe());
    TESSERA_CHECK(i0 < t.ne[0] && i1 < t.ne[1] && i2 < t.ne[2] && i3 < t.ne[3]);
    const Leaf& leaf = *it->second;
    const DTypeInfo& info = dtype_info(t.type);
    const size_t off = (t.view_src != nullptr ? t.view_offset : 0) +
                       static_cast<size_t>(i0 / info.block_size) * t.nb[0] + i1 * t.nb[1] +
                       i2 * t.nb[2] + i3 * t.nb[3];
    if (info.quantized) {
      return leaf.values[off / info.block_bytes * static_cast<size_t>(info.block_size) +
                         static_cast<size_t>(i0 % info.block_size)];
    }
    return decode(t.type, leaf.bytes.data() + off);
  }

 private:
  std::map<const Tensor*, const Leaf*> by_root_;
};

// One case on one device: its graph, inputs, buffers with sentinels, result.
class CaseRun {
 public:
  CaseRun(const Case& c, uint32_t seed) {
    CaseGraph cg(g_);
    out_ = c.build(cg);
    g_.expand(out_);
    int compute_nodes = 0;
    for (Tensor* n : g_.nodes()) compute_nodes += is_view_op(n->op) ? 0 : 1;
    TESSERA_CHECK(compute_nodes == 1 && !is_view_op(out_->op), "case {} must have one compute node",
                  c.name);
    std::mt19937 rng(seed);
    for (const auto& [t, gen] : cg.inputs()) {
      Leaf leaf{t, cg.is_weight(t), {}, std::vector<float>(static_cast<size_t>(t->n_elements()))};
      gen(rng, leaf.values);
      leaf.bytes = encode(*t, leaf.values, rng);
      if (dtype_info(t->type).quantized) {
        dequantize_row(t->type, leaf.bytes.data(), leaf.values.data(), t->n_elements());
      }
      leaves_.push_back(std::move(leaf));
    }
    pattern_seed_ = seed ^ 0x9e3779b9u;
  }

  const Tensor& node() const { return *out_; }
  std::unique_ptr<HostValues> host() const { return std::make_unique<LeafValues>(leaves_); }

  // The first node `d` refuses, described; empty when it supports them all.
  std::string unsupported(const Device& d) const {
    for (Tensor* n : g_.nodes()) {
      if (!d.supports_op(*n)) {
        std::string srcs;
        for (const Tensor* s : n->src) {
          if (s != nullptr)
            srcs += fmt::format(" {}{}", s->describe(), s->is_contiguous() ? "" : " (strided)");
        }
        return fmt::format("{} {} from{}", op_name(n->op), n->describe(), srcs);
      }
    }
    return {};
  }

  // Places every tensor in `d`'s buffers (weights in its weights buffer
  // type), so that supports_op sees where they live (a device may read a
  // repacked weight but not the same type in plain memory).
  void prepare(Device& d) {
    if (arenas_.empty()) place(d);
  }

  // Places (unless prepared), uploads, computes on `d` (at tier `isa` for
  // CPU0) and reads back. Returns the problems found besides the values:
  // sentinels, changed inputs.
  std::vector<std::string> run(Device& d, std::optional<cpu::Isa> isa) {
    prepare(d);
    for (const Leaf& l : leaves_) l.t->buffer->set_tensor(*l.t, l.bytes.data());
    for (Tensor* n : g_.nodes()) {
      if (n->view_src == nullptr) {
        const std::vector<uint8_t> nan(n->n_bytes(), kUnwritten);
        n->buffer->set_tensor(*n, nan.data());
      }
    }
    if (isa) dynamic_cast<cpu::CpuDevice&>(d).set_isa(*isa);
    auto stream = d.make_stream();
    stream->compute(g_);
    stream->synchronize();
    std::vector<uint8_t> raw(out_->n_bytes());
    out_->buffer->get_tensor(*out_, raw.data());
    output_ = decode_tensor(*out_, raw.data());
    return check_memory();
  }
  const std::vector<double>& output() const { return output_; }

 private:
  struct Slot {
    Tensor* t;
    size_t offset, size;
  };
  struct Arena {
    BufferType* type;
    std::unique_ptr<Buffer> buffer;
    Tensor* bytes = nullptr;  // an i8 tensor over the whole buffer, to read the gaps
    std::vector<Slot> slots;
    std::vector<uint8_t> pattern;
  };

  void place(Device& d) {
    std::map<BufferType*, std::vector<Tensor*>> groups;
    for (const Leaf& l : leaves_) {
      BufferType& bt = l.weight ? d.weights_buffer_type() : d.buffer_type();
      groups[&bt].push_back(l.t);
    }
    for (Tensor* n : g_.nodes()) {
      if (n->view_src == nullptr) groups[&d.buffer_type()].push_back(n);
    }
    std::mt19937 rng(pattern_seed_);
    for (auto& [bt, tensors] : groups) {
      Arena a{bt, nullptr};
      const size_t align = bt->alignment();
      size_t at = align_up(kGap, align);
      for (Tensor* t : tensors) {
        a.slots.push_back({t, at, bt->alloc_size(*t)});
        at = align_up(at + a.slots.back().size + kGap, align);
      }
      a.buffer = bt->allocate(at);
      a.bytes = side_.new_tensor(DType::kI8, {static_cast<int64_t>(at)}, "arena");
      a.buffer->place(*a.bytes, 0);
      a.pattern.resize(at);
      for (uint8_t& b : a.pattern) b = static_cast<uint8_t>(rng());
      a.buffer->set_tensor(*a.bytes, a.pattern.data());
      for (const Slot& s : a.slots) a.buffer->place(*s.t, s.offset);
      arenas_.push_back(std::move(a));
    }
    for (Tensor* n : g_.nodes()) {
      if (n->view_src != nullptr) n->view_src->buffer->place(*n, 0);
    }
  }

  std::vector<std::string> check_memory() const {
    std::vector<std::string> problems;
    for (const Arena& a : arenas_) {
      std::vector<uint8_t> now(a.pattern.size());
      a.buffer->get_tensor(*a.bytes, now.data());
      size_t from = 0;
      auto check_gap = [&](size_t end, const std::string& after) {
        for (size_t i = from; i < end; ++i) {
          if (now[i] != a.pattern[i]) {
            problems.push_back(fmt::format("sentinel byte {} of buffer {} changed (after {})", i,
                                           a.type->name(), after));
            return;
          }
        }
      };
      std::string after = "buffer start";
      for (const Slot& s : a.slots) {
        check_gap(s.offset, after);
        from = s.offset + s.size;
        after = s.t->describe();
      }
      check_gap(now.size(), after);
    }
    // Inputs stay as uploaded, except a copy's destination.
    for (const Leaf& l : leaves_) {
      bool written = false;
      for (Tensor* n : g_.nodes()) written = written || (!is_view_op(n->op) && n->view_src == l.t);
      if (written) continue;
      std::vector<uint8_t> now(l.bytes.size());
      l.t->buffer->get_tensor(*l.t, now.data());
      if (now != l.bytes) problems.push_back(fmt::format("input {} was changed", l.t->describe()));
    }
    return problems;
  }

  Graph g_;
  Graph side_;
  Tensor* out_ = nullptr;
  std::vector<Leaf> leaves_;
  uint32_t pattern_seed_ = 0;
  std::vector<Arena> arenas_;
  std::vector<double> output_;
};

// One unit in the last place of `x` stored as f16 or bf16 (0 for other types).
double ulp_16(DType type, double x) {
  if (type != DType::kF16 && type != DType::kBF16) return 0.0;
  const int mantissa = type == DType::kF16 ? 10 : 7;
  const int min_exp = type == DType::kF16 ? -14 : -126;
  const int e = std::max(min_exp, std::ilogb(std::max(std::fabs(x), 1e-30)));
  return std::ldexp(1.0, e - mantissa);
}

// Empty when `actual` matches `expected` within max_nmse. With `slack_type`
// f16 or bf16, differences of one ulp count as none: two results computed in
// f32 or double may round to neighbouring 16-bit values.
std::string compare(const std::vector<double>& expected, const std::vector<double>& actual,
                    double max_nmse, DType slack_type = DType::kF32) {
  if (expected.size() != actual.size()) {
    return fmt::format("{} values, reference has {}", actual.size(), expected.size());
  }
  double err = 0.0, norm = 0.0;
  for (size_t i = 0; i < actual.size(); ++i) {
    const double e = expected[i], a = actual[i];
    if (std::isnan(a)) return fmt::format("NaN at element {} (reference {})", i, e);
    if (std::isnan(e)) return fmt::format("reference NaN at element {} (got {})", i, a);
    if (std::isinf(e) || std::isinf(a)) {
      if (e != a) return fmt::format("element {}: {}, reference {}", i, a, e);
      continue;
    }
    if (std::fabs(a - e) > ulp_16(slack_type, e)) err += (a - e) * (a - e);
    norm += e * e;
  }
  const double nmse = norm > 0.0 ? err / norm : err;
  if (nmse > max_nmse) {
    size_t worst = 0;
    for (size_t i = 1; i < actual.size(); ++i) {
      if (std::fabs(actual[i] - expected[i]) > std::fabs(actual[worst] - expected[worst]))
        worst = i;
    }
    return fmt::format("NMSE {:.3g} > {:.3g}; worst element {}: {} vs reference {}", nmse, max_nmse,
                       worst, actual[worst], expected[worst]);
  }
  return {};
}

}  // namespace

std::string Target::name() const {
  return isa ? fmt::format("{}_{}", device, cpu::isa_name(*isa)) : device;
}

std::vector<Target> all_targets() {
  std::vector<Target> out;
  for (Device* d : runtime().devices()) {
    if (dynamic_cast<cpu::CpuDevice*>(d) != nullptr) {
      for (cpu::Isa isa : cpu::supported_isas()) out.push_back({std::string(d->name()), isa});
    } else {
      out.push_back({std::string(d->name()), std::nullopt});
    }
  }
  return out;
}

Gen uniform(float lo, float hi) {
  return [lo, hi](std::mt19937& rng, std::span<float> v) {
    std::uniform_real_distribution<float> dist(lo, hi);
    for (float& x : v) x = dist(rng);
  };
}

Gen away_from_zero(float lo, float hi) {
  return [lo, hi](std::mt19937& rng, std::span<float> v) {
    std::uniform_real_distribution<float> dist(lo, hi);
    for (float& x : v) x = (rng() & 1u) ? dist(rng) : -dist(rng);
  };
}

Gen integers(int lo, int hi) {
  return [lo, hi](std::mt19937& rng, std::span<float> v) {
    std::uniform_int_distribution<int> dist(lo, hi);
    for (float& x : v) x = static_cast<float>(dist(rng));
  };
}

Gen mask_values(int64_t n) {
  return [n](std::mt19937& rng, std::span<float> v) {
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    for (size_t i = 0; i < v.size(); ++i) {
      const bool masked = i % static_cast<size_t>(n) != 0 && rng() % 5 == 0;
      v[i] = masked ? -INFINITY : dist(rng);
    }
  };
}

Tensor* CaseGraph::input(DType type, std::initializer_list<int64_t> ne, Gen gen) {
  Tensor* t = g_.new_tensor(type, ne, fmt::format("in{}", inputs_.size()));
  inputs_.emplace_back(t, std::move(gen));
  return t;
}

Tensor* CaseGraph::weight(DType type, std::initializer_list<int64_t> ne, Gen gen) {
  Tensor* t = input(type, ne, std::move(gen));
  weights_.push_back(t);
  return t;
}

std::string shape_name(DType type, const std::array<int64_t, kMaxDims>& ne) {
  return fmt::format("{}_{}x{}x{}x{}", dtype_name(type), ne[0], ne[1], ne[2], ne[3]);
}

Tensor* permuted_input(CaseGraph& c, DType type, std::array<int64_t, kMaxDims> ne,
                       std::array<int, kMaxDims> axes, Gen gen) {
  Tensor* t = c.input(type, {ne[0], ne[1], ne[2], ne[3]}, std::move(gen));
  return ops::permute(c.g(), t, axes[0], axes[1], axes[2], axes[3]);
}

Tensor* strided_input(CaseGraph& c, DType type, std::array<int64_t, kMaxDims> ne, int64_t pad,
                      Gen gen) {
  Tensor* t = c.input(type, {ne[0] + pad, ne[1], ne[2], ne[3]}, std::move(gen));
  return ops::view(c.g(), t, {ne[0], ne[1], ne[2], ne[3]}, {t->nb[1], t->nb[2], t->nb[3]}, 0);
}

// The CUDA backend's op set (backends/cuda/ops/ops.cpp): float types in any
// strides; Q4_0 / Q8_0 (split weights or GGUF blocks) and the other block
// types for MUL_MAT, MUL_MAT_ID and GET_ROWS; attention with float or
// Q4_0 / Q8_0 K/V of head size <= 256.
bool cuda_claims(const Tensor& node) {
  const auto is_float = [](const Tensor* t) {
    return t->type == DType::kF32 || t->type == DType::kF16 || t->type == DType::kBF16;
  };
  const auto q4_q8 = [](const Tensor* t) {
    return t->type == DType::kQ4_0 || t->type == DType::kQ8_0;
  };
  // Every block type llama-quantize writes: matmuls and row reads take them in
  // their GGUF blocks (decode reads them in place; prefill dequantizes for cuBLAS).
  const auto gguf_blocks = [&](const Tensor* t) {
    switch (t->type) {
      case DType::kQ4_1:
      case DType::kQ5_0:
      case DType::kQ5_1:
      case DType::kQ2_K:
      case DType::kQ3_K:
      case DType::kQ4_K:
      case DType::kQ5_K:
      case DType::kQ6_K:
      case DType::kIQ4_NL:
      case DType::kIQ4_XS:
      case DType::kMXFP4:
        return true;
      default:
        return q4_q8(t);
    }
  };
  const Tensor* a = node.src[0];
  switch (node.op) {
    case Op::kMulMat:
    case Op::kGetRows:
      return is_float(a) || gguf_blocks(a);
    case Op::kAddId:
      return is_float(a) && node.src[2]->type == DType::kI32;
    case Op::kArgsort:  // an MoE router's rows, not a vocabulary
      return is_float(a) && node.type == DType::kI32 && a->ne[0] <= 1024;
    case Op::kMulMatId:  // experts in the weights buffer (Q4_0 / Q8_0 split); f32 activations
      return (is_float(a) || gguf_blocks(a)) && node.src[1]->type == DType::kF32;
    case Op::kSetRows:  // a quantized KV cache is written in Q4_0 / Q8_0 blocks
      return is_float(&node) || (q4_q8(&node) && a->type == DType::kF32);
    case Op::kCpy:
    case Op::kDup:
    case Op::kCont:
      return (is_float(a) && is_float(&node)) || (a->type == DType::kI32 && node.type == DType::kI32) ||
             (a->type == DType::kF32 && q4_q8(&node));
    case Op::kFlashAttnExt:
      return (is_float(node.src[1]) || q4_q8(node.src[1])) &&
             (is_float(node.src[2]) || q4_q8(node.src[2])) && node.src[0]->ne[0] <= 256 &&
             node.src[2]->ne[0] <= 256;
    case Op::kAdd:
    case Op::kSub:
    case Op::kMul:
    case Op::kDiv:
    case Op::kScale:
    case Op::kClamp:
    case Op::kUnary:
    case Op::kSwiglu:
    case Op::kGeglu:
    case Op::kSwigluOai:
    case Op::kSumRows:
    case Op::kRmsNorm:
    case Op::kNorm:
    case Op::kSoftMax:
    case Op::kRope:
      return is_float(a);
    default:
      return false;
  }
}

// What each backend claims to run. A target must run some of the cases it
// claims in each test (refusing them all fails), and must not run a case it
// does not claim (the claim is then out of date).
bool claims(const Target& target, const Tensor& node) {
  if (target.device.starts_with("CPU")) return true;  // every op of docs/ops.md
  if (target.device.starts_with("BLAS")) {
    return node.op == Op::kMulMat &&
           (node.src[0]->type == DType::kF32 || node.src[0]->type == DType::kF16);
  }
  if (target.device.starts_with("CUDA")) return cuda_claims(node);
  ADD_FAILURE() << "the conformance harness has no claims for " << target.device;
  return false;
}

void run_cases(const Target& target, const std::vector<Case>& cases, const Naive& naive) {
  Device& dev = runtime().device(target.device);
  int run = 0, skipped = 0, claimed = 0;
  std::string first_skip;
  for (const Case& c : cases) {
    const uint32_t seed = next_seed();
    SCOPED_TRACE(fmt::format("case {} on {}, seed {} (TESSERA_TEST_SEED={} replays it)", c.name,
                             target.name(), seed, seed));
    CaseRun actual(c, seed);
    actual.prepare(dev);
    const bool claim = claims(target, actual.node());
    claimed += claim ? 1 : 0;
    const std::string why = actual.unsupported(dev);
    if (why.empty() && !claim) {
      ADD_FAILURE() << target.name() << " runs " << c.name << ", which it does not claim";
    }
    if (!why.empty()) {
      if (target.is_reference()) {
        ADD_FAILURE() << "the CPU ref tier must support every case; it refuses " << why;
      } else if (skipped++ == 0) {
        first_skip = fmt::format("{}: {}", c.name, why);
      }
      continue;
    }
    for (const std::string& p : actual.run(dev, target.isa)) ADD_FAILURE() << p;
    std::vector<double> expected;
    if (target.is_reference()) {
      expected = naive(actual.node(), *actual.host());
      if (expected.size() == actual.output().size()) round_to_type(actual.node(), expected);
    } else {
      CaseRun ref(c, seed);
      ref.prepare(cpu0());
      const std::string ref_why = ref.unsupported(cpu0());
      if (!ref_why.empty()) {
        ADD_FAILURE() << "the CPU ref tier must support every case; it refuses " << ref_why;
        continue;
      }
      for (const std::string& p : ref.run(cpu0(), cpu::Isa::kRef))
        ADD_FAILURE() << "reference: " << p;
      expected = ref.output();
    }
    // An f16 / bf16 result may round to the neighbouring value of the reference's: a tier
    // that sums in another order, or the double reference, lands on the other side of a tie.
    const DType slack = actual.node().type;
    const std::string diff = compare(expected, actual.output(), c.max_nmse, slack);
    if (!diff.empty()) ADD_FAILURE() << diff;
    ++run;
  }
  auto& counts = tally().counts[target.name()];
  counts.first += run;
  counts.second += skipped;
  if (run == 0 && claimed > 0) {
    ADD_FAILURE() << target.name() << " claims " << claimed
                  << " of these cases and supports none, e.g. " << first_skip;
  } else if (run == 0 && skipped > 0) {
    GTEST_SKIP() << target.name() << " claims none of these cases";
  }
  if (skipped > 0) {
    std::cout << fmt::format("[conformance] {} skipped {} of {} cases, e.g. {}\n", target.name(),
                             skipped, cases.size(), first_skip);
  }
}

}  // namespace tessera::conformance
