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

#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "base/status.h"

namespace g4::grammar {

// `schema_json` is the schema as JSON text (parsed here with the key order kept).
Result<std::string> JsonSchemaTextToGbnf(std::string_view schema_json);
Result<std::string> JsonSchemaToGbnf(const nlohmann::ordered_json& schema);

// Any JSON object (response_format {"type":"json_object"}), compact.
std::string JsonObjectGbnf();

}  // namespace g4::grammar
