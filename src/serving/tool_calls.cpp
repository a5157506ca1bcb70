#include "tessera/serving/tool_calls.h"

#include <fmt/format.h>

#include <algorithm>
#include <mutex>
#include <random>
#include <set>

#include "tessera/core/error.h"
#include "tessera/grammar/grammar.h"
#include "tessera/serving/serving.h"
#include "text_stream.h"

namespace tessera::serving {
namespace {

using nlohmann::ordered_json;

constexpr std::string_view kHermesOpen = "<tool_call>";
constexpr std::string_view kHermesClose = "</tool_call>";
constexpr std::string_view kPythonTag = "<|python_tag|>";
constexpr std::string_view kMistralMarker = "[TOOL_CALLS]";
constexpr std::string_view kGraniteMarker = "<|tool_call|>";

[[noreturn]] void bad(const std::string& what) { fail(ErrorCategory::kInvalidArgument, "{}", what); }

bool is_space(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

std::string_view trim(std::string_view s) {
  while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
  return s;
}

bool all_space(std::string_view s) { return std::all_of(s.begin(), s.end(), is_space); }

// The marker a format's calls start with anywhere in the text (empty: only
// at the start of the output, as a JSON value).
std::string_view marker(ToolFormat f) {
  switch (f) {
    case ToolFormat::kHermes:
      return kHermesOpen;
    case ToolFormat::kLlama3:
      return kPythonTag;
    case ToolFormat::kMistral:
      return kMistralMarker;
    case ToolFormat::kGranite:
      return kGraniteMarker;
    case ToolFormat::kGeneric:
    case ToolFormat::kHarmony:  // not parsed here (harmony.h)
      break;
  }
  return {};
}

std::optional<ordered_json> parse_json(std::string_view text) {
  ordered_json j = ordered_json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return std::nullopt;
  return j;
}

// JSON values one after another, separated by whitespace, ';' or ','
// (Llama 3.2 writes several calls so); nothing when the text is not that.
std::optional<std::vector<ordered_json>> json_values(std::string_view text) {
  std::vector<ordered_json> out;
  size_t i = 0;
  while (true) {
    while (i < text.size() && (is_space(text[i]) || text[i] == ';' || text[i] == ',')) ++i;
    if (i == text.size()) break;
    if (text[i] != '{' && text[i] != '[') return std::nullopt;
    int depth = 0;
    bool in_string = false;
    size_t j = i;
    for (; j < text.size(); ++j) {
      const char c = text[j];
      if (in_string) {
        if (c == '\\') ++j;
        else if (c == '"') in_string = false;
      } else if (c == '"') {
        in_string = true;
      } else if (c == '{' || c == '[') {
        ++depth;
      } else if ((c == '}' || c == ']') && --depth == 0) {
        break;
      }
    }
    if (j >= text.size()) return std::nullopt;
    std::optional<ordered_json> v = parse_json(text.substr(i, j + 1 - i));
    if (!v) return std::nullopt;
    out.push_back(std::move(*v));
    i = j + 1;
  }
  if (out.empty()) return std::nullopt;
  return out;
}

// {"name": N, "arguments" | "parameters": {...} or a JSON text, "id"?}.
std::optional<ToolCall> call_from_json(const ordered_json& j, ToolFormat f) {
  if (!j.is_object()) return std::nullopt;
  const auto name = j.find("name");
  if (name == j.end() || !name->is_string() || name->get_ref<const std::string&>().empty()) {
    return std::nullopt;
  }
  ToolCall call;
  call.name = name->get<std::string>();
  auto args = j.find("arguments");
  if (args == j.end()) args = j.find("parameters");
  if (args == j.end() || args->is_null()) {
    call.arguments = "{}";
  } else if (args->is_object()) {
    call.arguments = args->dump();
  } else if (args->is_string() && parse_json(args->get_ref<const std::string&>())) {
    call.arguments = args->get<std::string>();
  } else {
    return std::nullopt;
  }
  const auto id = j.find("id");
  call.id = id != j.end() && id->is_string() && !id->get_ref<const std::string&>().empty()
                ? id->get<std::string>()
                : new_tool_call_id(f);
  return call;
}

// Calls from one value: a call object, or an array of them.
bool calls_from_value(const ordered_json& v, ToolFormat f, std::vector<ToolCall>& out) {
  std::vector<ToolCall> calls;
  if (v.is_array()) {
    if (v.empty()) return false;
    for (const ordered_json& c : v) {
      std::optional<ToolCall> call = call_from_json(c, f);
      if (!call) return false;
      calls.push_back(std::move(*call));
    }
  } else {
    std::optional<ToolCall> call = call_from_json(v, f);
    if (!call) return false;
    calls.push_back(std::move(*call));
  }
  out.insert(out.end(), calls.begin(), calls.end());
  return true;
}

// A JSON pointer of $ref targets moved under #/$defs/<at>.
void move_refs(ordered_json& s, const std::string& at) {
  if (s.is_object()) {
    for (auto& [key, value] : s.items()) {
      if (key == "$ref" && value.is_string() && value.get_ref<const std::string&>().starts_with("#")) {
        value = "#/$defs/" + at + value.get<std::string>().substr(1);
      } else {
        move_refs(value, at);
      }
    }
  } else if (s.is_array()) {
    for (ordered_json& v : s) move_refs(v, at);
  }
}

ordered_json string_array(std::initializer_list<const char*> items) {
  ordered_json a = ordered_json::array();
  for (const char* s : items) a.push_back(s);
  return a;
}

}  // namespace

std::string_view tool_format_name(ToolFormat f) {
  switch (f) {
    case ToolFormat::kHermes:
      return "hermes";
    case ToolFormat::kLlama3:
      return "llama3";
    case ToolFormat::kMistral:
      return "mistral";
    case ToolFormat::kGranite:
      return "granite";
    case ToolFormat::kHarmony:
      return "harmony";
    case ToolFormat::kGeneric:
      break;
  }
  return "generic";
}

TemplateTools template_tools(std::string_view src) {
  return {.format = detect_tool_format(src),
          .prints_tools = src.find("tools") != std::string_view::npos,
          .prints_calls = src.find("tool_calls") != std::string_view::npos};
}

ToolFormat detect_tool_format(std::string_view src) {
  auto has = [&](std::string_view s) { return src.find(s) != std::string_view::npos; };
  if (has("<|channel|>")) return ToolFormat::kHarmony;
  if (has(kMistralMarker)) return ToolFormat::kMistral;
  if (has(kHermesOpen)) return ToolFormat::kHermes;
  if (has(kGraniteMarker)) return ToolFormat::kGranite;
  if (has("<|start_header_id|>") && (has("ipython") || has("\"parameters\""))) return ToolFormat::kLlama3;
  return ToolFormat::kGeneric;
}

std::optional<ToolRequest> parse_tool_request(const ordered_json& body, ToolFormat format) {
  const auto tools = body.find("tools");
  if (tools == body.end() || tools->is_null()) {
    if (const auto c = body.find("tool_choice"); c != body.end() && !c->is_null() && *c != "none" &&
                                                 *c != "auto") {
      bad("'tool_choice' needs 'tools'");
    }
    return std::nullopt;
  }
  if (!tools->is_array()) bad("'tools' must be an array of {\"type\": \"function\", \"function\": {...}}");
  if (tools->size() > 128) bad(fmt::format("'tools' holds {} tools, at most 128", tools->size()));
  ToolRequest r;
  r.format = format;
  std::set<std::string> names;
  for (size_t i = 0; i < tools->size(); ++i) {
    const ordered_json& t = (*tools)[i];
    const std::string at = fmt::format("tools[{}]", i);
    if (!t.is_object() || t.value("type", "") != "function" || !t.contains("function") ||
        !t["function"].is_object()) {
      bad(fmt::format("'{}' must be {{\"type\": \"function\", \"function\": {{\"name\": ...}}}}", at));
    }
    const ordered_json& fn = t["function"];
    if (!fn.contains("name") || !fn["name"].is_string()) bad(fmt::format("'{}.function.name' must be a string", at));
    const std::string name = fn["name"].get<std::string>();
    const bool ok = !name.empty() && name.size() <= 64 &&
                    std::all_of(name.begin(), name.end(), [](char c) {
                      return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.';
                    });
    if (!ok) bad(fmt::format("'{}.function.name' must be 1 to 64 of a-z, A-Z, 0-9, _, - and ., found '{}'", at,
                             name.substr(0, 80)));
    if (!names.insert(name).second) bad(fmt::format("'{}.function.name': '{}' is given twice", at, name));
    if (fn.contains("description") && !fn["description"].is_string() && !fn["description"].is_null()) {
      bad(fmt::format("'{}.function.description' must be a string", at));
    }
    if (fn.contains("parameters") && !fn["parameters"].is_object() && !fn["parameters"].is_null()) {
      bad(fmt::format("'{}.function.parameters' must be a JSON schema object", at));
    }
    r.tools.push_back(t);
  }
  if (const auto c = body.find("tool_choice"); c != body.end() && !c->is_null()) {
    if (c->is_string()) {
      const std::string s = c->get<std::string>();
      if (s == "auto") r.choice = ToolRequest::Choice::kAuto;
      else if (s == "none") r.choice = ToolRequest::Choice::kNone;
      else if (s == "required") r.choice = ToolRequest::Choice::kRequired;
      else bad(fmt::format("'tool_choice' must be auto, none, required or {{\"type\": \"function\", "
                           "\"function\": {{\"name\": ...}}}}, found '{}'", s.substr(0, 80)));
    } else if (c->is_object() && c->value("type", "") == "function" && c->contains("function") &&
               (*c)["function"].is_object() && (*c)["function"].contains("name") &&
               (*c)["function"]["name"].is_string()) {
      r.choice = ToolRequest::Choice::kNamed;
      r.named = (*c)["function"]["name"].get<std::string>();
      if (!names.contains(r.named)) bad(fmt::format("'tool_choice' names '{}', which is not in 'tools'", r.named.substr(0, 80)));
    } else {
      bad("'tool_choice' must be auto, none, required or {\"type\": \"function\", \"function\": {\"name\": ...}}");
    }
  }
  if (const auto p = body.find("parallel_tool_calls"); p != body.end() && !p->is_null()) {
    if (!p->is_boolean()) bad("'parallel_tool_calls' must be true or false");
    r.parallel = p->get<bool>();
  }
  if (r.tools.empty()) return std::nullopt;
  return r;
}

namespace {

// A forced harmony call: any analysis or commentary messages, then a
// commentary message to=functions.N whose body is N's arguments. The
// arguments' rules come from one schema holding every tool's parameters
// under $defs tool<i> (rule tool<i> each); its own root is replaced.
std::string harmony_grammar(const ToolRequest& r, const ordered_json& defs) {
  ordered_json holder = {{"type", "object"}, {"properties", ordered_json::object()}};
  std::string calls;
  for (size_t i = 0; i < r.tools.size(); ++i) {
    const std::string name = r.tools[i]["function"]["name"].get<std::string>();
    const std::string def = fmt::format("tool{}", i);
    if (!defs.contains(def)) continue;  // not the named tool
    holder["properties"][def] = {{"$ref", "#/$defs/" + def}};
    calls += fmt::format("{}\"{}\" harmony-constrain \"<|message|>\" {}", calls.empty() ? "" : " | ", name, def);
  }
  holder["$defs"] = defs;
  const std::string g = grammar::json_schema_to_grammar(holder);
  const size_t root_end = g.find('\n');
  if (!g.starts_with("root ::= ") || root_end == std::string::npos) {
    fail(ErrorCategory::kInternal, "unexpected grammar from the JSON schema");
  }
  return fmt::format(
      "root ::= (harmony-message \"<|start|>assistant\")* harmony-call\n"
      "harmony-message ::= \"<|channel|>\" (\"analysis\" | \"commentary\") \"<|message|>\" harmony-text "
      "\"<|end|>\"\n"
      "harmony-text ::= ([^<] | \"<\" [^|] | \"<|\" [^e] | \"<|e\" [^n] | \"<|en\" [^d] | \"<|end\" [^|] | "
      "\"<|end|\" [^>])*\n"
      "harmony-call ::= \"<|channel|>commentary to=functions.\" ({})\n"
      "harmony-constrain ::= (\" <|constrain|>json\")?\n{}",
      calls, g.substr(root_end + 1));
}

}  // namespace

std::optional<std::string> tool_grammar(const ToolRequest& r) {
  if (!r.active()) return std::nullopt;
  if (!r.forced() && r.format != ToolFormat::kGeneric) return std::nullopt;
  const char* args_key = r.format == ToolFormat::kLlama3 ? "parameters" : "arguments";
  ordered_json defs = ordered_json::object();
  ordered_json calls = ordered_json::array();
  for (size_t i = 0; i < r.tools.size(); ++i) {
    const ordered_json& fn = r.tools[i]["function"];
    const std::string name = fn["name"].get<std::string>();
    if (r.choice == ToolRequest::Choice::kNamed && name != r.named) continue;
    ordered_json params = fn.contains("parameters") && !fn["parameters"].is_null()
                              ? fn["parameters"]
                              : ordered_json{{"type", "object"}};
    try {  // alone first, so a fault names the tool and its own pointer
      (void)grammar::json_schema_to_grammar(params);
    } catch (const Error& e) {
      bad(fmt::format("'tools[{}].function.parameters': {}", i, e.what()));
    }
    const std::string def = fmt::format("tool{}", i);
    move_refs(params, def);
    defs[def] = std::move(params);
    ordered_json props = ordered_json::object();
    props["name"] = {{"const", name}};
    props[args_key] = {{"$ref", "#/$defs/" + def}};
    calls.push_back({{"type", "object"},
                     {"properties", std::move(props)},
                     {"required", string_array({"name", args_key})},
                     {"additionalProperties", false}});
  }
  if (r.format == ToolFormat::kHarmony) return harmony_grammar(r, defs);
  const ordered_json call = calls.size() == 1 ? calls[0] : ordered_json{{"anyOf", calls}};
  ordered_json array = {{"type", "array"}, {"items", call}, {"minItems", 1}};
  if (!r.parallel) array["maxItems"] = 1;
  ordered_json schema;
  switch (r.format) {
    case ToolFormat::kHermes:
    case ToolFormat::kLlama3:
    case ToolFormat::kHarmony:  // (its own grammar, above)
      schema = call;
      break;
    case ToolFormat::kMistral:
    case ToolFormat::kGranite:
      schema = array;
      break;
    case ToolFormat::kGeneric: {
      ordered_json options = ordered_json::array();
      if (r.parallel) {
        options.push_back({{"type", "object"},
                           {"properties", {{"tool_calls", array}}},
                           {"required", string_array({"tool_calls"})},
                           {"additionalProperties", false}});
      } else {
        options.push_back({{"type", "object"},
                           {"properties", {{"tool_call", call}}},
                           {"required", string_array({"tool_call"})},
                           {"additionalProperties", false}});
      }
      if (!r.forced()) {
        options.push_back({{"type", "object"},
                           {"properties", {{"response", {{"type", "string"}}}}},
                           {"required", string_array({"response"})},
                           {"additionalProperties", false}});
      }
      schema = options.size() == 1 ? options[0] : ordered_json{{"anyOf", options}};
      break;
    }
  }
  schema["$defs"] = std::move(defs);
  std::string g = grammar::json_schema_to_grammar(schema);
  if (r.format != ToolFormat::kHermes) return g;
  // Hermes: the call object inside its tags, once or (parallel) repeated;
  // the schema's rules never use names that start with wrap-.
  if (!g.starts_with("root ::= ")) fail(ErrorCategory::kInternal, "unexpected grammar from the JSON schema");
  return fmt::format("root ::= (\"{}\" wrap-call \"{}\" ws){}\nwrap-call ::= {}", kHermesOpen, kHermesClose,
                     r.parallel ? "+" : "", g.substr(9));
}

void use_tools(const ToolRequest& r, GenerationParams& p, std::optional<std::string>& grammar) {
  if (!r.active()) return;
  if (std::optional<std::string> forced = tool_grammar(r)) {
    if (grammar) {
      bad("'grammar', 'json_schema' and 'response_format' cannot be combined with 'tools' here "
          "(tool_choice required or a named function, or a template without tool calls of its own)");
    }
    grammar = std::move(forced);
  }
  GenerationParams::Tools t{.format = r.format, .forced = r.forced(), .tool_names = {}};
  for (const ordered_json& tool : r.tools) t.tool_names.push_back(tool["function"]["name"].get<std::string>());
  p.tools = std::move(t);
}

std::vector<std::string> tool_markers(ToolFormat f) {
  switch (f) {
    case ToolFormat::kLlama3:
      return {std::string(kPythonTag)};
    case ToolFormat::kMistral:
      return {std::string(kMistralMarker)};
    case ToolFormat::kGranite:
      return {std::string(kGraniteMarker)};
    default:
      return {};
  }
}

std::string new_tool_call_id(ToolFormat f) {
  static std::mutex mutex;
  static std::mt19937_64 rng(std::random_device{}());
  static constexpr char kChars[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  std::lock_guard lock(mutex);
  std::string id = f == ToolFormat::kMistral ? "" : "call_";
  const int n = f == ToolFormat::kMistral ? 9 : 24;
  for (int i = 0; i < n; ++i) id += kChars[rng() % (sizeof kChars - 1)];
  return id;
}

namespace {

// JSON as Python's json.dumps writes it (", " and ": "), the spelling
// templates' tojson gives and models learn.
std::string py_dumps(const ordered_json& j) {
  if (j.is_object()) {
    std::string out = "{";
    for (const auto& [k, v] : j.items()) {
      out += (out.size() > 1 ? ", " : "") + ordered_json(k).dump() + ": " + py_dumps(v);
    }
    return out + "}";
  }
  if (j.is_array()) {
    std::string out = "[";
    for (const ordered_json& v : j) out += (out.size() > 1 ? ", " : "") + py_dumps(v);
    return out + "]";
  }
  return j.dump(-1, ' ', false, ordered_json::error_handler_t::replace);
}

// A history call as the model writes it, for a template that does not
// print tool_calls itself.
std::string call_text(ToolFormat f, const ordered_json& calls) {
  ordered_json list = ordered_json::array();
  for (const ordered_json& call : calls) {
    if (!call.is_object() || !call.contains("function") || !call["function"].is_object()) continue;
    const ordered_json& fn = call["function"];
    ordered_json c = {{"name", fn.value("name", "")},
                      {f == ToolFormat::kLlama3 ? "parameters" : "arguments",
                       fn.contains("arguments") ? fn["arguments"] : ordered_json::object()}};
    if (f == ToolFormat::kMistral && call.contains("id")) c["id"] = call["id"];
    list.push_back(std::move(c));
  }
  std::string out;
  switch (f) {
    case ToolFormat::kHermes:
      for (const ordered_json& c : list) out += fmt::format("{}\n{}\n{}\n", kHermesOpen, py_dumps(c), kHermesClose);
      return out;
    case ToolFormat::kLlama3:
      for (const ordered_json& c : list) out += (out.empty() ? "" : "; ") + py_dumps(c);
      return out;
    case ToolFormat::kMistral:
      return std::string(kMistralMarker) + py_dumps(list);
    case ToolFormat::kGranite:
      return std::string(kGraniteMarker) + py_dumps(list);
    case ToolFormat::kGeneric:
    case ToolFormat::kHarmony:  // its template prints tool_calls itself
      break;
  }
  return (list.size() == 1 ? ordered_json{{"tool_call", list[0]}} : ordered_json{{"tool_calls", list}}).dump(2);
}

}  // namespace

ordered_json tool_messages(const ordered_json& messages, const ordered_json& tools, const TemplateTools& t) {
  ordered_json out = ordered_json::array();
  for (const ordered_json& m : messages) {
    ordered_json msg = m;
    if (msg.is_object() && msg.contains("tool_calls") && msg["tool_calls"].is_array()) {
      for (ordered_json& call : msg["tool_calls"]) {
        if (!call.is_object() || !call.contains("function") || !call["function"].is_object()) continue;
        ordered_json& args = call["function"]["arguments"];
        if (args.is_string()) {
          if (std::optional<ordered_json> v = parse_json(args.get_ref<const std::string&>())) args = *v;
        }
      }
      if (!t.prints_calls) {  // the call as the model wrote it, in the content
        const std::string text = call_text(t.format, msg["tool_calls"]);
        const std::string content = msg.contains("content") && msg["content"].is_string()
                                        ? msg["content"].get<std::string>()
                                        : std::string();
        msg["content"] = content.empty() ? text : content + "\n" + text;
        msg.erase("tool_calls");
      }
    }
    if (!t.prints_tools && msg.is_object() && msg.value("role", "") == "tool") {
      ordered_json response = {{"content", msg.contains("content") ? msg["content"] : ordered_json("")}};
      if (msg.contains("tool_call_id")) response["tool_call_id"] = msg["tool_call_id"];
      if (msg.contains("name")) response["tool"] = msg["name"];
      msg = {{"role", "user"}, {"content", ordered_json{{"tool_response", response}}.dump(2)}};
    }
    out.push_back(std::move(msg));
  }
  if (t.prints_tools || !tools.is_array() || tools.empty()) return out;
  std::string prompt =
      "You can call tools. Here they are, with JSON schemas of their arguments:\n" + tools.dump(2) +
      "\n\nAnswer with one JSON object: {\"tool_call\": {\"name\": \"<tool name>\", \"arguments\": "
      "{...}}} to call a tool, {\"tool_calls\": [{\"name\": ..., \"arguments\": ...}, ...]} to call "
      "several at once, or {\"response\": \"<your answer>\"} to answer directly.";
  if (!out.empty() && out[0].is_object() && out[0].value("role", "") == "system" && out[0].contains("content") &&
      out[0]["content"].is_string()) {
    out[0]["content"] = out[0]["content"].get<std::string>() + "\n\n" + prompt;
  } else {
    out.insert(out.begin(), ordered_json{{"role", "system"}, {"content", prompt}});
  }
  return out;
}

ToolCallParser::ToolCallParser(ToolFormat format, bool forced, std::vector<std::string> tool_names)
    : format_(format), forced_(forced), names_(std::move(tool_names)) {}

std::string ToolCallParser::feed(std::string_view text) {
  held_ += text;
  std::string out;
  while (true) {
    if (state_ == State::kWhole) return out;
    if (state_ == State::kCall) {
      const size_t end = held_.find(kHermesClose);
      if (end == std::string::npos) return out;
      const std::string body = held_.substr(0, end);
      held_.erase(0, end + kHermesClose.size());
      out += end_call(body, false);
      continue;
    }
    if (after_call_) {  // whitespace between calls, or after the last, is dropped
      const size_t first = held_.find_first_not_of(" \t\r\n");
      if (first == std::string::npos) {
        held_.clear();
        return out;
      }
      held_.erase(0, first);
      after_call_ = false;
    }
    // Before the output's first non-space: whether it opens a whole-output call.
    if (!started_) {
      const size_t first = held_.find_first_not_of(" \t\r\n");
      if (first == std::string::npos) return out;
      started_ = true;
      const char c = held_[first];
      const bool whole = ((format_ == ToolFormat::kGeneric || format_ == ToolFormat::kLlama3) && c == '{') ||
                         (forced_ && (format_ == ToolFormat::kMistral || format_ == ToolFormat::kGranite) &&
                          c == '[');
      if (whole) {
        whole_prefix_ = held_.substr(0, first);
        held_.erase(0, first);
        state_ = State::kWhole;
        return out;
      }
    }
    const std::string_view m = marker(format_);
    const size_t at = m.empty() ? std::string::npos : held_.find(m);
    if (at == std::string::npos) {
      // Text that may begin the marker waits for the next piece.
      const size_t keep = m.empty() ? 0 : partial_marker(held_, m);
      out += held_.substr(0, held_.size() - keep);
      held_.erase(0, held_.size() - keep);
      return out;
    }
    // Spaces before a call at the start of the output are not content.
    if (!(out.empty() && !emitted_ && all_space(std::string_view(held_).substr(0, at)))) {
      out += held_.substr(0, at);
    }
    emitted_ = emitted_ || !trim(out).empty();
    whole_prefix_ = m;
    held_.erase(0, at + m.size());
    state_ = format_ == ToolFormat::kHermes ? State::kCall : State::kWhole;
  }
}

std::string ToolCallParser::end_call(const std::string& body, bool last) {
  state_ = State::kContent;
  std::optional<ordered_json> v = parse_json(trim(body));
  std::vector<ToolCall> found;
  if (v && v->is_object() && calls_from_value(*v, format_, found)) {
    calls_.push_back(std::move(found[0]));
    after_call_ = true;
    return {};
  }
  emitted_ = true;
  return std::string(kHermesOpen) + body + (last ? "" : std::string(kHermesClose));
}

std::string ToolCallParser::finish() {
  std::string out;
  switch (state_) {
    case State::kContent:
      if (!(after_call_ && all_space(held_))) out = held_;
      break;
    case State::kCall:
      out = end_call(held_, true);
      break;
    case State::kWhole:
      if (!parse_calls(held_, out)) out = whole_prefix_ + held_;
      break;
  }
  held_.clear();
  state_ = State::kContent;
  return out;
}

bool ToolCallParser::parse_calls(std::string_view text, std::string& content) {
  text = trim(text);
  // A forced call may still begin with its marker.
  if (const std::string_view m = marker(format_); !m.empty() && text.starts_with(m)) text = trim(text.substr(m.size()));
  std::vector<ToolCall> found;
  if (format_ == ToolFormat::kGeneric) {
    std::optional<ordered_json> v = parse_json(text);
    if (!v || !v->is_object() || v->size() != 1) return false;
    if (v->contains("tool_call")) {
      if (!(*v)["tool_call"].is_object() || !calls_from_value((*v)["tool_call"], format_, found)) return false;
    } else if (v->contains("tool_calls")) {
      if (!(*v)["tool_calls"].is_array() || !calls_from_value((*v)["tool_calls"], format_, found)) return false;
    } else if (v->contains("response") && (*v)["response"].is_string()) {
      content = (*v)["response"].get<std::string>();
      return true;
    } else {
      return false;
    }
  } else if (std::optional<std::vector<ordered_json>> values = json_values(text)) {
    for (const ordered_json& v : *values) {
      if (!calls_from_value(v, format_, found)) return false;
    }
  } else if (format_ == ToolFormat::kLlama3 && whole_prefix_ == kPythonTag) {
    // <|python_tag|> then code: a call of the python tool, when there is one.
    const auto py = std::find_if(names_.begin(), names_.end(),
                                 [](const std::string& n) { return n == "python" || n == "ipython"; });
    if (py == names_.end()) return false;
    found.push_back({new_tool_call_id(format_), *py, ordered_json{{"code", std::string(text)}}.dump()});
  } else {
    return false;
  }
  calls_.insert(calls_.end(), found.begin(), found.end());
  return true;
}

ParsedToolOutput parse_tool_output(ToolFormat format, std::string_view text, bool forced,
                                   std::vector<std::string> tool_names) {
  ToolCallParser p(format, forced, std::move(tool_names));
  ParsedToolOutput out;
  out.content = p.feed(text);
  out.content += p.finish();
  out.calls = p.take_calls();
  return out;
}

}  // namespace tessera::serving
