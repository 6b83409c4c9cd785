#include "server/response_format.h"

#include "grammar/gbnf_parser.h"
#include "grammar/json_schema.h"
#include "grammar/recognizer.h"

namespace g4 {

Result<std::string> CheckedGbnf(const std::string& gbnf) {
  auto g = grammar::ParseGbnf(gbnf);
  if (!g.ok()) return g.status();
  // A grammar too wide for the recogniser to even start is refused now, not at the first token.
  const grammar::Automaton automaton(std::move(g).value());
  if (automaton.exhausted()) return Status::Error(automaton.exhausted_reason());
  return gbnf;
}

Result<std::string> ResponseFormatGrammar(const nlohmann::ordered_json& format) {
  if (!format.is_object() || !format.contains("type") || !format["type"].is_string())
    return Status::Error("must be an object with a 'type'");
  const std::string type = format["type"];
  if (type == "text") return std::string();
  if (type == "json_object") return grammar::JsonObjectGbnf();
  if (type != "json_schema")
    return Status::Errorf("type '", type, "' is not supported (text, json_object or json_schema)");
  // Chat completions nest the schema under json_schema; the Responses API's text.format is flat.
  const nlohmann::ordered_json& spec = format.contains("json_schema") ? format["json_schema"] : format;
  if (!spec.is_object()) return Status::Error("'json_schema' must be an object");
  if (spec.contains("name") && !spec["name"].is_string()) return Status::Error("'json_schema.name' must be a string");
  if (spec.contains("strict") && !spec["strict"].is_boolean() && !spec["strict"].is_null())
    return Status::Error("'json_schema.strict' must be a boolean");
  if (!spec.contains("schema")) return Status::Error("'json_schema.schema' is required");
  auto gbnf = grammar::JsonSchemaToGbnf(spec["schema"]);
  if (!gbnf.ok()) return Status::Errorf("json_schema.schema ", gbnf.status().message());
  return CheckedGbnf(*gbnf);
}

}  // namespace g4
