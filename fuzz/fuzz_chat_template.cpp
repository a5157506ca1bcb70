// libFuzzer target for chat templates: the input is a template's source.
// ChatTemplate::parse may refuse it with tessera::Error; a template it
// accepts is rendered over a conversation with tools and tool calls, where
// it may again fail only with tessera::Error, within small limits (steps,
// not the clock, so runs are reproducible).
#include <cstdint>
#include <string_view>

#include <nlohmann/json.hpp>

#include "tessera/core/error.h"
#include "tessera/text/chat_template.h"

namespace {

using nlohmann::ordered_json;

const ordered_json& conversation() {
  static const ordered_json messages = ordered_json::parse(R"([
    {"role": "system", "content": "You can call tools."},
    {"role": "user", "content": "Weather in Paris? \u00dcn\u00efc\u00f6d\u00e9"},
    {"role": "assistant", "content": "", "tool_calls": [{"id": "call12345", "type": "function",
      "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
    {"role": "tool", "tool_call_id": "call12345", "content": "{\"temp\": 21}"},
    {"role": "user", "content": "Thanks"}
  ])");
  return messages;
}

tessera::ChatTemplateInputs inputs() {
  tessera::ChatTemplateInputs in;
  in.bos_token = "<s>";
  in.eos_token = "</s>";
  in.tools = ordered_json::parse(R"([{"type": "function", "function": {"name": "get_weather",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}])");
  in.extra_context = {{"enable_thinking", true}};
  in.limits.max_steps = 100000;
  in.limits.max_loop_iterations = 10000;
  in.limits.max_output_bytes = 1u << 16;
  in.limits.max_list_items = 1u << 14;
  in.limits.max_time = std::chrono::milliseconds(0);
  return in;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const tessera::ChatTemplateInputs in = inputs();
  const std::string_view source(reinterpret_cast<const char*>(data), size);
  try {
    const tessera::ChatTemplate tmpl = tessera::ChatTemplate::parse(source, "fuzz", in.limits);
    (void)tmpl.apply(conversation(), in);
  } catch (const tessera::Error&) {
    // refused with a message: the expected outcome for most inputs
  }
  return 0;
}
