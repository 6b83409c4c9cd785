#include "server/chat_bridge.h"

namespace g4 {

ChatDelta ChatOutputSplitter::Take(ChatOutput out) {
  for (auto& call : out.tool_calls) {
    tool_calls_.push_back({{"id", "call_" + std::to_string(tool_calls_.size())},
                           {"type", "function"},
                           {"function", {{"name", call.name}, {"arguments", call.arguments}}}});
  }
  return ChatDelta{std::move(out.reasoning), std::move(out.content)};
}

ChatDelta ChatOutputSplitter::Add(std::string_view text) { return Take(parser_.Push(text)); }

ChatDelta ChatOutputSplitter::Finish() { return Take(parser_.Finish()); }

}  // namespace g4
