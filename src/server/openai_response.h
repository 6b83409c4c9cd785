// OpenAI response objects, built from what a generation produced: whole responses
// (chat.completion, text_completion, /generate's own shape), the SSE chunks of a stream, usage and
// logprobs. Pure functions of their arguments (request parsing is in openai_api.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/scheduler.h"
#include "server/chat_bridge.h"
#include "server/openai_api.h"

namespace g4 {

class Tokenizer;

// What every object of one response carries.
struct ResponseIdentity {
  std::string id;  // chatcmpl-..., cmpl-..., gen-...
  int64_t created = 0;
  std::string model;
};

// The whole output of a finished sequence, gathered for a non-streamed response.
struct GeneratedOutput {
  std::string content;
  std::string reasoning;
  nlohmann::json tool_calls = nlohmann::json::array();
  std::vector<nlohmann::json> logprobs;  // one LogprobEntry per token, when asked
  SequenceResult result;
};

// "tool_calls" when a call was made and the sequence stopped by itself, else the scheduler's.
std::string FinishReason(const SequenceResult& result, const nlohmann::json& tool_calls);
nlohmann::json Usage(const SequenceResult& result);
// One token's chat logprobs entry: {token, logprob, bytes, top_logprobs}.
nlohmann::json LogprobEntry(const Tokenizer& tokenizer, const TokenInfo& info);
// Legacy completions logprobs: parallel arrays built from LogprobEntry entries.
nlohmann::json CompletionLogprobs(const std::vector<nlohmann::json>& entries);

nlohmann::json ChatChunk(const ResponseIdentity& who, nlohmann::json delta, nlohmann::json finish,
                         nlohmann::json logprobs);
nlohmann::json CompletionChunk(const ResponseIdentity& who, const std::string& text, nlohmann::json finish,
                               nlohmann::json logprobs);
// One server-sent event: "data: JSON\n\n".
std::string Sse(const nlohmann::json& j);

// A non-streamed response body for `route`; `prompt` is /generate's echo of the request.
nlohmann::json WholeResponse(ApiRoute route, const ResponseIdentity& who, const GeneratedOutput& out,
                             bool logprobs, const std::string& prompt);

// The SSE text of one piece of a stream ("" when it carries nothing): a content/reasoning delta
// and its tokens' logprobs entries (null if none).
std::string StreamPiece(ApiRoute route, const ResponseIdentity& who, const ChatDelta& delta,
                        const nlohmann::json& logprobs);
// The SSE text that ends a stream: tool calls, the finish chunk, usage if asked, [DONE]; or an
// error object then [DONE] when the generation failed.
std::string StreamTail(ApiRoute route, const ResponseIdentity& who, const SequenceResult& result,
                       const nlohmann::json& tool_calls, bool include_usage);

}  // namespace g4
