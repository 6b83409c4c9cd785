// Strict and forced tool calls at the front door: when a tool has `strict: true` or
// `tool_choice` forces a call ("required" or a named function), the output is decoded under a
// grammar of Gemma-4's call syntax whose arguments follow each constrained function's
// `parameters` schema (grammar/tool_call_grammar.h), so that the call always parses and its
// `arguments` validate. Checked here: a schema the compiler cannot take is a 400 naming it.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "base/status.h"

namespace g4 {

struct ToolCallGrammars {
  std::string grammar;             // GBNF with stand-in bytes; "" when no call is constrained
  std::string grammar_in_thought;  // the same for a prompt that leaves a thought channel open
};

// tools: the OpenAI chat `tools` (already narrowed to the named function for a named choice);
// forced: tool_choice "required" or named; parallel: parallel_tool_calls. Errors name the tool.
Result<ToolCallGrammars> ToolCallGrammarsFor(const nlohmann::json& tools, bool forced, bool parallel,
                                             bool enable_thinking);

}  // namespace g4
