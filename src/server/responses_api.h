// The OpenAI Responses API (POST /v1/responses) on top of the chat path: a Responses body is
// checked and translated into the chat-completions body it means (instructions -> a system
// message, input items -> messages, flat function tools -> chat tools, text.format ->
// response_format, reasoning.effort -> reasoning_effort), which ParseApiRequest then validates
// like any chat request; the chat template, the Gemma-4 output parser and the scheduler are the
// chat route's own. The output goes the other way: the chat splitter's reasoning/content deltas
// and tool calls become Responses output items (reasoning, message, function_call), as one
// response object or as the stream of Responses events. Pure functions of their arguments.
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "runtime/scheduler.h"
#include "server/chat_bridge.h"
#include "server/openai_api.h"

namespace g4 {

// A stored response's conversation: every message up to and including its output (not its
// instructions: OpenAI does not carry instructions over a previous_response_id).
using ResponsesLookup = std::function<std::optional<nlohmann::ordered_json>(const std::string& id)>;

struct ResponsesRequest {
  ApiRequest api;  // the chat request it translates to (route kChat)
  // The conversation without instructions: the previous response's, then this input.
  nlohmann::ordered_json conversation = nlohmann::ordered_json::array();
  bool store = true;
  // Echoed in the response object as sent (or their defaults).
  nlohmann::json instructions;  // string or null
  nlohmann::json previous_response_id;
  nlohmann::json max_output_tokens;
  nlohmann::json tools = nlohmann::json::array();  // Responses' flat shape
  nlohmann::json tool_choice = "auto";
  nlohmann::json text = {{"format", {{"type", "text"}}}};
  nlohmann::json reasoning = {{"effort", nullptr}, {"summary", nullptr}};
  nlohmann::json metadata = nlohmann::json::object();
  nlohmann::json user;
  bool parallel_tool_calls = true;
};

// Parses a /v1/responses body into *out (default-constructed). `lookup` resolves
// previous_response_id (nullopt: unknown, a 400 naming it). On failure returns false and fills
// *error; errors the chat parser reports are renamed to the Responses field they came from
// (messages -> input, max_tokens -> max_output_tokens, response_format -> text.format).
bool ParseResponsesRequest(const std::string& body, const ApiLimits& limits,
                           const ResponsesLookup& lookup, ResponsesRequest* out, ApiError* error);

// Builds a response's output items from the generation as it comes, and the Responses stream
// events that say so (each an SSE text: "event: TYPE\ndata: JSON\n\n", numbered from 0). The same
// builder serves streamed and whole responses, so both carry the same items.
class ResponsesWriter {
 public:
  ResponsesWriter(ResponsesRequest request, std::string id, int64_t created_at, std::string model);

  // response.created and response.in_progress.
  std::string Start();
  // The events of one piece of output (reasoning and/or content text).
  std::string Add(const ChatDelta& delta);
  // Closes the open item, adds the function calls, and ends with response.completed,
  // response.incomplete (max_output_tokens, timeout, cancelled) or response.failed (error).
  std::string Finish(const SequenceResult& result, const nlohmann::json& tool_calls);

  // The response object as it stands (complete after Finish).
  nlohmann::json Response() const;
  // The conversation to store for a later previous_response_id: the request's, then this turn's
  // assistant message (reasoning_content, content, tool_calls).
  nlohmann::ordered_json Conversation() const;
  const std::string& id() const { return id_; }
  const ResponsesRequest& request() const { return request_; }

 private:
  enum class Open { kNone, kReasoning, kMessage };
  std::string Event(const std::string& type, nlohmann::json fields);
  std::string OpenItem(Open kind);
  std::string CloseItem();
  std::string ItemId(const char* prefix) const;

  ResponsesRequest request_;
  std::string id_;
  int64_t created_at_;
  std::string model_;
  int64_t sequence_ = 0;
  nlohmann::json output_ = nlohmann::json::array();
  Open open_ = Open::kNone;
  std::string status_ = "in_progress";
  nlohmann::json incomplete_details_;
  nlohmann::json error_;
  nlohmann::json usage_;
  int reasoning_tokens_ = 0;
};

}  // namespace g4
