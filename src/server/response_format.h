// Structured outputs at the front door: the request fields that constrain the output
// (`response_format` json_object / json_schema, llama-server's `grammar`) become the GBNF text of
// ApiRequest::output_grammar, checked here so that a bad schema or grammar is a 400 naming the
// problem, never a failure later.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "base/status.h"

namespace g4 {

// The grammar for an OpenAI response format object: "" for {"type":"text"}; any JSON object for
// {"type":"json_object"}; the schema's grammar (grammar/json_schema.h) for {"type":"json_schema",
// "json_schema":{"name","schema","strict"}}, and also for the flat shape of the Responses API's
// text.format ({"type":"json_schema","name","schema","strict"}). Errors name the field.
Result<std::string> ResponseFormatGrammar(const nlohmann::ordered_json& format);

// A GBNF grammar as given in the `grammar` field, checked (errors say line and column).
Result<std::string> CheckedGbnf(const std::string& gbnf);

}  // namespace g4
