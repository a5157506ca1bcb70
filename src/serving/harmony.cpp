#include "tessera/serving/harmony.h"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "text_stream.h"

namespace tessera::serving {
namespace {

constexpr std::string_view kStart = "<|start|>assistant";
constexpr std::string_view kMessage = "<|message|>";
constexpr std::string_view kEnd = "<|end|>";
constexpr std::string_view kChannel = "<|channel|>";
constexpr std::string_view kTo = " to=";

// One of a or b, each a prefix of the other: what the start of a header may be.
bool agrees(std::string_view s, std::string_view marker) {
  return s.size() <= marker.size() ? marker.starts_with(s) : s.starts_with(marker);
}

// The word after `at` in h: up to a space, '<' or the end.
std::string_view word_at(std::string_view h, size_t at) {
  const size_t end = h.find_first_of(" <", at);
  return h.substr(at, end == std::string_view::npos ? std::string_view::npos : end - at);
}

}  // namespace

HarmonyParser::HarmonyParser(bool extract_reasoning, std::vector<std::string> tool_names)
    : extract_(extract_reasoning), names_(std::move(tool_names)) {}

HarmonyParser::Parts HarmonyParser::feed(std::string_view text) {
  held_ += text;
  Parts out;
  run(out, false);
  return out;
}

HarmonyParser::Parts HarmonyParser::finish() {
  Parts out;
  run(out, true);
  return out;
}

// The header just read (header_) decides what its body is.
void HarmonyParser::start_body(Parts& out) {
  const std::string_view h = header_;
  std::string_view recipient;
  for (size_t at = h.find(kTo); at != std::string_view::npos; at = h.find(kTo, at + 1)) {
    const std::string_view r = word_at(h, at + kTo.size());
    if (r != "assistant") {  // "to=assistant": gpt-oss-20b's stray prefix
      recipient = r;
      break;
    }
  }
  std::string_view channel;
  if (const size_t at = h.rfind(kChannel); at != std::string_view::npos) {
    channel = word_at(h, at + kChannel.size());
  }
  final_ = false;
  if (recipient.starts_with("functions.")) {
    call_name_ = std::string(recipient.substr(10));
    const bool declared = std::find(names_.begin(), names_.end(), call_name_) != names_.end();
    state_ = declared ? State::kCall : State::kSkip;
    body_.clear();
  } else if (!recipient.empty()) {
    state_ = State::kSkip;
  } else if (channel == "analysis") {
    state_ = State::kReasoning;
    if (!extract_) out.content += header_ + std::string(kMessage);
  } else if (channel == "final" || channel == "commentary") {
    state_ = State::kContent;
    final_ = channel == "final";
  } else {  // no channel this parser knows: the rest is text
    out.content += header_ + std::string(kMessage);
    state_ = State::kPlain;
  }
}

void HarmonyParser::end_call(Parts& out) {
  std::string_view args = body_;
  while (!args.empty() && (args.back() == ' ' || args.back() == '\n' || args.back() == '\r' ||
                           args.back() == '\t')) {
    args.remove_suffix(1);
  }
  if (nlohmann::ordered_json::accept(args)) {
    calls_.push_back({new_tool_call_id(ToolFormat::kHarmony), call_name_, std::string(args)});
  } else {
    out.content += header_ + std::string(kMessage) + body_;
  }
  body_.clear();
}

void HarmonyParser::run(Parts& out, bool last) {
  for (;;) {
    switch (state_) {
      case State::kHeader: {
        header_ += held_;
        held_.clear();
        if (const size_t at = header_.find(kMessage); at != std::string::npos) {
          held_ = header_.substr(at + kMessage.size());
          header_.resize(at);
          start_body(out);
          continue;
        }
        const bool plausible = !first_ || agrees(header_, kChannel) || agrees(header_, kTo);
        if (!plausible || header_.size() > kMaxHeader) {
          out.content += header_;
          header_.clear();
          state_ = State::kPlain;
          continue;
        }
        return;  // a header cut off at the end says nothing
      }
      case State::kBetween:
        if (held_.starts_with(kStart)) {
          held_.erase(0, kStart.size());
          header_.clear();
          first_ = false;
          state_ = State::kHeader;
          continue;
        }
        if (kStart.starts_with(held_)) return;  // more to come, or the end
        state_ = State::kPlain;
        continue;
      case State::kReasoning:
      case State::kContent:
      case State::kSkip:
      case State::kCall: {
        const size_t at = held_.find(kEnd);
        const size_t n = at != std::string::npos ? at
                         : last                  ? held_.size()
                                                 : held_.size() - partial_marker(held_, kEnd);
        const std::string_view chunk(held_.data(), n);
        if (state_ == State::kReasoning) {
          (extract_ ? out.reasoning : out.content) += chunk;
        } else if (state_ == State::kContent) {
          out.content += chunk;
        } else if (state_ == State::kCall) {
          body_ += chunk;
        }
        if (at == std::string::npos) {
          held_.erase(0, n);
          if (last && state_ == State::kCall) {
            end_call(out);
            state_ = State::kIgnore;
          }
          return;
        }
        held_.erase(0, at + kEnd.size());
        if (state_ == State::kReasoning && !extract_) out.content += kEnd;
        if (state_ == State::kCall) {
          end_call(out);
          state_ = State::kIgnore;
        } else {
          state_ = state_ == State::kContent && final_ ? State::kIgnore : State::kBetween;
        }
        continue;
      }
      case State::kIgnore:
        held_.clear();
        return;
      case State::kPlain:
        out.content += held_;
        held_.clear();
        return;
    }
  }
}

HarmonyOutput parse_harmony(std::string_view text, bool extract_reasoning,
                            std::vector<std::string> tool_names) {
  HarmonyParser p(extract_reasoning, std::move(tool_names));
  HarmonyParser::Parts a = p.feed(text);
  HarmonyParser::Parts b = p.finish();
  return {a.reasoning + b.reasoning, a.content + b.content, p.take_calls()};
}

}  // namespace tessera::serving
