#include "grammar/tool_call_grammar.h"

#include <map>

#include "grammar/json_schema.h"

namespace g4::grammar {

uint8_t StandInByte(std::string_view token_text) {
  for (const StandIn& s : kStandIns)
    if (s.text == token_text) return s.byte;
  return 0;
}

std::string ExpandStandIns(std::string_view bytes) {
  std::string out;
  for (char c : bytes) {
    bool replaced = false;
    for (const StandIn& s : kStandIns)
      if (static_cast<uint8_t>(c) == s.byte) {
        out += s.text;
        replaced = true;
      }
    if (!replaced) out += c;
  }
  return out;
}

namespace {

// Free text that cannot spell a marker: no "<|" and no "|>" (a small automaton: after '<' no
// '|', after '|' no '>').
const char* kTextRules =
    "text ::= [^<|] text | \"<\" text-lt | \"|\" text-bar | \"\"\n"
    "text-lt ::= [^<|] text | \"<\" text-lt | \"\"\n"
    "text-bar ::= [^<|>] text | \"<\" text-lt | \"|\" text-bar | \"\"\n";

}  // namespace

Result<std::string> ToolCallGbnf(const std::vector<ToolCallFunction>& functions,
                                 const ToolCallGrammarOptions& options) {
  if (functions.empty()) return Status::Error("no functions to call");
  std::map<std::string, std::string> rules;
  std::string calls;
  for (size_t i = 0; i < functions.size(); ++i) {
    const ToolCallFunction& f = functions[i];
    if (f.name.empty() || f.name.find('{') != std::string::npos || f.name.find("|>") != std::string::npos ||
        f.name.find(':') != std::string::npos)
      return Status::Errorf("function name '", f.name, "' cannot be written in Gemma's call syntax");
    std::string args = "g-object";
    if (f.constrained) {
      nlohmann::ordered_json schema = f.parameters;
      if (schema.is_null()) schema = {{"type", "object"}, {"properties", nlohmann::ordered_json::object()},
                                      {"additionalProperties", false}};
      // A schema without a type, and not a reference or a choice, is an object's (arguments
      // always are one).
      if (schema.is_object() && !schema.contains("type"))
        if (!schema.contains("$ref") && !schema.contains("anyOf") && !schema.contains("oneOf") &&
            !schema.contains("enum") && !schema.contains("const"))
          schema["type"] = "object";
      if (!schema.is_object() || !schema.contains("type") || schema["type"] != "object")
        return Status::Errorf("function '", f.name, "': 'parameters' must be an object schema (\"type\": \"object\")");
      auto compiled = JsonSchemaRules(schema, SchemaSyntax::kGemmaCall, Str("f", i, "-"));
      if (!compiled.ok()) return Status::Errorf("function '", f.name, "' parameters ", compiled.status().message());
      args = compiled->expression;
      rules.insert(compiled->rules.begin(), compiled->rules.end());
    } else {
      auto any = JsonSchemaRules(nlohmann::ordered_json{{"type", "object"}}, SchemaSyntax::kGemmaCall, "any-");
      if (!any.ok()) return any.status();
      args = any->expression;
      rules.insert(any->rules.begin(), any->rules.end());
    }
    std::string literal = "\"call:";
    for (char c : f.name) {
      if (c == '"' || c == '\\') literal += '\\';
      literal += c;
    }
    rules[Str("call-", i)] = literal + "\" " + args;
    calls += Str(i ? " | " : "", "call-", i);
  }
  rules["call"] = "\"\\xF8\" (" + calls + ") \"\\xF9\"";
  // After parallel calls the model may hand over with <|tool_response> (as the chat format does)
  // or end its turn.
  rules["calls"] = options.parallel ? "call+ \"\\xFB\"?" : "call";
  std::string output;
  if (options.require_call) {
    output = "calls";
  } else {
    output = Str(options.allow_thought ? "(\"\\xFC\" text \"\\xFD\")? " : "", "text calls?");
  }
  const std::string root = options.in_thought ? Str(options.require_call ? "" : "text ", "\"\\xFD\" tool-output")
                                              : std::string("tool-output");
  std::string out = "root ::= " + root + "\n";
  rules["tool-output"] = output;
  for (const auto& [name, body] : rules) out += name + " ::= " + body + "\n";
  if (!options.require_call) out += kTextRules;
  return out;
}

}  // namespace g4::grammar
