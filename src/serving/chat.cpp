#include "tessera/serving/chat.h"

#include <fmt/format.h>

#include "tessera/core/error.h"
#include "tessera/gguf/gguf.h"
#include "tessera/text/chat_template.h"

namespace tessera::serving {
namespace {

// The messages as templates expect them: content a string. OpenAI's shapes
// are accepted: content as an array of text parts (joined), null content
// (an assistant turn with tool_calls), name fields (kept).
nlohmann::ordered_json normalize(const nlohmann::ordered_json& messages) {
  if (!messages.is_array() || messages.empty()) throw ChatError("'messages' must be a non-empty array");
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  for (const nlohmann::ordered_json& m : messages) {
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string()) {
      throw ChatError("each message must be an object with a string 'role'");
    }
    nlohmann::ordered_json msg = m;
    const auto c = m.find("content");
    if (c == m.end() || c->is_null()) {
      msg["content"] = "";
    } else if (c->is_array()) {
      std::string text;
      for (const nlohmann::ordered_json& part : *c) {
        const std::string type = part.is_object() ? part.value("type", "") : "";
        if (type == "text" && part.contains("text") && part["text"].is_string()) {
          text += part["text"].get<std::string>();
        } else if (type == "image_url" || type == "input_image" || type == "input_audio") {
          throw ChatError(fmt::format("a '{}' content part needs a vision or audio model; this server "
                                      "takes text only", type));
        } else {
          throw ChatError("a content part must be {\"type\": \"text\", \"text\": \"...\"}");
        }
      }
      msg["content"] = std::move(text);
    } else if (!c->is_string()) {
      throw ChatError("a message's 'content' must be a string, an array of parts or null");
    }
    out.push_back(std::move(msg));
  }
  return out;
}

// Where each message's content sits in the render, in order: those bytes
// are the client's text, never control tokens.
std::vector<TextRange> content_ranges(const std::string& text, const nlohmann::ordered_json& messages) {
  std::vector<TextRange> ranges;
  size_t from = 0;
  for (const nlohmann::ordered_json& m : messages) {
    if (!m.contains("content") || !m["content"].is_string()) continue;
    const std::string& content = m["content"].get_ref<const std::string&>();
    if (content.empty()) continue;
    size_t at = text.find(content, from);
    size_t size = content.size();
    if (at == std::string::npos) {  // templates often trim the content
      const size_t b = content.find_first_not_of(" \t\n\r");
      const size_t e = content.find_last_not_of(" \t\n\r");
      if (b == std::string::npos) continue;
      at = text.find(std::string_view(content).substr(b, e + 1 - b), from);
      size = e + 1 - b;
    }
    if (at == std::string::npos) continue;
    ranges.push_back({at, size});
    from = at + size;
  }
  return ranges;
}

// gpt-oss's template refuses a message whose content holds channel tags; as
// llama.cpp does, that check is dropped, so a client can send back a reply
// it got with reasoning_format none.
std::string harmony_source(std::string source) {
  constexpr std::string_view kCheck =
      "{%- if \"<|channel|>analysis<|message|>\" in message.content or "
      "\"<|channel|>final<|message|>\" in message.content %}";
  if (const size_t at = source.find(kCheck); at != std::string::npos) {
    source.replace(at, kCheck.size(), "{%- if false %}");
  }
  return source;
}

// Messages and tools as gpt-oss's template reads them: an assistant's
// reasoning_content is its `thinking` (and its content goes when it calls
// tools: the template takes one or the other); tools have a description
// and parameters.
void prepare_harmony(nlohmann::ordered_json& messages) {
  for (nlohmann::ordered_json& m : messages) {
    if (!m.is_object() || m.value("role", "") != "assistant") continue;
    if (const auto r = m.find("reasoning_content"); r != m.end() && r->is_string()) {
      m["thinking"] = *r;
      m.erase("reasoning_content");
      if (const auto c = m.find("tool_calls"); c != m.end() && c->is_array() && !c->empty()) {
        m.erase("content");
      }
    }
  }
}

nlohmann::ordered_json harmony_tools(const nlohmann::ordered_json& tools) {
  nlohmann::ordered_json out = tools;
  for (nlohmann::ordered_json& t : out) {
    if (!t.is_object() || !t.contains("function") || !t["function"].is_object()) continue;
    nlohmann::ordered_json& fn = t["function"];
    if (!fn.contains("description") || fn["description"].is_null()) fn["description"] = "";
    if (!fn.contains("parameters") || fn["parameters"].is_null()) fn["parameters"] = nlohmann::ordered_json::object();
  }
  return out;
}

}  // namespace

