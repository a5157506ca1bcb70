#include "text_stream.h"

#include <algorithm>
#include <utility>

namespace tessera::serving {
namespace {

// Bytes at the end of `s` that start a UTF-8 character not yet complete.
size_t incomplete_utf8_tail(const std::string& s) {
  for (size_t back = 1; back <= std::min<size_t>(4, s.size()); ++back) {
    const auto c = static_cast<unsigned char>(s[s.size() - back]);
    if ((c & 0xC0) == 0x80) continue;  // continuation byte: look further back
    const size_t need = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
    return need > back ? back : 0;
  }
  return 0;
}

}  // namespace

size_t partial_marker(std::string_view s, std::string_view marker) {
  for (size_t n = std::min(marker.size() - 1, s.size()); n > 0; --n) {
    if (s.substr(s.size() - n) == marker.substr(0, n)) return n;
  }
  return 0;
}

namespace {

// Longest suffix of `s` that is a proper prefix of some stop string.
size_t partial_stop_tail(const std::string& s, const std::vector<std::string>& stops) {
  size_t hold = 0;
  for (const std::string& stop : stops) {
    for (size_t n = std::min(stop.size() - 1, s.size()); n > hold; --n) {
      if (s.compare(s.size() - n, n, stop, 0, n) == 0) {
        hold = n;
        break;
      }
    }
  }
  return hold;
}

}  // namespace

TextStream::TextStream(std::vector<std::string> stops) : stops_(std::move(stops)) {
  std::erase_if(stops_, [](const std::string& s) { return s.empty(); });
  for (const std::string& s : stops_) reach_ = std::max(reach_, s.size() - 1);
}

bool TextStream::add(std::string_view piece) {
  pending_ += piece;
  if (stops_.empty()) return false;
  // A stop string may begin in the bytes already sent that are not part of
  // any possible start (never, by the hold-back) or in the pending text.
  const std::string window = sent_tail_ + pending_;
  size_t cut = std::string::npos;
  for (const std::string& stop : stops_) {
    if (const size_t at = window.find(stop); at < cut) cut = at, stopped_by_ = stop;
  }
  if (cut == std::string::npos) return false;
  const size_t from = sent_tail_.size();
  pending_ = cut > from ? window.substr(from, cut - from) : std::string();
  return true;
}

std::string TextStream::take_ready() {
  const size_t hold = std::max(partial_stop_tail(pending_, stops_), incomplete_utf8_tail(pending_));
  std::string out = pending_.substr(0, pending_.size() - hold);
  pending_.erase(0, pending_.size() - hold);
  if (reach_ > 0 && !out.empty()) {
    sent_tail_ += out;
    if (sent_tail_.size() > reach_) sent_tail_.erase(0, sent_tail_.size() - reach_);
  }
  return out;
}

std::string TextStream::take_rest() { return std::exchange(pending_, std::string()); }

}  // namespace tessera::serving
