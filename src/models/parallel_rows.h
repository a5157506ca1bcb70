// Runs fn(begin, end) over [0, n) rows split into contiguous chunks on
// `threads` std::threads (the caller is one of them). For file tools (synth,
// quantize) that run once per tensor, not per token: the engine's thread pool
// is the CPU device's. Rethrows the first exception a thread threw.
#pragma once

#include <algorithm>
#include <cstdint>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace tessera {

inline int default_tool_threads(int threads) {
  if (threads > 0) return threads;
  const unsigned hw = std::thread::hardware_concurrency();
  return hw > 0 ? static_cast<int>(hw) : 1;
}

template <class Fn>
void parallel_rows(int64_t n, int threads, const Fn& fn) {
  const int nth = static_cast<int>(std::clamp<int64_t>(threads, 1, std::max<int64_t>(n, 1)));
  std::exception_ptr error;
  std::mutex error_mutex;
  auto part = [&](int ith) {
    const int64_t per = (n + nth - 1) / nth;
    const int64_t b = std::min(n, per * ith), e = std::min(n, b + per);
    try {
      if (b < e) fn(b, e);
    } catch (...) {
      std::lock_guard lock(error_mutex);
      if (!error) error = std::current_exception();
    }
  };
  std::vector<std::jthread> workers;
  for (int i = 1; i < nth; ++i) workers.emplace_back(part, i);
  part(0);
  workers.clear();  // joins
  if (error) std::rethrow_exception(error);
}

}  // namespace tessera
