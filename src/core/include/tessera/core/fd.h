// A file descriptor closed on scope exit, and whole-range positioned I/O on
// one (pread / pwrite until every byte moved).
#pragma once

#include <sys/types.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>

namespace tessera {

class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  int get() const { return fd_; }

 private:
  int fd_;
};

namespace detail {
// Calls io(bytes done, bytes left, file offset) until n bytes moved; false
// when a call fails or moves nothing (errno says which).
template <class Io>
bool io_all(size_t n, uint64_t offset, Io io) {
  for (size_t done = 0; done < n;) {
    const ssize_t moved = io(done, n - done, static_cast<off_t>(offset + done));
    if (moved <= 0) return false;
    done += static_cast<size_t>(moved);
  }
  return true;
}
}  // namespace detail

// n bytes at `offset` of fd into dst; false on an error or the file's end.
inline bool read_all(int fd, void* dst, size_t n, uint64_t offset) {
  return detail::io_all(n, offset, [&](size_t done, size_t left, off_t at) {
    return ::pread(fd, static_cast<uint8_t*>(dst) + done, left, at);
  });
}

// n bytes of src to `offset` of fd; false on an error.
inline bool write_all(int fd, const void* src, size_t n, uint64_t offset) {
  return detail::io_all(n, offset, [&](size_t done, size_t left, off_t at) {
    return ::pwrite(fd, static_cast<const uint8_t*>(src) + done, left, at);
  });
}

}  // namespace tessera
