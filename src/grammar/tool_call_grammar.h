// Grammars for Gemma-4 tool calls, so that a strict or forced call always parses and its
// arguments validate against the function's `parameters` schema:
//
//   <|tool_call>call:NAME{key:<|"|>text<|"|>,n:42,ok:true,list:[1,2],obj:{k:<|"|>v<|"|>}}<tool_call|>
//
// (docs/gemma4.md; the server's parser, tokenizer/chat_gemma4.h, reads it back to JSON).
// <|tool_call>, <tool_call|>, <|"|> and the other protocol markers are single special tokens. A
// grammar runs over bytes, so each of these tokens stands for one byte that never occurs in UTF-8
// (F8-FD below): the token mask's vocabulary maps the token to its byte (StandInByte), a grammar
// writes the byte as "\xF8" (parsed with GbnfLimits::stand_in_bytes), and no ordinary token can
// spell it. Ordinary text in the grammar never holds "|>" (nor "<|" outside strings), so no
// marker can be spelled from ordinary tokens either.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/status.h"

namespace g4::grammar {

struct StandIn {
  std::string_view text;  // the special token's text
  uint8_t byte;
};
inline constexpr StandIn kStandIns[] = {
    {"<|tool_call>", 0xF8}, {"<tool_call|>", 0xF9}, {"<|\"|>", 0xFA},
    {"<|tool_response>", 0xFB}, {"<|channel>", 0xFC}, {"<channel|>", 0xFD}};
// Bytes from here up never occur in UTF-8; tokens holding them (byte-fallback tokens) are left
// out of constrained vocabularies so that only the special tokens produce the stand-ins.
inline constexpr uint8_t kFirstNonUtf8Byte = 0xF5;

// The stand-in byte of a special token's text, or 0 if it has none.
uint8_t StandInByte(std::string_view token_text);
// `bytes` with every stand-in byte replaced by its token's text (the text the model's tokens
// decode to).
std::string ExpandStandIns(std::string_view bytes);

struct ToolCallFunction {
  std::string name;
  nlohmann::ordered_json parameters;  // a JSON schema for an object; null: no arguments
  bool constrained = true;  // false: any arguments in the call syntax (a non-strict tool)
};

struct ToolCallGrammarOptions {
  // true (tool_choice "required" or a named function): the output is the call(s) and nothing
  // else. false (strict tools under "auto"): text (and a thought channel, with allow_thought)
  // may come first, and the call is optional.
  bool require_call = true;
  bool parallel = true;        // one call or more; false: one call at most
  bool allow_thought = false;  // the output may open with <|channel>...<channel|>
  bool in_thought = false;     // the prompt left a thought channel open: the output closes it first
};

// GBNF (parse with GbnfLimits::stand_in_bytes). Errors name the function and the schema keyword.
Result<std::string> ToolCallGbnf(const std::vector<ToolCallFunction>& functions,
                                 const ToolCallGrammarOptions& options);

}  // namespace g4::grammar
