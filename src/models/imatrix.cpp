#include "imatrix.h"

#include <cmath>
#include <cstring>

#include "tessera/core/error.h"
#include "tessera/gguf/gguf.h"

namespace tessera {
namespace {

constexpr std::string_view kSums = ".in_sum2", kCounts = ".counts";

std::vector<float> f32_values(const gguf::File& file, const gguf::TensorInfo& t) {
  if (t.type != DType::kF32) {
    fail(ErrorCategory::kInvalidFile, "[imatrix {}] tensor '{}': found type {}, expected f32",
         file.name(), t.name, dtype_name(t.type));
  }
  std::vector<float> v(static_cast<size_t>(t.n_elements()));
  const std::span<const uint8_t> bytes = file.tensor_data(t);
  std::memcpy(v.data(), bytes.data(), v.size() * sizeof(float));
  return v;
}

}  // namespace

ImportanceMatrix load_importance_matrix(const std::filesystem::path& path) {
  const gguf::File file = [&] {
    try {
      return gguf::File::open(path);
    } catch (const Error& e) {
      if (e.category() != ErrorCategory::kInvalidFile) throw;
      fail(ErrorCategory::kInvalidFile, "[imatrix {}] found no GGUF file ({}), expected "
           "llama-imatrix's GGUF output; the legacy .dat format is not read (llama-imatrix "
           "--in-file FILE.dat -o FILE.gguf converts it)", path.string(), e.what());
    }
  }();
  ImportanceMatrix m;
  for (std::string_view key : {"imatrix.datasets", "imatrix.chunk_count", "imatrix.chunk_size"}) {
    if (file.find(key) == nullptr) {
      fail(ErrorCategory::kInvalidFile, "[imatrix {}] key '{}' is missing, expected "
           "llama-imatrix's metadata", file.name(), key);
    }
  }
  const gguf::ArrayView& datasets = file.find("imatrix.datasets")->array();
  for (uint64_t i = 0; i < datasets.size(); ++i) m.datasets.emplace_back(datasets.string(i));
  m.chunk_count = file.find("imatrix.chunk_count")->u32();

  std::map<std::string, std::pair<const gguf::TensorInfo*, const gguf::TensorInfo*>, std::less<>> pairs;
  for (const gguf::TensorInfo& t : file.tensors()) {
    const std::string_view n = t.name;
    if (n.ends_with(kSums)) pairs[std::string(n.substr(0, n.size() - kSums.size()))].first = &t;
    if (n.ends_with(kCounts)) pairs[std::string(n.substr(0, n.size() - kCounts.size()))].second = &t;
  }
  for (const auto& [name, p] : pairs) {
    const auto [sums_t, counts_t] = p;
    if (sums_t == nullptr || counts_t == nullptr) {
      fail(ErrorCategory::kInvalidFile, "[imatrix {}] weight '{}': found {} without {}, expected both",
           file.name(), name, sums_t != nullptr ? kSums : kCounts, sums_t != nullptr ? kCounts : kSums);
    }
    const std::vector<float> sums = f32_values(file, *sums_t), counts = f32_values(file, *counts_t);
    const int64_t ne0 = sums_t->ne[0], n_expert = sums_t->n_elements() / std::max<int64_t>(ne0, 1);
    if (static_cast<int64_t>(counts.size()) != n_expert) {
      fail(ErrorCategory::kInvalidFile, "[imatrix {}] weight '{}': found {} counts for {} rows "
           "of sums, expected one per row", file.name(), name, counts.size(), n_expert);
    }
    std::vector<float>& v = m.values[name];
    v.resize(sums.size());
    for (int64_t j = 0; j < n_expert; ++j) {
      for (int64_t i = 0; i < ne0; ++i) {
        const size_t k = static_cast<size_t>(j * ne0 + i);
        v[k] = counts[static_cast<size_t>(j)] > 0.0f ? sums[k] / counts[static_cast<size_t>(j)] : 1.0f;
        if (!std::isfinite(v[k])) {
          fail(ErrorCategory::kInvalidFile, "[imatrix {}] weight '{}': found {} at column {}, "
               "expected finite values", file.name(), name, v[k], k);
        }
      }
    }
  }
  return m;
}

}  // namespace tessera
