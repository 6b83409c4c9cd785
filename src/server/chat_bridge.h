// The server's view of the chat protocol (tokenizer/chat_gemma4): splits the model's output text
// (special markers kept) into reasoning_content / content / OpenAI tool_calls, incrementally
// for streaming, and numbers the tool calls the way OpenAI clients expect.
#pragma once

#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "tokenizer/chat_gemma4.h"

namespace g4 {

struct ChatDelta {
  std::string reasoning;
  std::string content;
  bool empty() const { return reasoning.empty() && content.empty(); }
};

class ChatOutputSplitter {
 public:
  // forced_call: the output was forced to open a tool call (tool_choice "required" or a named
  // function), so a call whose arguments do not parse is still a call (see Gemma4OutputParser).
  // in_thought: the prompt ended in an open thought channel (PromptOpensThought).
  explicit ChatOutputSplitter(bool forced_call = false, bool in_thought = false)
      : parser_(forced_call, in_thought) {}
  // Feed the generated text as it comes (decoded with special tokens kept, stop token excluded).
  ChatDelta Add(std::string_view text);
  ChatDelta Finish();
  // OpenAI tool_calls ({id, type, function:{name, arguments}}), in order; complete after Finish().
  const nlohmann::json& ToolCalls() const { return tool_calls_; }

 private:
  ChatDelta Take(ChatOutput out);
  Gemma4OutputParser parser_;
  nlohmann::json tool_calls_ = nlohmann::json::array();
};

}  // namespace g4
