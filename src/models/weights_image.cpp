#include "weights_image.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <string_view>
#include <system_error>
#include <thread>

#include <fmt/format.h>

#include "tessera/core/error.h"
#include "tessera/core/fd.h"
#include "tessera/runtime/device.h"

namespace tessera {
namespace fs = std::filesystem;

namespace {

constexpr char kMagic[8] = {'T', 'S', 'W', 'I', 'M', 'A', 'G', 'E'};
constexpr uint64_t kAlign = uint64_t{2} << 20;  // buffers start on huge-page boundaries
constexpr uint64_t kMaxHeader = uint64_t{64} << 20;
constexpr size_t kChunk = size_t{16} << 20;  // hashed as one piece, on one thread

constexpr uint64_t kP1 = 0x9E3779B185EBCA87ull;
constexpr uint64_t kP2 = 0xC2B2AE3D27D4EB4Full;
constexpr uint64_t kP3 = 0x165667B19E3779F9ull;

uint64_t rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }
uint64_t mix(uint64_t h, uint64_t v) { return rotl(h ^ (v * kP2), 27) * kP1 + kP3; }

// Eight lanes, each word multiplied (off the lane's dependency chain, which
// is an add and a rotate) then folded in; lanes mixed at the end, then the
// tail. Each word's step is a bijection of the lane, so any changed word
// changes it. Twice the speed of a multiply on the chain (xxh64's round):
// the pass over a warm image is the hash's arithmetic.
uint64_t hash_chunk(const uint8_t* p, size_t n) {
  uint64_t lane[8];
  for (int l = 0; l < 8; ++l) lane[l] = kP1 * static_cast<uint64_t>(l + 1);
  size_t i = 0;
  for (; i + 64 <= n; i += 64) {
    for (int l = 0; l < 8; ++l) {
      uint64_t w;
      std::memcpy(&w, p + i + 8 * l, 8);
      lane[l] = rotl(lane[l] + w * kP2, 31);
    }
  }
  uint64_t h = n;
  for (uint64_t v : lane) h = mix(h, v * kP1);
  for (; i < n; ++i) h = mix(h, p[i]);
  return h;
}

std::string hex(uint64_t v) { return fmt::format("{:016x}", v); }

uint64_t round_up(uint64_t v, uint64_t to) { return (v + to - 1) / to * to; }

std::string errno_text() { return std::strerror(errno); }

// The header: magic, the text's length and hash, the text.
std::string header_bytes(const std::string& text) {
  std::string h(kMagic, sizeof kMagic);
  const uint64_t n = text.size();
  const uint64_t sum = WeightsImage::hash({reinterpret_cast<const uint8_t*>(text.data()), text.size()});
  h.append(reinterpret_cast<const char*>(&n), 8);
  h.append(reinterpret_cast<const char*>(&sum), 8);
  return h + text;
}

// The header text of the image file `fd`, or "" with *why_not.
std::string read_header(int fd, uint64_t file_bytes, std::string* why_not) {
  char head[24];
  if (file_bytes < sizeof head || !read_all(fd, head, sizeof head, 0) ||
      std::memcmp(head, kMagic, sizeof kMagic) != 0) {
    *why_not = "not a weights image";
    return {};
  }
  uint64_t n = 0, sum = 0;
  std::memcpy(&n, head + 8, 8);
  std::memcpy(&sum, head + 16, 8);
  if (n > kMaxHeader || n > file_bytes - sizeof head) {
    *why_not = fmt::format("header of {} bytes in a file of {}", n, file_bytes);
    return {};
  }
  std::string text(n, '\0');
  if (!read_all(fd, text.data(), n, sizeof head)) {
    *why_not = "header unreadable: " + errno_text();
    return {};
  }
  if (WeightsImage::hash({reinterpret_cast<const uint8_t*>(text.data()), text.size()}) != sum) {
    *why_not = "header hash does not match";
    return {};
  }
  return text;
}

// The first three lines of an image's header: its format version and the
// model file it was made of ("" when unreadable).
std::string made_of(const fs::path& image) {
  const Fd fd(open(image.c_str(), O_RDONLY | O_CLOEXEC));
  struct stat st {};
  if (fd.get() < 0 || fstat(fd.get(), &st) != 0) return {};
  std::string why;
  const std::string text = read_header(fd.get(), static_cast<uint64_t>(st.st_size), &why);
  size_t end = 0;
  for (int line = 0; line < 3 && end != std::string::npos; ++line) end = text.find('\n', end + (line > 0));
  return end == std::string::npos ? std::string() : text.substr(0, end);
}

// Hashes of each region, every chunk on one of several threads. `prefetch`:
// base is a mapped file (offsets page-aligned).
std::vector<uint64_t> hash_regions(const uint8_t* base, std::span<const uint64_t> offsets,
                                   std::span<const BufferPlan> plans, bool prefetch) {
  struct Piece {
    uint64_t at, size;
  };
  std::vector<Piece> pieces;
  std::vector<size_t> first(plans.size() + 1);
  for (size_t i = 0; i < plans.size(); ++i) {
    first[i] = pieces.size();
    for (uint64_t at = 0; at < plans[i].size; at += kChunk) {
      pieces.push_back({offsets[i] + at, std::min<uint64_t>(kChunk, plans[i].size - at)});
    }
  }
  first[plans.size()] = pieces.size();
  std::vector<uint64_t> sums(pieces.size());
  std::atomic<size_t> next{0};
  const size_t n_threads =
      std::clamp<size_t>(std::thread::hardware_concurrency(), 1, std::max<size_t>(1, pieces.size()));
  // A mapped file's pieces are asked of the disk a few pieces ahead of the
  // hashing (large reads, overlapping it); in the page cache, a no-op.
  const size_t ahead = prefetch ? 4 * n_threads : 0;
  auto will_need = [&](size_t k) {
    if (k < pieces.size()) madvise(const_cast<uint8_t*>(base) + pieces[k].at, pieces[k].size, MADV_WILLNEED);
  };
  for (size_t k = 0; k < ahead; ++k) will_need(k);
  auto work = [&] {
    for (size_t k; (k = next.fetch_add(1)) < pieces.size();) {
      if (ahead > 0) will_need(k + ahead);
      sums[k] = hash_chunk(base + pieces[k].at, pieces[k].size);
    }
  };
  std::vector<std::jthread> helpers;
  for (size_t t = 1; t < std::min<size_t>(n_threads, 16); ++t) helpers.emplace_back(work);
  work();
  helpers.clear();
  std::vector<uint64_t> out;
  for (size_t i = 0; i < plans.size(); ++i) {
    uint64_t h = plans[i].size;
    for (size_t k = first[i]; k < first[i + 1]; ++k) h = mix(h, sums[k]);
    out.push_back(h);
  }
  return out;
}

std::string hash_lines(std::span<const uint64_t> sums) {
  std::string s;
  for (size_t i = 0; i < sums.size(); ++i) s += fmt::format("hash {} {}\n", i, hex(sums[i]));
  return s;
}

}  // namespace

