// What front ends show of model files, loaded models and devices, so that
// none of them reads a GGUF header or makes a runtime of its own.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "tessera/models/model.h"

namespace tessera::serving {

// One metadata key: strings as they are, every other value as display text
// (arrays whole).
struct MetadataEntry {
  std::string key;
  std::string value;
};

struct FileMetadata {
  uint32_t version = 0;
  uint64_t alignment = 0;
  uint64_t data_offset = 0;
  uint64_t n_tensors = 0;
  std::vector<MetadataEntry> entries;  // in file order
};

// The header of the GGUF file at `path` (no weights are read). Throws the
// reader's Error, naming the file, for one that is missing or malformed.
FileMetadata read_file_metadata(const std::filesystem::path& path);

// Every metadata key of a loaded model's file, in file order.
std::vector<MetadataEntry> model_metadata(const Model& model);

struct DeviceInfo {
  std::string backend;      // "CPU", "BLAS", "CUDA"
  std::string type;         // "cpu", "gpu", "accel"
  std::string name;         // "CPU0"
  std::string description;  // the chip's own name
  uint64_t total_bytes = 0, free_bytes = 0;
};

// The devices of every backend compiled in and every module found.
std::vector<DeviceInfo> list_devices();

}  // namespace tessera::serving
