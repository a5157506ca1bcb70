// A weights image: a model's host-memory weight buffers (the CPU's panels,
// kernels' own layout) written to a file on a first load and mapped on later
// loads, so that a second start neither copies nor repacks (docs/loading.md).
//
// File: a header, then each buffer's bytes at a 2 MiB-aligned offset.
// The header is a text description of what the image holds (format version;
// the model file's path, size, modification time, inode and device; every
// buffer's type, size and offset; every tensor's buffer, offset, name, type
// and shape), a hash of the bytes of each buffer, and a hash of the header.
// The image's name is the model file's stem and a hash of that description,
// so a changed file, build layout or placement names another image.
//
// Never trusted blindly: a mapped image must match the description exactly,
// have the size it says, and hash to what it says (every byte, on several
// threads, which also faults the pages in before the first token needs them);
// the model then compares rows of each tensor with the file (Model).
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "tessera/runtime/buffer.h"

namespace tessera {

class WeightsImage {
 public:
  static constexpr uint32_t kFormatVersion = 2;  // 2: the eight-lane hash
  static constexpr const char* kExtension = ".tsw";

  // The image in `dir` of `buffers` (their tensors not placed yet) of the
  // model file `source`. Throws std::filesystem::filesystem_error when
  // `source` cannot be looked at.
  WeightsImage(std::filesystem::path dir, const std::filesystem::path& source,
               std::span<const BufferPlan> buffers);
  ~WeightsImage();
  WeightsImage(const WeightsImage&) = delete;
  WeightsImage& operator=(const WeightsImage&) = delete;

  const std::filesystem::path& path() const { return path_; }
  uint64_t bytes() const { return file_bytes_; }

  // When the image exists and checks out: one buffer per plan over the
  // mapped file, read-only, its tensors placed. Otherwise empty, and
  // *why_not says why (empty when there is simply no image yet).
  std::vector<std::unique_ptr<Buffer>> map(std::string* why_not);

  // Writes the image of `buffers` (one per plan, tensors in place, their
  // bytes at base()): a temporary file of the whole size (its disk space
  // reserved first), the buffers in 2 MiB writes (page-cache pages that a
  // later map faults in cheaply), the header, then renamed to path(); the
  // images of an earlier version of the model file (or another format) go. False, with *why_not,
  // when it cannot (the disk would keep less than `keep_free` bytes free, a
  // directory that cannot be written).
  // `progress`, when set, gets the bytes written so far.
  bool write(std::span<const Buffer* const> buffers, uint64_t keep_free, std::string* why_not,
             const std::function<void(uint64_t)>& progress = {});

  // Removes the image file (one that failed the model's checks).
  void discard();

  // Hash of `bytes`: the same for the same bytes on any thread count.
  static uint64_t hash(std::span<const uint8_t> bytes);

 private:
  struct Mapping;
  bool write_file(int fd, std::span<const Buffer* const> buffers, std::string* why_not,
                  const std::function<void(uint64_t)>& progress);

  std::filesystem::path dir_;
  std::filesystem::path source_;
  std::vector<BufferPlan> plans_;
  std::vector<uint64_t> offsets_;  // each buffer's offset in the file
  uint64_t file_bytes_ = 0;
  std::string description_;
  std::filesystem::path path_;
};

}  // namespace tessera