// The file mapped into memory; unmapped when the last buffer over it goes.
struct WeightsImage::Mapping {
  void* addr = nullptr;
  size_t size = 0;
  ~Mapping() {
    if (addr != nullptr) munmap(addr, size);
  }
};

uint64_t WeightsImage::hash(std::span<const uint8_t> bytes) {
  uint64_t h = bytes.size();
  for (size_t at = 0; at < bytes.size(); at += kChunk) {
    h = mix(h, hash_chunk(bytes.data() + at, std::min(kChunk, bytes.size() - at)));
  }
  return h;
}

WeightsImage::WeightsImage(fs::path dir, const fs::path& source, std::span<const BufferPlan> buffers)
    : dir_(std::move(dir)), source_(fs::canonical(source)), plans_(buffers.begin(), buffers.end()) {
  struct stat st {};
  if (stat(source_.c_str(), &st) != 0) {
    throw fs::filesystem_error("stat", source_, std::error_code(errno, std::generic_category()));
  }
  std::string d = fmt::format("tessera weights image {}\n", kFormatVersion);
  d += fmt::format("source {}\n", source_.string());
  d += fmt::format("file size {} mtime {}.{:09} inode {} device {}\n", st.st_size, st.st_mtim.tv_sec,
                   st.st_mtim.tv_nsec, st.st_ino, st.st_dev);
  for (size_t i = 0; i < plans_.size(); ++i) {
    const BufferPlan& p = plans_[i];
    d += fmt::format("buffer {} {} {} bytes\n", i, p.type->name(), p.size);
    for (const auto& [t, offset] : p.tensors) {
      d += fmt::format("tensor {} {} {} {} {}x{}x{}x{}\n", i, offset, t->name, dtype_name(t->type),
                       t->ne[0], t->ne[1], t->ne[2], t->ne[3]);
    }
  }
  // The header comes first: magic, sizes, this text, and per buffer an "at"
  // and a "hash" line (under 64 bytes together).
  uint64_t at = round_up(24 + d.size() + plans_.size() * 64 + 64, kAlign);
  for (const BufferPlan& p : plans_) {
    offsets_.push_back(at);
    at = round_up(at + p.size, kAlign);
  }
  file_bytes_ = at;
  for (size_t i = 0; i < plans_.size(); ++i) d += fmt::format("at {} {}\n", i, offsets_[i]);
  description_ = std::move(d);
  const uint64_t key = hash({reinterpret_cast<const uint8_t*>(description_.data()), description_.size()});
  path_ = dir_ / (source_.stem().string() + "-" + hex(key) + kExtension);
}

