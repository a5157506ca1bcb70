// Splits a model's output into its thinking (between <think> and </think>)
// and its answer as the text arrives: a marker cut between two pieces is
// held back until the next piece decides. Thinking that never closes stays
// thinking; the answer's leading whitespace after </think> is dropped.
#pragma once

#include <string>
#include <string_view>

namespace tessera::serving {

class ReasoningSplitter {
 public:
  // `open`: the prompt already opened the thinking (its render ends with <think>).
  explicit ReasoningSplitter(bool open = false) : state_(open ? State::kThinking : State::kStart) {}

  struct Parts {
    std::string reasoning, content;
  };
  Parts add(std::string_view text);
  Parts finish();  // what is held back

 private:
  enum class State { kStart, kThinking, kAnswerStart, kAnswer };
  State state_;
  std::string held_;
};

}  // namespace tessera::serving