std::string ChatRenderer::builtin_names() {
  std::string s;
  for (std::string_view n : builtin_chat_template_names()) s += (s.empty() ? "" : ", ") + std::string(n);
  return s;
}

ChatRenderer::ChatRenderer(const gguf::File& file, const Tokenizer& tokenizer,
                           const std::string& name) {
  if (name.find("{{") != std::string::npos || name.find("{%") != std::string::npos) {
    template_ = std::make_shared<ChatTemplate>(ChatTemplate::parse(harmony_source(name), "chat_template"));
  } else if (!name.empty()) {
    template_ = std::make_shared<ChatTemplate>(builtin_chat_template(name));
  } else if (std::optional<std::string> source = gguf_chat_template(file)) {
    template_ = std::make_shared<ChatTemplate>(ChatTemplate::parse(harmony_source(*source), file.name()));
  } else {
    template_ = std::make_shared<ChatTemplate>(builtin_chat_template("chatml"));
  }
  auto piece = [&](TokenId id) {
    return id >= 0 && static_cast<size_t>(id) < tokenizer.n_vocab()
               ? std::string(tokenizer.token_text(id))
               : std::string();
  };
  bos_ = piece(tokenizer.bos());
  eos_ = piece(tokenizer.eos());
  tools_ = template_tools(template_->source());
}

nlohmann::ordered_json ChatRenderer::prepare(const nlohmann::ordered_json& messages,
                                             const nlohmann::ordered_json& tools) const {
  if (!tools.is_null() && !tools.is_array()) throw ChatError("'tools' must be an array");
  nlohmann::ordered_json out = normalize(tool_messages(normalize(messages), tools, tools_));
  if (tools_.format == ToolFormat::kHarmony && out.is_array()) prepare_harmony(out);
  return out;
}

std::vector<TokenId> ChatRenderer::tokenize(const nlohmann::ordered_json& messages, bool add_generation_prompt,
                                           const Tokenizer& tokenizer, const nlohmann::json& kwargs,
                                           const nlohmann::ordered_json& tools) const {
  const nlohmann::ordered_json prepared = prepare(messages, tools);
  const std::string text = apply(prepared, add_generation_prompt, kwargs, tools);
  // BOS is the tokenizer's to add (the render has none, as llama.cpp does);
  // the template's own markers are special tokens, the messages' text never.
  return tokenizer.tokenize(text, true, true, content_ranges(text, prepared));
}

std::string ChatRenderer::render(const nlohmann::ordered_json& messages, bool add_generation_prompt,
                                 const nlohmann::json& kwargs, const nlohmann::ordered_json& tools) const {
  return apply(prepare(messages, tools), add_generation_prompt, kwargs, tools);
}

std::string ChatRenderer::apply(const nlohmann::ordered_json& messages, bool add_generation_prompt,
                                const nlohmann::json& kwargs, const nlohmann::ordered_json& tools) const {
  ChatTemplateInputs in;
  in.add_generation_prompt = add_generation_prompt;
  in.bos_token = bos_;
  in.eos_token = eos_;
  // A template that renders tools gets them; one that does not has them
  // in the system message already.
  if (tools_.prints_tools && tools.is_array() && !tools.empty()) {
    in.tools = tools_.format == ToolFormat::kHarmony ? harmony_tools(tools) : tools;
  }
  in.extra_context = {{"enable_thinking", true}};  // as llama.cpp passes it
  if (!kwargs.is_object()) throw ChatError("chat_template_kwargs must be an object");
  for (const auto& [k, v] : kwargs.items()) in.extra_context[k] = v;
  try {
    // The tokenizer adds BOS itself when the model asks for it.
    return template_->apply(messages, in, {.strip_leading_bos = true});
  } catch (const ChatTemplateError& e) {
    throw ChatError(e.raised_message() ? *e.raised_message() : std::string(e.what()));
  } catch (const std::exception& e) {
    throw ChatError(fmt::format("the chat template failed on these messages: {}", e.what()));
  }
}

bool prompt_opens_thinking(const std::vector<TokenId>& prompt, const Tokenizer& tokenizer) {
  std::string tail;
  for (size_t i = prompt.size() - std::min<size_t>(prompt.size(), 4); i < prompt.size(); ++i) {
    tail += tokenizer.token_to_piece(prompt[i], /*render_special=*/true);
  }
  while (!tail.empty() && (tail.back() == '\n' || tail.back() == ' ')) tail.pop_back();
  return tail.ends_with("<think>");
}

}  // namespace tessera::serving