WeightsImage::~WeightsImage() = default;

std::vector<std::unique_ptr<Buffer>> WeightsImage::map(std::string* why_not) {
  why_not->clear();
  const Fd fd(open(path_.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) {
    if (errno != ENOENT) *why_not = "cannot open: " + errno_text();
    return {};
  }
  struct stat st {};
  if (fstat(fd.get(), &st) != 0) {
    *why_not = "cannot stat: " + errno_text();
    return {};
  }
  const std::string text = read_header(fd.get(), static_cast<uint64_t>(st.st_size), why_not);
  if (text.empty()) return {};
  if (!text.starts_with(description_)) {
    *why_not = "its description differs from this model's";
    return {};
  }
  if (static_cast<uint64_t>(st.st_size) != file_bytes_) {
    *why_not = fmt::format("{} bytes, expected {}", st.st_size, file_bytes_);
    return {};
  }
  // Private and writable: placing a tensor may zero its padding (a copy of
  // the page); the file is never written. Read-only once placed.
  void* addr = mmap(nullptr, file_bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd.get(), 0);
  if (addr == MAP_FAILED) {
    *why_not = "cannot map: " + errno_text();
    return {};
  }
  auto mapping = std::make_shared<Mapping>();
  mapping->addr = addr;
  mapping->size = file_bytes_;
  if (text.substr(description_.size()) !=
      hash_lines(hash_regions(static_cast<const uint8_t*>(addr), offsets_, plans_, true))) {
    *why_not = "its bytes do not hash to what its header says";
    return {};
  }
  std::vector<std::unique_ptr<Buffer>> out;
  for (size_t i = 0; i < plans_.size(); ++i) {
    const BufferPlan& p = plans_[i];
    std::shared_ptr<void> keep(mapping, addr);  // shares the mapping's ownership
    auto b = p.type->wrap(static_cast<uint8_t*>(addr) + offsets_[i], p.size, std::move(keep));
    TESSERA_CHECK(b != nullptr, "buffer type {} cannot wrap host memory", p.type->name());
    b->set_usage(BufferUsage::kWeights);
    place_tensors(*b, p);
    out.push_back(std::move(b));
  }
  mprotect(addr, file_bytes_, PROT_READ);
  return out;
}

bool WeightsImage::write(std::span<const Buffer* const> buffers, uint64_t keep_free,
                         std::string* why_not, const std::function<void(uint64_t)>& progress) {
  why_not->clear();
  TESSERA_CHECK(buffers.size() == plans_.size(), "{} buffers for {} plans", buffers.size(),
                plans_.size());
  std::error_code ec;
  fs::create_directories(dir_, ec);
  if (ec) {
    *why_not = fmt::format("cannot create {}: {}", dir_.string(), ec.message());
    return false;
  }
  // Temporary files of processes that died while writing one.
  for (const auto& entry : fs::directory_iterator(dir_, ec)) {
    const std::string name = entry.path().filename().string();
    const size_t at = name.rfind(std::string(kExtension) + ".tmp.");
    if (at == std::string::npos) continue;
    const long pid = std::strtol(name.c_str() + at + std::strlen(kExtension) + 5, nullptr, 10);
    if (pid > 0 && kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) fs::remove(entry.path(), ec);
  }
  struct statvfs vfs {};
  if (statvfs(dir_.c_str(), &vfs) == 0) {
    const uint64_t free = static_cast<uint64_t>(vfs.f_bavail) * vfs.f_frsize;
    if (free < file_bytes_ + keep_free) {
      *why_not = fmt::format("{} MiB needed, {} MiB free on {} (keeping {} MiB free)",
                             file_bytes_ >> 20, free >> 20, dir_.string(), keep_free >> 20);
      return false;
    }
  }
  fs::path temp = path_;
  temp += fmt::format(".tmp.{}", getpid());
  bool written = false;
  {
    const Fd fd(open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644));
    if (fd.get() < 0) {
      *why_not = fmt::format("cannot create {}: {}", temp.string(), errno_text());
      return false;
    }
    written = write_file(fd.get(), buffers, why_not, progress);
  }
  if (written) {
    fs::rename(temp, path_, ec);
    if (ec) *why_not = fmt::format("cannot rename {}: {}", temp.string(), ec.message());
    written = !ec;
  }
  if (!written) {
    fs::remove(temp, ec);
    return false;
  }
  // Images of this path made by another format version or of another
  // version of the file: never used again. (Other placements of this file
  // stay: a pipeline stage's image beside another's.)
  const std::string path_line = "\nsource " + source_.string() + "\n";
  const std::string prefix = source_.stem().string() + "-";
  for (const auto& entry : fs::directory_iterator(dir_, ec)) {
    const std::string name = entry.path().filename().string();
    if (entry.path() == path_ || !name.starts_with(prefix) || !name.ends_with(kExtension)) continue;
    const std::string theirs = made_of(entry.path());
    if (theirs.find(path_line) != std::string::npos && !description_.starts_with(theirs + "\n")) {
      fs::remove(entry.path(), ec);
    }
  }
  return true;
}

