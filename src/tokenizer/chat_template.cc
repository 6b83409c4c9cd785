// The checkpoint's chat template, found, parsed once and rendered as transformers does
// (chat_template.h).
#include "tokenizer/chat_template.h"

#include <string_view>

#include "io/pack.h"
#include "template/template.h"
#include "tokenizer/chat_gemma4.h"

namespace g4 {

using nlohmann::ordered_json;

const char* ChatTemplateSourceName(ChatTemplateSource source) {
  switch (source) {
    case ChatTemplateSource::kFile:
      return "chat_template.jinja";
    case ChatTemplateSource::kTokenizerConfig:
      return "tokenizer_config.json";
    case ChatTemplateSource::kBuiltIn:
      break;
  }
  return "built-in";
}

// Content markers of Google's Gemma-4 template versions (each in a small E2B/E4B and a large
// 12B/26B/31B variant): v4 (2026-07-09, "Canonical") adds preserve_thinking and a forward scan
// that closes turns (continues_into_next); v3 (2026-04-29)
// adds format_parameters' filter_keys; v2 (2026-04-10) opens its OpenAI message handling with an
// "OpenAI Chat Completions" comment; v1 (2026-04-01) has none of these. The large variant's
// generation prompt closes an empty thought channel when thinking is off; the small one does not.
// llama.cpp's interleaved variant is v1 plus reasoning_content replay.
std::string DetectChatTemplateVersion(const std::string& source) {
  auto has = [&](std::string_view s) { return source.find(s) != std::string::npos; };
  if (!has("<|turn>")) return has("<start_of_turn>") ? "gemma3" : "unknown/custom";
  const bool large = has("<|channel>thought\\n<channel|>");
  const char* size = large ? "-large" : "-small";
  if (has("preserve_thinking") && (has("Canonical Chat Template") || has("continues_into_next")))
    return Str("gemma4-v4", size);
  if (has("filter_keys")) return Str("gemma4-v3", size);
  if (has("OpenAI Chat Completions")) return Str("gemma4-v2", size);
  if (has("'<|think|>'") && has("format_function_declaration"))
    return has("reasoning_content") ? "gemma4-interleaved" : Str("gemma4-v1", size);
  return "unknown/custom";
}

namespace {

// tokenizer_config.json's special tokens as the template sees them (transformers passes its
// special_tokens_map): every "*_token" field, given as a string or as {"content": ...}.
// Gemma's own markers are the defaults for a checkpoint without the file.
ordered_json SpecialTokens(const ordered_json* config) {
  ordered_json tokens = {{"bos_token", "<bos>"}, {"eos_token", "<eos>"}};
  if (config == nullptr || !config->is_object()) return tokens;
  for (const auto& [key, value] : config->items()) {
    if (key.size() < 6 || key.compare(key.size() - 6, 6, "_token") != 0) continue;
    if (value.is_string()) {
      tokens[key] = value;
    } else if (value.is_object() && value.contains("content") && value["content"].is_string()) {
      tokens[key] = value["content"];
    }
  }
  return tokens;
}

// tokenizer_config "chat_template": a string, or a list of {name, template} ("default" is used).
Result<std::string> ConfigTemplate(const ordered_json& entry) {
  if (entry.is_string()) return entry.get<std::string>();
  if (entry.is_array()) {
    for (const ordered_json& named : entry) {
      if (named.is_object() && named.contains("name") && named["name"] == "default" && named.contains("template") &&
          named["template"].is_string())
        return named["template"].get<std::string>();
    }
    return Status::Error(
        "tokenizer_config.json has a list of chat templates but none named \"default\"");
  }
  return Status::Error("tokenizer_config.json \"chat_template\" must be a string or a list of {name, template}");
}

// vLLM's step before rendering: assistant tool_calls[].function.arguments given as a JSON string
// (OpenAI's form) become the object it encodes. Text that is not JSON stays a string, for the
// template to render or refuse.
void ParseToolCallArguments(ordered_json& messages) {
  if (!messages.is_array()) return;
  for (ordered_json& message : messages) {
    if (!message.is_object() || !message.contains("tool_calls") || !message["tool_calls"].is_array()) continue;
    for (ordered_json& call : message["tool_calls"]) {
      if (!call.is_object() || !call.contains("function") || !call["function"].is_object()) continue;
      ordered_json& function = call["function"];
      if (!function.contains("arguments") || !function["arguments"].is_string()) continue;
      ordered_json parsed = ordered_json::parse(function["arguments"].get<std::string>(), nullptr, false);
      if (!parsed.is_discarded()) function["arguments"] = std::move(parsed);
    }
  }
}

// The same step on the template's own values (the render path: no JSON copy of the request).
void ParseToolCallArguments(const jinja::Value& messages) {
  if (!messages.is_list()) return;
  for (const jinja::Value& message : messages.list().items) {
    if (!message.is_dict()) continue;
    const jinja::Value* calls = message.dict().FindString("tool_calls");
    if (!calls || !calls->is_list()) continue;
    for (const jinja::Value& call : calls->list().items) {
      const jinja::Value* function = call.is_dict() ? call.dict().FindString("function") : nullptr;
      if (!function || !function->is_dict()) continue;
      const jinja::Value* arguments = function->dict().FindString("arguments");
      if (!arguments || !arguments->is_string()) continue;
      const ordered_json parsed = ordered_json::parse(arguments->str(), nullptr, false);
      if (!parsed.is_discarded()) function->dict().Set(jinja::Value::String("arguments"), jinja::FromJson(parsed));
    }
  }
}

// Whether MODEL's config.json describes a small Gemma-4 (per-layer embeddings: E2B, E4B).
bool IsSmallModel(const std::string& model) {
  if (!ModelHasFile(model, "config.json")) return false;
  auto text = ReadModelTextFile(model, "config.json");
  if (!text.ok()) return false;
  const auto config = ordered_json::parse(*text, nullptr, false);
  if (!config.is_object()) return false;
  const ordered_json& text_config =
      config.contains("text_config") && config["text_config"].is_object() ? config["text_config"] : config;
  const auto ple = text_config.find("hidden_size_per_layer_input");
  return ple != text_config.end() && ple->is_number_integer() && ple->get<int64_t>() > 0;
}

// The built-in Gemma-4 format, for checkpoints that ship no template.
Result<std::string> RenderBuiltIn(const ChatTemplateRequest& request, bool small_model) {
  Gemma4ChatOptions options;
  options.features.empty_thought_in_prompt = !small_model;
  options.add_generation_prompt = request.add_generation_prompt;
  if (request.kwargs.contains("enable_thinking")) {
    const ordered_json& thinking = request.kwargs["enable_thinking"];
    options.enable_thinking = thinking.is_boolean() ? thinking.get<bool>() : !thinking.is_null();
  }
  ordered_json messages = request.messages;
  ParseToolCallArguments(messages);
  return RenderGemma4Chat(nlohmann::json(messages), nlohmann::json(request.tools), options);
}

}  // namespace

Result<ChatTemplate> ChatTemplate::FromSource(const std::string& source, ChatTemplateSource origin,
                                              ordered_json special_tokens) {
  auto parsed = jinja::Template::Parse(source);
  if (!parsed.ok())
    return Status::Errorf("the chat template (", ChatTemplateSourceName(origin), ") does not parse: ",
                          parsed.status().message());
  ChatTemplate t;
  t.source_ = origin;
  t.text_ = source;
  t.version_ = DetectChatTemplateVersion(source);
  t.template_ = std::make_shared<const jinja::Template>(std::move(*parsed));
  t.special_tokens_ = std::move(special_tokens);
  return t;
}

ChatTemplate ChatTemplate::BuiltIn(bool small_model) {
  ChatTemplate t;
  t.version_ = small_model ? "built-in-small" : "built-in-large";
  return t;
}

Result<ChatTemplate> ChatTemplate::Load(const std::string& model) {
  ordered_json config;
  const bool has_config = ModelHasFile(model, "tokenizer_config.json");
  if (has_config) {
    G4_ASSIGN_OR_RETURN(std::string text, ReadModelTextFile(model, "tokenizer_config.json"));
    config = ordered_json::parse(text, nullptr, false);
    if (config.is_discarded() || !config.is_object())
      return Status::Errorf(model, ": tokenizer_config.json is not a JSON object");
  }
  ordered_json special = SpecialTokens(has_config ? &config : nullptr);
  if (ModelHasFile(model, "chat_template.jinja")) {
    G4_ASSIGN_OR_RETURN(std::string text, ReadModelTextFile(model, "chat_template.jinja"));
    return FromSource(text, ChatTemplateSource::kFile, std::move(special));
  }
  if (has_config && config.contains("chat_template") && !config["chat_template"].is_null()) {
    G4_ASSIGN_OR_RETURN(std::string text, ConfigTemplate(config["chat_template"]));
    return FromSource(text, ChatTemplateSource::kTokenizerConfig, std::move(special));
  }
  return BuiltIn(IsSmallModel(model));
}

Result<std::string> ChatTemplate::Render(const ChatTemplateRequest& request) const {
  if (!template_) return RenderBuiltIn(request, version_ == "built-in-small");
  // transformers: render(messages=, tools=, documents=None, add_generation_prompt=,
  // **special_tokens_map, **kwargs); chat_template_kwargs come last and win.
  // Built as template values directly (converting a JSON copy costs ~10 % of a render).
  using jinja::Value;
  Value context = Value::Dict();
  jinja::DictData& vars = context.dict();
  Value messages = jinja::FromJson(request.messages);
  ParseToolCallArguments(messages);
  vars.items.emplace_back(Value::String("messages"), std::move(messages));
  vars.items.emplace_back(Value::String("tools"), jinja::FromJson(request.tools));
  vars.items.emplace_back(Value::String("documents"), Value::None());
  vars.items.emplace_back(Value::String("add_generation_prompt"), Value::Bool(request.add_generation_prompt));
  for (const auto& [key, value] : special_tokens_.items()) vars.Set(Value::String(key), jinja::FromJson(value));
  for (const auto& [key, value] : request.kwargs.items()) {
    if (key == "messages" || key == "tools")
      return Status::Errorf("chat_template_kwargs may not set '", key, "'");
    vars.Set(Value::String(key), jinja::FromJson(value));
  }
  return template_->RenderValue(context);
}

std::string ChatTemplate::Describe() const {
  if (!template_)
    return Str("built-in Gemma-4 format, ", version_ == "built-in-small" ? "small" : "large",
               "-model variant (the checkpoint ships no chat template)");
  return Str(ChatTemplateSourceName(source_), " (", version_, ")");
}

Result<ChatTemplateRequest> ChatTemplateRequestFromBody(const ordered_json& body) {
  if (!body.is_object()) return Status::Error("the request body must be a JSON object");
  ChatTemplateRequest request;
  if (!body.contains("messages") || !body["messages"].is_array())
    return Status::Error("'messages' must be an array");
  request.messages = body["messages"];
  const ordered_json choice = body.contains("tool_choice") ? body["tool_choice"] : ordered_json();
  if (body.contains("tools") && !body["tools"].is_null()) {
    if (!body["tools"].is_array()) return Status::Error("'tools' must be an array");
    const ordered_json& tools = body["tools"];
    if (choice.is_object() && choice.contains("function") && choice["function"].is_object() &&
        choice["function"].contains("name")) {
      // A named tool_choice: only that tool is rendered (as SGLang does).
      request.tools = ordered_json::array();
      for (const ordered_json& tool : tools) {
        if (tool.is_object() && tool.contains("function") && tool["function"].is_object() &&
            tool["function"].value("name", ordered_json()) == choice["function"]["name"]) {
          request.tools.push_back(tool);
          break;
        }
      }
      if (request.tools.empty()) return Status::Error("tool_choice names a function that is not in 'tools'");
    } else if (!(choice.is_string() && choice == "none") && !tools.empty()) {
      request.tools = tools;
    }
  }
  if (body.contains("chat_template_kwargs")) {
    if (!body["chat_template_kwargs"].is_object())
      return Status::Error("'chat_template_kwargs' must be an object");
    request.kwargs = body["chat_template_kwargs"];
  }
  // reasoning_effort turns thinking on or off unless chat_template_kwargs say otherwise.
  if (!request.kwargs.contains("enable_thinking") && body.contains("reasoning_effort") &&
      body["reasoning_effort"].is_string()) {
    const std::string effort = body["reasoning_effort"].get<std::string>();
    if (effort == "none" || effort == "minimal") request.kwargs["enable_thinking"] = false;
    if (effort == "low" || effort == "medium" || effort == "high") request.kwargs["enable_thinking"] = true;
  }
  if (body.contains("add_generation_prompt")) {
    if (!body["add_generation_prompt"].is_boolean())
      return Status::Error("'add_generation_prompt' must be a boolean");
    request.add_generation_prompt = body["add_generation_prompt"].get<bool>();
  }
  return request;
}

}  // namespace g4
