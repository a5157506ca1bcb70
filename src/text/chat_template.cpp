#include "tessera/text/chat_template.h"

#include <fmt/format.h>

#include "jinja/interpreter.h"
#include "jinja/parser.h"
#include "tessera/gguf/gguf.h"

namespace tessera {

struct ChatTemplate::Impl {
  std::string name;
  std::string source;
  jinja::Template tmpl;
  ChatTemplateCaps caps;
};

namespace {

[[noreturn]] void fail_input(std::string_view name, std::string_view message) {
  throw ChatTemplateError(ErrorCategory::kInvalidArgument, fmt::format("[{}] {}", name, message), 0,
                          0);
}

template <class Json>
std::string render_impl(const ChatTemplate& self, const jinja::Template& tmpl, const Json& messages,
                        const ChatTemplateInputs& inputs) {
  if (!messages.is_array()) {
    fail_input(self.name(), fmt::format("found messages as JSON {}, expected a list of messages",
                                        messages.type_name()));
  }
  if (!inputs.extra_context.is_null() && !inputs.extra_context.is_object()) {
    fail_input(self.name(), fmt::format("found extra_context as JSON {}, expected an object",
                                        inputs.extra_context.type_name()));
  }
  std::vector<std::pair<std::string, jinja::Value>> vars;
  try {
    if (inputs.extra_context.is_object()) {
      for (const auto& [key, value] : inputs.extra_context.items()) {
        if (key == "messages" || key == "add_generation_prompt" || key == "bos_token" ||
            key == "eos_token" || key == "tools") {
          fail_input(self.name(), fmt::format("found '{}' in extra_context, expected it as its own "
                                              "input",
                                              key));
        }
        vars.emplace_back(key, jinja::from_json(value));
      }
    }
    vars.emplace_back("messages", jinja::from_json(messages));
    if (!inputs.tools.is_null()) vars.emplace_back("tools", jinja::from_json(inputs.tools));
  } catch (const jinja::Failure& f) {
    fail_input(self.name(), f.what());
  }
  vars.emplace_back("add_generation_prompt", jinja::Value(inputs.add_generation_prompt));
  vars.emplace_back("bos_token", jinja::Value(inputs.bos_token));
  vars.emplace_back("eos_token", jinja::Value(inputs.eos_token));
  jinja::Interpreter interpreter(tmpl, inputs.limits,
                                 inputs.now.value_or(std::chrono::system_clock::now()));
  return interpreter.render(std::move(vars));
}

// llama.cpp's probe: does a system message's content reach the output?
ChatTemplateCaps detect_caps(const ChatTemplate& t) {
  constexpr std::string_view kNeedle = "<System Needle>";
  ChatTemplateCaps caps;
  const nlohmann::ordered_json probe = nlohmann::ordered_json::array({
      {{"role", "system"}, {"content", kNeedle}},
      {{"role", "user"}, {"content", "Hey"}},
  });
  ChatTemplateInputs inputs;
  inputs.add_generation_prompt = false;
  try {
    caps.supports_system_role = t.render(probe, inputs).find(kNeedle) != std::string::npos;
  } catch (const Error&) {
    caps.supports_system_role = false;
  }
  return caps;
}

// llama.cpp's polyfill for templates without a system role: system text
// joins the next user message ("system\nuser"), or becomes a user message.
nlohmann::ordered_json fold_system(const nlohmann::ordered_json& messages) {
  if (!messages.is_array()) return messages;
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  std::string pending;
  const auto flush = [&] {
    if (pending.empty()) return;
    out.push_back({{"role", "user"}, {"content", pending}});
    pending.clear();
  };
  for (const auto& m : messages) {
    const bool has_text = m.is_object() && m.contains("content") && m["content"].is_string();
    const std::string role = m.is_object() && m.contains("role") && m["role"].is_string()
                                 ? m["role"].get<std::string>()
                                 : std::string();
    if (role == "system" && has_text) {
      if (!pending.empty()) pending += "\n";
      pending += m["content"].get<std::string>();
      continue;
    }
    if (role == "user" && has_text && !pending.empty()) {
      nlohmann::ordered_json joined = m;
      const std::string content = m["content"].get<std::string>();
      joined["content"] = pending + (content.empty() ? "" : "\n" + content);
      pending.clear();
      out.push_back(std::move(joined));
      continue;
    }
    flush();
    out.push_back(m);
  }
  flush();
  return out;
}

}  // namespace

ChatTemplate::ChatTemplate(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}

ChatTemplate ChatTemplate::parse(std::string_view source, std::string name,
                                 const ChatTemplateLimits& limits) {
  auto impl = std::make_shared<Impl>();
  impl->name = std::move(name);
  impl->source = std::string(source);
  impl->tmpl = jinja::parse_template(source, impl->name, limits.max_depth);
  ChatTemplate t(impl);
  impl->caps = detect_caps(t);
  return t;
}

std::string ChatTemplate::render(const nlohmann::ordered_json& messages,
                                 const ChatTemplateInputs& inputs) const {
  return render_impl(*this, impl_->tmpl, messages, inputs);
}

std::string ChatTemplate::render(const nlohmann::json& messages,
                                 const ChatTemplateInputs& inputs) const {
  return render_impl(*this, impl_->tmpl, messages, inputs);
}

std::string ChatTemplate::apply(const nlohmann::ordered_json& messages,
                                const ChatTemplateInputs& inputs,
                                const ChatApplyOptions& options) const {
  std::string out = caps().supports_system_role ? render(messages, inputs)
                                                : render(fold_system(messages), inputs);
  const std::string& bos = inputs.bos_token;
  if (options.strip_leading_bos && !bos.empty() && out.starts_with(bos)) out.erase(0, bos.size());
  const std::string& eos = inputs.eos_token;
  if (options.strip_trailing_eos && !eos.empty() && out.ends_with(eos)) {
    out.erase(out.size() - eos.size());
  }
  return out;
}

const std::string& ChatTemplate::name() const {
  return impl_->name;
}
const std::string& ChatTemplate::source() const {
  return impl_->source;
}
const ChatTemplateCaps& ChatTemplate::caps() const {
  return impl_->caps;
}

std::optional<std::string> gguf_chat_template(const gguf::File& file, std::string_view variant) {
  const std::string key = variant.empty() ? std::string("tokenizer.chat_template")
                                          : fmt::format("tokenizer.chat_template.{}", variant);
  const gguf::Value* v = file.find(key);
  if (v == nullptr) return std::nullopt;
  return std::string(v->string());  // throws kInvalidFile naming the key when not a string
}

}  // namespace tessera
