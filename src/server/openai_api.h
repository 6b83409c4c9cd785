// OpenAI request parsing and validation, done at the front door: a request either becomes a
// typed ApiRequest or an ApiError naming the field (OpenAI error object, 4xx). Nothing past this
// point re-checks user input. Pure functions of the body, so they are unit-tested without a model.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/sampler.h"
#include "runtime/serving_engine.h"  // GenerationDefaults
#include "tokenizer/chat_template.h"

namespace g4 {

struct ApiError {
  int status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;  // the offending field, "" if none
  std::string code;   // "" -> null

  nlohmann::json ToJson() const;
};

ApiError MakeApiError(int status, std::string message, std::string type, std::string code = "",
                      std::string param = "");

enum class ApiRoute { kChat, kCompletion, kGenerate };

struct ApiRequest {
  ApiRoute route = ApiRoute::kChat;
  std::string model;

  // Chat: the messages and tools as sent (validated in shape), for the chat template.
  nlohmann::json messages;
  nlohmann::json tools;  // array, or null
  bool tools_enabled = false;  // tools given and tool_choice != "none"
  // tool_choice "required" or {"type":"function","function":{"name":...}}: the output must open
  // with a call to one of `tools` (a named choice leaves only that tool in `tools`).
  bool tool_call_forced = false;
  bool enable_thinking = false;
  // What the chat template renders (chat; /generate without raw: one user message).
  ChatTemplateRequest chat_template;

  // Completion / generate: text, or token ids (completion only).
  std::string prompt_text;
  std::vector<int> prompt_ids;
  bool has_prompt_ids = false;
  bool raw = false;  // /generate: skip the chat template

  std::optional<int64_t> max_tokens;  // none: all the room left
  SamplingParams sampling;
  std::vector<std::string> stop;
  bool ignore_eos = false;
  bool logprobs = false;
  int top_logprobs = 0;  // alternatives per token (chat: top_logprobs; completion: logprobs=N)
  bool stream = false;
  bool include_usage = false;
  double timeout_seconds = 0;  // 0: the server default
  // Structured output: the GBNF grammar (grammar/gbnf_parser.h) every generated token must keep
  // the output inside, from `response_format` (json_object / json_schema) or `grammar`; the
  // output ends when it is complete. Empty: free text. Already checked (it parses).
  std::string output_grammar;
  // output_grammar is a tool-call grammar (strict or forced tools: server/tool_call_constraint.h),
  // written with stand-in bytes for special tokens; output_grammar_in_thought is its variant for
  // a prompt that leaves a thought channel open.
  bool tool_call_grammar = false;
  std::string output_grammar_in_thought;
  bool parallel_tool_calls = true;
};

// What the parser needs to know about the model and server.
struct ApiLimits {
  int vocab = 262144;
  GenerationDefaults defaults;         // the checkpoint's generation_config
  std::vector<int> suppress_tokens;    // always suppressed
  double max_timeout_seconds = 3600;
};

// Parses a request body for `route`. On failure returns false and fills *error.
bool ParseApiRequest(ApiRoute route, const std::string& body, const ApiLimits& limits, ApiRequest* out,
                     ApiError* error);

// /tokenize and /detokenize bodies.
struct TokenizeRequest {
  std::string content;
  bool add_special = false;  // prepend <bos>
  bool with_pieces = false;
};
bool ParseTokenizeRequest(const std::string& body, TokenizeRequest* out, ApiError* error);
bool ParseDetokenizeRequest(const std::string& body, int vocab, std::vector<int>* tokens, ApiError* error);

// JSON text of a value that may hold invalid UTF-8 (replaced, never thrown on).
std::string DumpJson(const nlohmann::json& j);

}  // namespace g4