bool WeightsImage::write_file(int fd, std::span<const Buffer* const> buffers, std::string* why_not,
                              const std::function<void(uint64_t)>& progress) {
  // Blocks reserved first: a full disk fails here, not after gigabytes.
  if (const int e = posix_fallocate(fd, 0, static_cast<off_t>(file_bytes_)); e != 0) {
    *why_not = fmt::format("cannot reserve {} MiB: {}", file_bytes_ >> 20, std::strerror(e));
    return false;
  }
  std::vector<uint64_t> sums;
  for (size_t i = 0; i < buffers.size(); ++i) {
    TESSERA_CHECK(buffers[i]->size() >= plans_[i].size, "buffer {} of {} bytes, planned {}", i,
                  buffers[i]->size(), plans_[i].size);
    const auto* base = static_cast<const uint8_t*>(buffers[i]->base());
    const uint64_t zero = 0;
    sums.push_back(hash_regions(base, std::span(&zero, 1), std::span(&plans_[i], 1), false).front());
    // 2 MiB writes at 2 MiB offsets: the page cache keeps them as 2 MiB
    // folios, which a later map faults in a few at a time (4 KiB pages, as
    // a shared mapping written in place gives, cost 10x more: bench/LOG.md).
    for (uint64_t at = 0; at < plans_[i].size; at += kAlign) {
      const size_t n = std::min<uint64_t>(kAlign, plans_[i].size - at);
      if (!write_all(fd, base + at, n, offsets_[i] + at)) {
        *why_not = "cannot write: " + errno_text();
        return false;
      }
      if (progress && (at / kAlign) % 16 == 15) progress(offsets_[i] + at + n);  // every 32 MiB
    }
  }
  const std::string header = header_bytes(description_ + hash_lines(sums));
  TESSERA_CHECK(header.size() <= offsets_.front(), "header of {} bytes", header.size());
  if (!write_all(fd, header.data(), header.size(), 0)) {
    *why_not = "cannot write: " + errno_text();
    return false;
  }
  return true;
}

void WeightsImage::discard() {
  std::error_code ec;
  fs::remove(path_, ec);
}

}  // namespace tessera
