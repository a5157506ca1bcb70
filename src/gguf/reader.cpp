// File: memory mapping, the fixed header, and lookups over the parsed data.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <functional>
#include <utility>

#include "parse.h"
#include "tessera/core/error.h"
#include "tessera/core/fd.h"

namespace tessera::gguf {
namespace detail {

namespace {

void parse_header(Cursor& cur, FileData& out, uint64_t* n_tensors, uint64_t* n_kv) {
  if (cur.size() == 0) cur.fail(0, "file", "0 bytes", "a GGUF header (empty file)");
  const uint32_t magic = cur.read<uint32_t>("magic");
  if (magic != kMagic) {
    char text[5] = {};
    std::memcpy(text, &magic, 4);
    for (char& c : std::span(text, 4)) {
      if (c < 0x20 || c > 0x7e) c = '.';
    }
    cur.fail(0, "magic", fmt::format("{:#010x} \"{}\"", magic, text), "\"GGUF\" (not a GGUF file)");
  }
  const uint32_t version = cur.read<uint32_t>("version");
  const uint32_t swapped = __builtin_bswap32(version);
  if (version == 1) {
    cur.fail(4, "version", "1", "2 or 3 (GGUF v1 is not supported)");
  } else if ((version & 0xffff) == 0 && swapped >= 1 && swapped <= 3) {
    cur.fail(4, "version", fmt::format("{:#010x}", version),
             fmt::format("2 or 3 (this is a big-endian GGUF v{}; big-endian is not supported)",
                         swapped));
  } else if (version == 0) {
    cur.fail(4, "version", "0", "2 or 3");
  } else if (version > 3) {
    cur.fail(4, "version", std::to_string(version), "2 or 3 (a newer GGUF than this reader)");
  }
  out.version = version;

  *n_tensors = cur.read<uint64_t>("n_tensors");
  *n_kv = cur.read<uint64_t>("n_kv");
  // Bound both counts by the bytes that could hold them before anything is
  // reserved for them.
  const uint64_t max_tensors = cur.remaining() / kMinTensorInfoBytes;
  if (*n_tensors > max_tensors) {
    cur.fail(8, "n_tensors", std::to_string(*n_tensors),
             fmt::format("at most {} ({} bytes left, >= {} per tensor info)", max_tensors,
                         cur.remaining(), kMinTensorInfoBytes));
  }
  const uint64_t left_for_kvs = cur.remaining() - *n_tensors * kMinTensorInfoBytes;
  const uint64_t max_kvs = left_for_kvs / kMinKvBytes;
  if (*n_kv > max_kvs) {
    cur.fail(16, "n_kv", std::to_string(*n_kv),
             fmt::format("at most {} ({} bytes left after the tensor infos, >= {} per key-value)",
                         max_kvs, left_for_kvs, kMinKvBytes));
  }
}

}  // namespace

void parse_file(FileData& out) {
  Cursor cur(out.bytes, out.name);
  uint64_t n_tensors = 0;
  uint64_t n_kv = 0;
  parse_header(cur, out, &n_tensors, &n_kv);
  parse_kvs(cur, n_kv, out);
  check_known_keys(out);
  parse_tensor_infos(cur, n_tensors, out);
  check_tensor_layout(cur, out);
}

}  // namespace detail

namespace {

// A read-only private mapping of a whole file; unmapped on destruction.
class Mapping {
 public:
  Mapping() = default;
  Mapping(void* addr, size_t size) : addr_(addr), size_(size) {}
  Mapping(Mapping&& other) noexcept
      : addr_(std::exchange(other.addr_, nullptr)), size_(std::exchange(other.size_, 0)) {}
  Mapping& operator=(Mapping&& other) noexcept {
    if (this != &other) {
      reset();
      addr_ = std::exchange(other.addr_, nullptr);
      size_ = std::exchange(other.size_, 0);
    }
    return *this;
  }
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  ~Mapping() { reset(); }

  std::span<const uint8_t> bytes() const { return {static_cast<const uint8_t*>(addr_), size_}; }

  // Drops this process's pages of the whole pages inside `part` (a span of
  // the map); the page cache keeps them, and a later read maps them again.
  void release(std::span<const uint8_t> part) const {
    if (addr_ == nullptr || part.empty()) return;
    const auto page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
    const auto begin = reinterpret_cast<uintptr_t>(part.data());
    const uintptr_t end = begin + part.size();
    const uintptr_t first = (begin + page - 1) / page * page, last = end / page * page;
    if (last <= first) return;
    // Advice only: a failure leaves the pages mapped, which is what not asking does.
    madvise(reinterpret_cast<void*>(first), last - first, MADV_DONTNEED);
  }

