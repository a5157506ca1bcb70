// The text of one request on its way out: token pieces in, text that is
// certain out. A stop string ends the text where it starts, even when it
// spans pieces; the tail that may start one, and an incomplete UTF-8
// character, wait for the next piece.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace tessera::serving {

// Length of the longest end of `s` that is a proper beginning of `marker`
// (not empty): what must wait for the next piece to say whether the marker
// comes.
size_t partial_marker(std::string_view s, std::string_view marker);

class TextStream {
 public:
  explicit TextStream(std::vector<std::string> stops = {});

  // Appends a piece. True when a stop string completed: the text is then
  // cut before it and nothing more should be added.
  bool add(std::string_view piece);
  // The stop string that ended the text (the earliest in it), once add() said so.
  const std::string& stopped_by() const { return stopped_by_; }
  // The text that can be sent now (held back: a possible stop-string start,
  // an incomplete UTF-8 character).
  std::string take_ready();
  // Everything not sent yet, held-back bytes included (at the end).
  std::string take_rest();

 private:
  std::vector<std::string> stops_;
  std::string stopped_by_;
  size_t reach_ = 0;     // longest stop string less one byte
  std::string pending_;  // not sent yet
  std::string sent_tail_;  // the last reach_ bytes sent, where a stop may begin
};

}  // namespace tessera::serving
