// JSON Schema -> GBNF (gbnf_parser.h), for structured outputs. The grammar produces compact JSON
// (no whitespace at all), properties in the schema's order, optional ones possibly skipped, so
// that every sentence of the grammar validates against the schema.
//
// Supported: type (one or a list), properties, required, additionalProperties (false, true or a
// schema; with `properties`, only the declared properties are produced, which validates either
// way), enum, const, anyOf, oneOf (alternatives; oneOf's "exactly one" is left to the schema's
// author), $ref to "#", "#/$defs/..." or "#/definitions/..." (recursion allowed), items,
// minItems, maxItems, minLength, maxLength, format (date, time, date-time, uuid, email), integer
// minimum / maximum / exclusiveMinimum / exclusiveMaximum, number minimum 0, and the annotations
// (title, description, default, examples, $schema, $id, $comment, deprecated, readOnly,
// writeOnly). Anything else is an error naming the keyword and where it is.
//
// Numbers are bounded so that even a weak model must end them: at most 16 integer digits, 15
// fraction digits, 3 exponent digits.
#pragma once

#include <map>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "base/status.h"

namespace g4::grammar {

// The value syntax a schema compiles to: JSON, or Gemma-4's tool-call arguments
// ({key:<|"|>text<|"|>,n:42,...}: tool_call_grammar.h), whose strings sit between stand-in bytes FA for
// the <|"|> token and whose keys are bare words (or quoted when they are not [A-Za-z0-9_-]+).
enum class SchemaSyntax { kJson, kGemmaCall };

// A schema's grammar as rules to merge into a bigger grammar: `expression` (GBNF) produces the
// schema's values; `rules` (name -> body) are the ones it uses. Rules the compiler makes are
// named "r-PREFIX..."; the shared primitives ("string", "g-string", "number", ...) have fixed
// names and bodies, so rules from several schemas (each with its own prefix) merge by name.
struct SchemaRules {
  std::string expression;
  std::map<std::string, std::string> rules;
};
Result<SchemaRules> JsonSchemaRules(const nlohmann::ordered_json& schema, SchemaSyntax syntax,
                                    const std::string& prefix);

// `schema_json` is the schema as JSON text (parsed here with the key order kept).
Result<std::string> JsonSchemaTextToGbnf(std::string_view schema_json);
Result<std::string> JsonSchemaToGbnf(const nlohmann::ordered_json& schema);

// Any JSON object (response_format {"type":"json_object"}), compact.
std::string JsonObjectGbnf();

}  // namespace g4::grammar
