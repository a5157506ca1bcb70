// libFuzzer target for the GGUF reader and writer.
//
// Bytes -> File::from_bytes. tessera::Error from parsing is the expected way
// to refuse a file and is swallowed; anything else (a sanitizer report, another
// exception, an abort) is a finding. A file that parses is then walked: every
// key, value, array element and tensor byte range is read with the accessor
// that matches its stored type, which must not throw. It is then written again
// with the Writer and parsed back, and must hold the same contents.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>

#include "tessera/core/error.h"
#include "tessera/gguf/gguf.h"

namespace {

using tessera::gguf::ArrayView;
using tessera::gguf::File;
using tessera::gguf::KeyValue;
using tessera::gguf::TensorInfo;
using tessera::gguf::Value;
using tessera::gguf::ValueType;

void require(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "fuzz_gguf: %s\n", what);
    std::abort();
  }
}

bool is_unsigned(ValueType t) {
  return t == ValueType::kU8 || t == ValueType::kU16 || t == ValueType::kU32 ||
         t == ValueType::kU64;
}

// Reads everything a value holds; returns a checksum so nothing is elided.
uint64_t walk_value(const Value& v) {
  uint64_t sum = v.to_display_string(4).size();
  switch (v.type()) {
    case ValueType::kF32:
    case ValueType::kF64:
      return sum + static_cast<uint64_t>(v.f64() != 0.0);
    case ValueType::kBool:
      return sum + v.boolean();
    case ValueType::kString:
      return sum + v.string().size();
    case ValueType::kArray:
      break;
    default:
      return sum + (is_unsigned(v.type()) ? v.u64() : static_cast<uint64_t>(v.i64()));
  }
  const ArrayView& a = v.array();
  if (a.element_type() == ValueType::kString) {
    for (uint64_t i = 0; i < a.size(); ++i) sum += a.string(i).size();
    return sum;
  }
  sum += a.raw_bytes().size();
  for (uint64_t i = 0; i < a.size(); ++i) {
    sum += a.element_type() == ValueType::kBool ? a.number<bool>(i)
                                                : static_cast<uint64_t>(a.number<double>(i) != 0);
  }
  return sum;
}

uint64_t walk(const File& f) {
  uint64_t sum = f.version() + f.alignment() + f.data_offset() + f.header_size();
  for (const KeyValue& kv : f.kvs()) {
    require(f.find(kv.key) == &kv.value, "find() misses a key");
    sum += kv.key.size() + walk_value(kv.value);
  }
  for (const TensorInfo& t : f.tensors()) {
    require(f.find_tensor(t.name) == &t, "find_tensor() misses a tensor");
    const std::span<const uint8_t> data = f.tensor_data(t);
    require(data.size() == t.nbytes && t.nbytes > 0, "tensor_data() has the wrong size");
    sum += data.front() + data.back() + static_cast<uint64_t>(t.n_elements());
  }
  return sum;
}

// Writes the file again and checks the copy parses to the same contents.
void round_trip(const File& f) {
  tessera::gguf::Writer w;
  for (const KeyValue& kv : f.kvs()) w.set_value(kv.key, kv.value);
  for (const TensorInfo& t : f.tensors()) {
    w.add_tensor(t.name, t.type, std::span(t.ne).first(static_cast<size_t>(t.n_dims)),
                 f.tensor_data(t));
  }
  const std::vector<uint8_t> bytes = w.to_bytes();
  const File g = File::from_bytes(bytes, "copy.gguf");
  require(g.kvs().size() == f.kvs().size(), "copy has other keys");
  for (size_t i = 0; i < f.kvs().size(); ++i) {
    const Value& a = f.kvs()[i].value;
    const Value& b = g.kvs()[i].value;
    require(f.kvs()[i].key == g.kvs()[i].key, "copy has another key");
    require(a.type() == b.type(), "copy has another value type");
    require(a.to_display_string(16) == b.to_display_string(16), "copy has another value");
  }
  require(g.tensors().size() == f.tensors().size(), "copy has other tensors");
  for (size_t i = 0; i < f.tensors().size(); ++i) {
    const TensorInfo& a = f.tensors()[i];
    const TensorInfo& b = g.tensors()[i];
    require(a.name == b.name && a.type == b.type && a.ne == b.ne, "copy has another tensor");
    const std::span<const uint8_t> da = f.tensor_data(a);
    const std::span<const uint8_t> db = g.tensor_data(b);
    require(std::memcmp(da.data(), db.data(), da.size()) == 0, "copy has other tensor data");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::optional<File> file;
  try {
    file.emplace(File::from_bytes({data, size}, "fuzz.gguf"));
  } catch (const tessera::Error&) {
    return 0;  // refused: the expected outcome for most inputs
  }
  // From here on nothing may throw: a File that exists is well-formed.
  volatile uint64_t sink = walk(*file);
  (void)sink;
  round_trip(*file);
  return 0;
}
