// Built-in chat templates, written in the same Jinja the interpreter runs:
// for models whose file has no template, or `--chat-template NAME`.
#include <array>

#include <fmt/format.h>

#include "tessera/text/chat_template.h"

namespace tessera {
namespace {

struct Builtin {
  std::string_view name;
  std::string_view source;
};

// ChatML (Qwen, SmolLM, many fine-tunes): llama.cpp's fallback format.
constexpr std::string_view kChatml = R"tmpl(
{%- for message in messages -%}
  {{- '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n' -}}
{%- endfor -%}
{%- if add_generation_prompt -%}
  {{- '<|im_start|>assistant\n' -}}
{%- endif -%}
)tmpl";

// Llama 2 chat (meta-llama/Llama-2-7b-chat-hf).
constexpr std::string_view kLlama2 = R"tmpl(
{%- if messages[0]['role'] == 'system' -%}
  {%- set loop_messages = messages[1:] -%}
  {%- set system_message = messages[0]['content'] -%}
{%- else -%}
  {%- set loop_messages = messages -%}
  {%- set system_message = false -%}
{%- endif -%}
{%- for message in loop_messages -%}
  {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}
    {{- raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') -}}
  {%- endif -%}
  {%- if loop.index0 == 0 and system_message != false -%}
    {%- set content = '<<SYS>>\n' + system_message + '\n<</SYS>>\n\n' + message['content'] -%}
  {%- else -%}
    {%- set content = message['content'] -%}
  {%- endif -%}
  {%- if message['role'] == 'user' -%}
    {{- bos_token + '[INST] ' + content.strip() + ' [/INST]' -}}
  {%- elif message['role'] == 'assistant' -%}
    {{- ' ' + content.strip() + ' ' + eos_token -}}
  {%- endif -%}
{%- endfor -%}
)tmpl";

// Llama 3 instruct (meta-llama/Meta-Llama-3-8B-Instruct).
constexpr std::string_view kLlama3 = R"tmpl(
{%- for message in messages -%}
  {%- set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n' + message['content'] | trim + '<|eot_id|>' -%}
  {%- if loop.index0 == 0 -%}
    {%- set content = bos_token + content -%}
  {%- endif -%}
  {{- content -}}
{%- endfor -%}
{%- if add_generation_prompt -%}
  {{- '<|start_header_id|>assistant<|end_header_id|>\n\n' -}}
{%- endif -%}
)tmpl";

// Gemma instruct: no system role, so a system message opens the first user turn.
constexpr std::string_view kGemma = R"tmpl(
{{- bos_token -}}
{%- if messages[0]['role'] == 'system' -%}
  {%- set first_user_prefix = messages[0]['content'] + '\n\n' -%}
  {%- set loop_messages = messages[1:] -%}
{%- else -%}
  {%- set first_user_prefix = '' -%}
  {%- set loop_messages = messages -%}
{%- endif -%}
{%- for message in loop_messages -%}
  {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}
    {{- raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') -}}
  {%- endif -%}
  {%- set role = 'model' if message['role'] == 'assistant' else message['role'] -%}
  {{- '<start_of_turn>' + role + '\n' + (first_user_prefix if loop.first else '') -}}
  {{- message['content'] | trim -}}
  {{- '<end_of_turn>\n' -}}
{%- endfor -%}
{%- if add_generation_prompt -%}
  {{- '<start_of_turn>model\n' -}}
{%- endif -%}
)tmpl";

// Phi-3 instruct (microsoft/Phi-3-mini-4k-instruct).
constexpr std::string_view kPhi3 = R"tmpl(
{%- for message in messages -%}
  {%- if message['role'] in ['system', 'user', 'assistant'] -%}
    {{- '<|' + message['role'] + '|>\n' + message['content'] + '<|end|>\n' -}}
  {%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}
  {{- '<|assistant|>\n' -}}
{%- else -%}
  {{- eos_token -}}
{%- endif -%}
)tmpl";

// Mistral instruct (v1 layout: " [INST] ... [/INST]"), system text before the first user turn.
constexpr std::string_view kMistral = R"tmpl(
{%- if messages[0]['role'] == 'system' -%}
  {%- set system_message = messages[0]['content'] -%}
  {%- set loop_messages = messages[1:] -%}
{%- else -%}
  {%- set loop_messages = messages -%}
{%- endif -%}
{{- bos_token -}}
{%- for message in loop_messages -%}
  {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}
    {{- raise_exception('After the optional system message, conversation roles must alternate user/assistant/user/assistant/...') -}}
  {%- endif -%}
  {%- if message['role'] == 'user' -%}
    {%- if loop.first and system_message is defined -%}
      {{- ' [INST] ' + system_message + '\n\n' + message['content'] + ' [/INST]' -}}
    {%- else -%}
      {{- ' [INST] ' + message['content'] + ' [/INST]' -}}
    {%- endif -%}
  {%- elif message['role'] == 'assistant' -%}
    {{- ' ' + message['content'] + eos_token -}}
  {%- endif -%}
{%- endfor -%}
)tmpl";

constexpr std::array<Builtin, 6> kBuiltins = {{
    {"chatml", kChatml},
    {"llama2", kLlama2},
    {"llama3", kLlama3},
    {"gemma", kGemma},
    {"phi3", kPhi3},
    {"mistral", kMistral},
}};

constexpr std::array<std::string_view, kBuiltins.size()> kNames = [] {
  std::array<std::string_view, kBuiltins.size()> names{};
  for (size_t i = 0; i < kBuiltins.size(); ++i) names[i] = kBuiltins[i].name;
  return names;
}();

}  // namespace

ChatTemplate builtin_chat_template(std::string_view name) {
  for (const Builtin& b : kBuiltins) {
    if (b.name == name) return ChatTemplate::parse(b.source, fmt::format("builtin {}", b.name));
  }
  fail(ErrorCategory::kInvalidArgument, "[chat template] found '{}', expected one of {}", name,
       fmt::join(kNames, ", "));
}

std::span<const std::string_view> builtin_chat_template_names() {
  return kNames;
}

}  // namespace tessera
