#include "reasoning.h"

#include <algorithm>

#include "text_stream.h"

namespace tessera::serving {
namespace {

constexpr std::string_view kOpen = "<think>";
constexpr std::string_view kClose = "</think>";

bool is_space(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

}  // namespace

ReasoningSplitter::Parts ReasoningSplitter::add(std::string_view text) {
  held_ += text;
  Parts out;
  while (true) {
    switch (state_) {
      case State::kStart: {  // optional whitespace, then <think> or the answer
        const size_t first = held_.find_first_not_of(" \n\r\t");
        if (first == std::string::npos) return out;
        const std::string_view rest = std::string_view(held_).substr(first);
        if (rest.starts_with(kOpen)) {
          held_.erase(0, first + kOpen.size());
          state_ = State::kThinking;
          continue;
        }
        if (kOpen.starts_with(rest)) return out;  // may still become <think>
        state_ = State::kAnswer;
        continue;
      }
      case State::kThinking: {
        if (const size_t at = held_.find(kClose); at != std::string::npos) {
          out.reasoning += held_.substr(0, at);
          held_.erase(0, at + kClose.size());
          state_ = State::kAnswerStart;
          continue;
        }
        const size_t keep = partial_marker(held_, kClose);
        out.reasoning += held_.substr(0, held_.size() - keep);
        held_.erase(0, held_.size() - keep);
        return out;
      }
      case State::kAnswerStart: {
        const size_t first = std::find_if_not(held_.begin(), held_.end(), is_space) - held_.begin();
        held_.erase(0, first);
        if (held_.empty()) return out;
        state_ = State::kAnswer;
        continue;
      }
      case State::kAnswer:
        out.content += held_;
        held_.clear();
        return out;
    }
  }
}

ReasoningSplitter::Parts ReasoningSplitter::finish() {
  Parts out;
  if (state_ == State::kThinking) out.reasoning = std::move(held_);
  else if (state_ != State::kAnswerStart) out.content = std::move(held_);
  held_.clear();
  return out;
}

}  // namespace tessera::serving
