// Gemma-4 chat protocol: OpenAI-style messages -> prompt text, and model output -> reasoning,
// content and tool calls (docs/gemma4.md §6; the rules follow Google's
// chat_template.jinja as copied in llama.cpp models/templates/gemma4.jinja and
// google-gemma-4-31B-it-interleaved.jinja, rendered the way Python Jinja2 would).
//
// The prompt starts with the text "<bos>", which Tokenizer::Encode turns into id 2: encode it
// without adding another BOS.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace g4 {

// The switches of the built-in format, the no-template fallback (tokenizer/chat_template.h);
// the defaults are what g4 renders when a checkpoint ships no template.
struct Gemma4TemplateFeatures {
  // "<|think|>\n" opens the system turn when thinking is on (31B / newer) rather than "<|think|>".
  bool think_newline = true;
  // With thinking off, the generation prompt ends in an empty, closed thought channel
  // "<|channel>thought\n<channel|>" (absent in some E2B revisions).
  bool empty_thought_in_prompt = true;
  // An assistant tool-call message after the last user message re-emits its reasoning_content
  // as "<|channel>thought\n...<channel|>" (31B interleaved).
  bool replay_tool_reasoning = true;
  // A tool-call message right after tool responses continues the open model turn instead of
  // opening a new "<|turn>model\n" (31B interleaved).
  bool continue_after_tool_response = true;
};

struct Gemma4ChatOptions {
  bool add_generation_prompt = true;
  bool enable_thinking = false;
  Gemma4TemplateFeatures features;
};

// messages: [{role, content, tool_calls?, tool_call_id?, name?, reasoning_content?}, ...] with
// role user | assistant | system | developer | tool; content a string, null, or an array of
// {type:"text", text} parts. tools: the OpenAI "tools" array ({type:"function", function:{name,
// description, parameters}}), or null.
// OpenAI "tool" messages are attached to the assistant message whose tool_calls they answer
// (Gemma's native tool_responses): the name comes from the matching tool_call_id, and content
// that is a JSON object or array is rendered as a structure, anything else as a string.
// `developer` is `system`. Images, audio and video are errors (g4 is text only).
Result<std::string> RenderGemma4Chat(const nlohmann::json& messages, const nlohmann::json& tools,
                                     const Gemma4ChatOptions& options = {});

struct ChatToolCall {
  std::string name;
  std::string arguments;  // a JSON object, as text (OpenAI's "arguments")
};

struct ChatOutput {
  std::string reasoning;  // the thought channel, without its "thought\n" header
  std::string content;
  std::vector<ChatToolCall> tool_calls;
  bool empty() const { return reasoning.empty() && content.empty() && tool_calls.empty(); }
};

// Streaming split of model output text (decoded with special tokens kept). Push() returns what
// can be shown now: text that might be the start of a marker ("<|chan") is held back until the
// next Push or Finish; a tool call comes out whole once "<tool_call|>" arrives. Content has its
// leading whitespace dropped. Output after an end marker (<turn|>, <eos>, <|tool_response>) is
// ignored. ParseGemma4Output(text) == the concatenation of Push(text) and Finish().
class Gemma4OutputParser {
 public:
  // keep_malformed_calls: a "call:NAME{...}" whose arguments do not parse still becomes a tool
  // call, with the model's argument text verbatim as `arguments` (for a forced tool_choice, where
  // the server promises a call; OpenAI's arguments are not guaranteed valid JSON either).
  // Otherwise such text stays visible as content.
  // in_thought: the prompt ended inside an open thought channel ("<|channel>thought\n", as v4
  // templates write after a tool response with thinking on), so output starts as reasoning.
  explicit Gemma4OutputParser(bool keep_malformed_calls = false, bool in_thought = false)
      : state_(in_thought ? State::kReasoning : State::kContent),
        keep_malformed_calls_(keep_malformed_calls) {}
  ChatOutput Push(std::string_view text);
  ChatOutput Finish();
  bool done() const { return state_ == State::kDone; }

 private:
  enum class State { kContent, kReasoning, kToolCall, kDone };
  void Drain(bool final, ChatOutput* out);
  void EmitText(std::string_view text, ChatOutput* out);
  void FinishToolCall(std::string_view body, ChatOutput* out);

  State state_;
  std::string buffer_;
  bool reasoning_header_pending_ = false;
  bool content_started_ = false;
  bool keep_malformed_calls_ = false;
};

ChatOutput ParseGemma4Output(std::string_view text);

// True when a rendered prompt leaves the model inside an open thought channel.
bool PromptOpensThought(std::string_view prompt);

// Gemma's tool-call argument syntax -> JSON: {key:<|"|>text<|"|>,n:1.5,ok:true,list:[1,2],
// obj:{k:<|"|>v<|"|>}}. Keys may be bare or <|"|>-quoted; bare values that are not numbers,
// true/false or null/None are read as strings.
Result<nlohmann::json> ParseGemma4Arguments(std::string_view text);
// The same, then a repair pass for the malformed calls models really write: 'single-quoted'
// strings, a <|"|> string missing its closing quote, unquoted strings holding commas or spaces
// ({city:Paris, France,days:2}), stray closing braces. The output parser reads calls with it.
Result<nlohmann::json> ParseGemma4ArgumentsLenient(std::string_view text);

}  // namespace g4
