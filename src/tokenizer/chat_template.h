// The one chat renderer: a checkpoint's own chat template, run by the Jinja engine (src/template)
// the way Hugging Face transformers' apply_chat_template runs it, with the OpenAI request
// handling vLLM adds (JSON-string tool-call arguments parsed into objects first).
//
// Where the template comes from, in order: the checkpoint's chat_template.jinja; else
// tokenizer_config.json "chat_template" (a string, or a list of {name, template} where "default"
// is used); else the built-in Gemma-4 format (chat_gemma4.h), the no-template fallback.
//
// The rendered prompt holds special tokens as text ("<bos>", "<|turn>"): encode it with
// Tokenizer::Encode(text, /*add_bos=*/false), as HF does for chat prompts, so a template that
// writes {{ bos_token }} gets exactly one BOS.
#pragma once

#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "base/status.h"

namespace g4 {

namespace jinja {
class Template;
}

enum class ChatTemplateSource { kFile, kTokenizerConfig, kBuiltIn };
const char* ChatTemplateSourceName(ChatTemplateSource source);  // "chat_template.jinja", ...

// What the template sees of an OpenAI chat-completions request. Objects keep the client's key
// order (Python dicts do, and a template that iterates a dict prints in that order).
struct ChatTemplateRequest {
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  nlohmann::ordered_json tools;  // an array, or null (no tools, or tool_choice "none")
  // chat_template_kwargs: enable_thinking, preserve_thinking, anything else, passed through.
  nlohmann::ordered_json kwargs = nlohmann::ordered_json::object();
  bool add_generation_prompt = true;
};

// Which known template a source is, by content markers: "gemma4-v1-small" ... "gemma4-v4-large",
// "gemma4-interleaved" (llama.cpp's own variant), "gemma3", or "unknown/custom".
std::string DetectChatTemplateVersion(const std::string& source);

class ChatTemplate {
 public:
  // Finds the template of MODEL (a Hugging Face directory or a `g4 pack` artifact) and parses it
  // once. A template that does not parse is an error naming the file and line.
  static Result<ChatTemplate> Load(const std::string& model);
  // A template given as text. special_tokens: bos_token, eos_token, ... as the template sees them.
  static Result<ChatTemplate> FromSource(const std::string& source, ChatTemplateSource origin,
                                         nlohmann::ordered_json special_tokens);
  // The built-in Gemma-4 format (no template shipped), in its small-model variant (E2B/E4B: the
  // generation prompt ends at "<|turn>model\n") or its large one (12B and up: an empty thought
  // channel follows when thinking is off). Load picks by the checkpoint's config.json: the small
  // models are the ones with per-layer embeddings (hidden_size_per_layer_input > 0).
  static ChatTemplate BuiltIn(bool small_model = false);

  // The prompt text. Template errors (raise_exception, a bad request the template cannot render)
  // come back as errors with the template's message: a client error, not a crash.
  Result<std::string> Render(const ChatTemplateRequest& request) const;

  ChatTemplateSource source() const { return source_; }
  const std::string& version() const { return version_; }
  const std::string& text() const { return text_; }
  // "chat_template.jinja (gemma4-v4-small)": for logs, `g4 inspect` and `g4 doctor`.
  std::string Describe() const;

 private:
  ChatTemplate() = default;
  ChatTemplateSource source_ = ChatTemplateSource::kBuiltIn;
  std::string version_ = "built-in-large";
  std::string text_;
  std::shared_ptr<const jinja::Template> template_;  // null for the built-in format
  nlohmann::ordered_json special_tokens_ = nlohmann::ordered_json::object();
};

// The template-facing part of a chat-completions body: messages, tools (null unless given and
// tool_choice is not "none"), chat_template_kwargs, and add_generation_prompt (default true).
// Shape errors name the field; deeper validation is the server's (server/openai_api.cc).
Result<ChatTemplateRequest> ChatTemplateRequestFromBody(const nlohmann::ordered_json& body);

}  // namespace g4
