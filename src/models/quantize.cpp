// quantize_model: each tensor of the input is copied or converted row by
// row (dequantized to f32, quantized to the target) into a streamed writer,
// so memory holds one converted tensor at a time; the input is mapped.
#include "tessera/quantize.h"

#include <algorithm>
#include <charconv>
#include <cstring>
#include <vector>

#include <fmt/format.h>

#include "models/parallel_rows.h"
#include "tessera/error.h"
#include "tessera/gguf.h"
#include "tessera/synth.h"

namespace tessera {
namespace {

constexpr DType kWritable[] = {DType::kF32,  DType::kF16,  DType::kBF16,
                               DType::kQ8_0, DType::kQ4_0, DType::kQ4_1,
                               DType::kQ5_0, DType::kQ5_1, DType::kQ6_K};

bool is_plain_float(DType t) { return t == DType::kF32 || t == DType::kF16 || t == DType::kBF16; }

// llama-quantize converts the 2-D (and larger) tensors named *weight.
bool is_weight(const gguf::TensorInfo& t) {
  return t.n_dims >= 2 && t.name.ends_with("weight");
}

struct Plan {
  DType to;
  std::string note;
};

Plan plan_tensor(const gguf::TensorInfo& t, const QuantizeOptions& o, bool has_output) {
  if (!is_weight(t)) return {t.type, {}};
  DType to = o.type;
  std::string note;
  const bool is_output = t.name == "output.weight" || (!has_output && t.name == "token_embd.weight");
  if (!o.pure && dtype_info(o.type).quantized && is_output) {
    to = o.type == DType::kQ8_0 || t.ne[0] % dtype_info(DType::kQ6_K).block_size != 0
             ? DType::kQ8_0
             : DType::kQ6_K;
    if (to != o.type) note = "output head, as llama-quantize keeps it";
  }
  if (o.output_type && t.name == "output.weight") to = *o.output_type, note = "--output-tensor-type";
  if (o.token_embedding_type && t.name == "token_embd.weight") {
    to = *o.token_embedding_type, note = "--token-embedding-type";
  }
  if (t.ne[0] % dtype_info(to).block_size != 0) {
    note = fmt::format("rows of {} are no multiple of {}'s block of {}", t.ne[0],
                       dtype_name(to), dtype_info(to).block_size);
    to = DType::kF16;
  }
  return {to, std::move(note)};
}

}  // namespace

std::optional<DType> quantize_type_from_name(std::string_view name) {
  int number = -1;
  const auto [end, ec] = std::from_chars(name.data(), name.data() + name.size(), number);
  for (DType t : kWritable) {
    if (ec == std::errc() && end == name.data() + name.size()) {
      if (llama_file_type(t) == static_cast<uint32_t>(number)) return t;
      continue;
    }
    const std::string_view n = dtype_name(t);
    if (n.size() == name.size() &&
        std::equal(n.begin(), n.end(), name.begin(), [](char a, char b) {
          return std::tolower(static_cast<unsigned char>(a)) ==
                 std::tolower(static_cast<unsigned char>(b));
        })) {
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
    s += (s.empty() ? "" : ", ") + fmt::format("{} ({})", n, *llama_file_type(t));
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
  if (!dtype_info(o.type).has_quantize || !llama_file_type(o.type)) {
    fail(ErrorCategory::kInvalidArgument, "[quantize] type {}: expected one of {}",
         dtype_name(o.type), quantize_type_names());
  }
  const gguf::File file = gguf::File::open(in);
  const bool has_output = file.find_tensor("output.weight") != nullptr;

  gguf::Writer w;
  for (const gguf::KeyValue& kv : file.kvs()) w.set_value(kv.key, kv.value);
  w.set_u32("general.file_type", *llama_file_type(o.type));
  w.set_u32("general.quantization_version", 2);

  QuantizeSummary summary;
  std::vector<QuantizeTensor> report;
  report.reserve(file.tensors().size());
  const int threads = default_tool_threads(o.threads);
  for (const gguf::TensorInfo& t : file.tensors()) {
    Plan p = plan_tensor(t, o, has_output);
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
    const std::vector<int64_t> shape(t.ne.begin(), t.ne.begin() + t.n_dims);
    const uint64_t bytes_out = *row_bytes(p.to, t.ne[0]) * static_cast<uint64_t>(t.n_elements() / t.ne[0]);
    report.push_back({t.name, t.type, p.to, t.nbytes, bytes_out, std::move(p.note)});
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
    w.add_tensor(t.name, to, shape, [=](std::span<uint8_t> dst) {
      const size_t in_row = *row_bytes(from_type, n), out_row = *row_bytes(to, n);
      const auto rows = static_cast<int64_t>(dst.size() / out_row);
      parallel_rows(rows, threads, [&](int64_t begin, int64_t end) {
        std::vector<float> v(static_cast<size_t>(n));
        for (int64_t r = begin; r < end; ++r) {
          dequantize_row(from_type, src.data() + static_cast<size_t>(r) * in_row, v.data(), n);
          quantize_row(to, v.data(), dst.data() + static_cast<size_t>(r) * out_row, n);
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
