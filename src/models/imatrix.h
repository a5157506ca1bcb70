// An importance matrix as llama-imatrix writes it (GGUF): per weight tensor,
// the mean square of each input column over the calibration data, which
// llama-quantize --imatrix uses to weight each column's rounding error.
//
// File layout: tensors "<weight>.in_sum2" (f32 [ne0, n_expert]: sums of
// squared activations) and "<weight>.counts" (f32 [1, n_expert]: how many
// rows went into each sum); keys imatrix.datasets, imatrix.chunk_count,
// imatrix.chunk_size. The value of column i of expert j is
// in_sum2[j][i] / counts[j], or 1 where counts[j] is 0 (never seen in calibration).
// The older binary .dat format is not read.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace tessera {

struct ImportanceMatrix {
  std::map<std::string, std::vector<float>, std::less<>> values;  // weight name -> ne0 * n_expert
  std::vector<std::string> datasets;
  uint32_t chunk_count = 0;

  const std::vector<float>* find(std::string_view weight) const {
    const auto it = values.find(weight);
    return it == values.end() ? nullptr : &it->second;
  }
};

// Throws Error(kInvalidFile) naming the file and, where it applies, the
// tensor or key that is wrong; kIo when it cannot be read.
ImportanceMatrix load_importance_matrix(const std::filesystem::path& path);

}  // namespace tessera
