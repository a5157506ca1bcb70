#include "tessera/serving/inspect.h"

#include <cctype>
#include <cstdint>

#include "tessera/backends/builtin.h"
#include "tessera/gguf/gguf.h"

namespace tessera::serving {
namespace {

std::vector<MetadataEntry> entries_of(const gguf::File& file) {
  std::vector<MetadataEntry> out;
  out.reserve(file.kvs().size());
  for (const gguf::KeyValue& kv : file.kvs()) {
    out.push_back({std::string(kv.key), kv.value.type() == gguf::ValueType::kString
                                            ? std::string(kv.value.string())
                                            : kv.value.to_display_string(SIZE_MAX)});
  }
  return out;
}

}  // namespace

FileMetadata read_file_metadata(const std::filesystem::path& path) {
  const gguf::File file = gguf::File::open(path);
  return {file.version(), file.alignment(), file.data_offset(), file.tensors().size(),
          entries_of(file)};
}

std::vector<MetadataEntry> model_metadata(const Model& model) { return entries_of(model.file()); }

std::vector<DeviceInfo> list_devices() {
  const std::unique_ptr<Runtime> runtime = make_runtime();
  std::vector<DeviceInfo> out;
  for (const auto& b : runtime->backends()) {
    for (size_t i = 0; i < b->device_count(); ++i) {
      Device& d = b->device(i);
      const MemoryInfo m = d.memory();
      std::string type(device_type_name(d.type()));
      for (char& c : type) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      out.push_back({std::string(b->name()), type, std::string(d.name()),
                     std::string(d.description()), m.total, m.free});
    }
  }
  return out;
}

}  // namespace tessera::serving
