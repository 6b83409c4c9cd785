// Fuzzes the chat renderer (OpenAI messages + tools -> Gemma-4 prompt). Input: a knob byte for
// the options, then JSON: either {"messages": [...], "tools": [...]} or a bare messages array.
// The server hands it whatever shape-checked JSON a client sent, so any value must render or
// give an error, never throw or read out of bounds.
#include <cstdint>
#include <cstdlib>

#include <nlohmann/json.hpp>

#include "fuzz_util.h"
#include "tokenizer/chat_gemma4.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  g4::fuzz::Knobs knobs(data, size);
  const uint8_t k = knobs.Byte();
  g4::Gemma4ChatOptions options;
  options.add_generation_prompt = k & 1;
  options.enable_thinking = k & 2;
  options.features.think_newline = k & 4;
  options.features.empty_thought_in_prompt = k & 8;
  options.features.replay_tool_reasoning = k & 16;
  options.features.continue_after_tool_response = k & 32;
  nlohmann::json j = nlohmann::json::parse(data, data + size, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return 0;
  nlohmann::json messages = j, tools = nullptr;
  if (j.is_object()) {
    messages = j.contains("messages") ? j["messages"] : nlohmann::json();
    tools = j.contains("tools") ? j["tools"] : nlohmann::json();
  }
  auto prompt = g4::RenderGemma4Chat(messages, tools, options);
  if (!prompt.ok() && prompt.status().message().empty()) std::abort();
  return 0;
}