  void will_need(std::span<const uint8_t> part) const {
    if (addr_ == nullptr || part.empty()) return;
    const auto page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
    const auto begin = reinterpret_cast<uintptr_t>(part.data()) / page * page;
    const uintptr_t end = reinterpret_cast<uintptr_t>(part.data()) + part.size();
    madvise(reinterpret_cast<void*>(begin), end - begin, MADV_WILLNEED);  // advice only
  }

 private:
  void reset() {
    if (addr_ != nullptr) munmap(addr_, size_);
    addr_ = nullptr;
  }
  void* addr_ = nullptr;
  size_t size_ = 0;
};

[[noreturn]] void fail_io(const std::string& path, std::string_view what, int err) {
  fail(ErrorCategory::kIo, "[gguf {}] {}: found \"{}\", expected success", path, what,
       std::strerror(err));
}

}  // namespace

struct File::Impl : detail::FileData {
  Mapping mapping;
};

File::File(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
File::File(File&&) noexcept = default;
File& File::operator=(File&&) noexcept = default;
File::~File() = default;

File File::open(const std::filesystem::path& path) {
  auto impl = std::make_unique<Impl>();
  impl->name = path.string();
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) fail_io(impl->name, "open", errno);
  struct stat st {};
  if (fstat(fd.get(), &st) != 0) fail_io(impl->name, "stat", errno);
  if (!S_ISREG(st.st_mode)) fail_io(impl->name, "open (not a regular file)", EINVAL);
  if (st.st_size > 0) {
    const size_t size = static_cast<size_t>(st.st_size);
    void* addr = mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd.get(), 0);
    if (addr == MAP_FAILED) fail_io(impl->name, "mmap", errno);
    impl->mapping = Mapping(addr, size);
  }
  // An empty file maps nothing; the parser reports it as an invalid file.
  impl->bytes = impl->mapping.bytes();
  detail::parse_file(*impl);
  return File(std::move(impl));
}

File File::from_bytes(std::span<const uint8_t> bytes, std::string name) {
  auto impl = std::make_unique<Impl>();
  impl->name = std::move(name);
  impl->bytes = bytes;
  detail::parse_file(*impl);
  return File(std::move(impl));
}

const std::string& File::name() const {
  return impl_->name;
}
uint32_t File::version() const {
  return impl_->version;
}
uint64_t File::file_size() const {
  return impl_->bytes.size();
}
uint32_t File::alignment() const {
  return impl_->alignment;
}
uint64_t File::header_size() const {
  return impl_->header_size;
}
uint64_t File::data_offset() const {
  return impl_->data_offset;
}

std::span<const KeyValue> File::kvs() const {
  return impl_->kvs;
}

const Value* File::find(std::string_view key) const {
  const auto& kvs = impl_->kvs;
  auto it = std::lower_bound(impl_->kv_order.begin(), impl_->kv_order.end(), key,
                             [&](size_t i, std::string_view k) { return kvs[i].key < k; });
  if (it == impl_->kv_order.end() || kvs[*it].key != key) return nullptr;
  return &kvs[*it].value;
}

std::span<const TensorInfo> File::tensors() const {
  return impl_->tensors;
}

const TensorInfo* File::find_tensor(std::string_view name) const {
  const auto& tensors = impl_->tensors;
  auto it = std::lower_bound(impl_->tensor_order.begin(), impl_->tensor_order.end(), name,
                             [&](size_t i, std::string_view n) { return tensors[i].name < n; });
  if (it == impl_->tensor_order.end() || tensors[*it].name != name) return nullptr;
  return &tensors[*it];
}

std::span<const uint8_t> File::tensor_data(const TensorInfo& info) const {
  const auto& tensors = impl_->tensors;
  const std::less<const TensorInfo*> before;
  if (tensors.empty() || before(&info, tensors.data()) ||
      !before(&info, tensors.data() + tensors.size())) {
    fail(ErrorCategory::kInvalidArgument,
         "[gguf {}] tensor_data: found tensor '{}' from another file, expected one of this "
         "file's tensors",
         impl_->name, info.name);
  }
  // The layout check proved data_offset + offset + nbytes <= file size.
  return impl_->bytes.subspan(impl_->data_offset + info.offset, info.nbytes);
}

void File::release(const TensorInfo& info) const {
  impl_->mapping.release(tensor_data(info));
}

void File::will_need(std::span<const uint8_t> part) const { impl_->mapping.will_need(part); }

}  // namespace tessera::gguf
