// Fuzzes the JSON-schema compiler (src/grammar/json_schema.h): any bytes as a response_format
// schema must compile or give an error; a schema that compiles must give a grammar that parses
// (the compiler's output is never a bad grammar), and the recogniser runs over a short probe. The
// same schema as a tool's parameters (Gemma's call syntax, tool_call_grammar.h) likewise.
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>

#include "grammar/gbnf_parser.h"
#include "grammar/json_schema.h"
#include "grammar/recognizer.h"
#include "grammar/tool_call_grammar.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const auto schema = nlohmann::ordered_json::parse(text, nullptr, false);
  if (!schema.is_discarded()) {
    auto tool = g4::grammar::ToolCallGbnf({{"f", schema, true}}, {});
    if (tool.ok()) {
      g4::grammar::GbnfLimits limits;
      limits.stand_in_bytes = true;
      if (!g4::grammar::ParseGbnf(*tool, limits).ok()) std::abort();
    } else if (tool.status().message().empty()) {
      std::abort();
    }
  }
  auto gbnf = g4::grammar::JsonSchemaTextToGbnf(text);
  if (!gbnf.ok()) {
    if (gbnf.status().message().empty()) std::abort();
    return 0;
  }
  auto g = g4::grammar::ParseGbnf(*gbnf);
  // The compiler wrote a grammar its own parser refuses: a bug, unless the schema admits no value
  // at all (`{"$ref": "#"}`), which the parser reports with a message of its own.
  if (!g.ok()) {
    if (g.status().message().find("matches no string") == std::string::npos) std::abort();
    return 0;
  }
  g4::grammar::Recognizer r(std::make_shared<g4::grammar::Automaton>(std::move(g).value()));
  for (char c : std::string_view(R"({"a":[1,"x",true,null,{"b":-2.5e3}],"c":"2024-01-31"})")) {
    if (!r.Accept(static_cast<uint8_t>(c))) break;
  }
  return 0;
}
