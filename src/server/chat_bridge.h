// The server's view of the chat protocol: render OpenAI messages (+ tools, thinking) into the
// Gemma-4 prompt text, and split the model's output text (special markers kept) into
// reasoning_content / content / tool_calls, incrementally for streaming.
// The format itself lives in tokenizer/chat_gemma4; this file only adapts it to the server.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "base/status.h"

namespace g4 {

// The full prompt text, "<bos>" included, ending with the generation prompt.
Result<std::string> RenderChatPrompt(const nlohmann::json& messages, const nlohmann::json& tools,
                                     bool enable_thinking);

struct ChatDelta {
  std::string reasoning;
  std::string content;
  bool empty() const { return reasoning.empty() && content.empty(); }
};

// Feed the generated text as it comes (decoded with special tokens kept, stop token excluded).
class ChatOutputSplitter {
 public:
  ChatOutputSplitter();
  ~ChatOutputSplitter();
  ChatDelta Add(std::string_view text);
  ChatDelta Finish();
  // OpenAI tool_calls (array, possibly empty) parsed from the output; valid after Finish().
  nlohmann::json ToolCalls() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace g4
