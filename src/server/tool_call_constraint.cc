#include "server/tool_call_constraint.h"

#include <vector>

#include "grammar/gbnf_parser.h"
#include "grammar/tool_call_grammar.h"

namespace g4 {

Result<ToolCallGrammars> ToolCallGrammarsFor(const nlohmann::json& tools, bool forced, bool parallel,
                                             bool enable_thinking) {
  ToolCallGrammars out;
  if (!tools.is_array() || tools.empty()) return out;
  std::vector<grammar::ToolCallFunction> functions;
  bool any_strict = false;
  for (size_t i = 0; i < tools.size(); ++i) {
    const nlohmann::json& f = tools[i]["function"];
    if (f.contains("strict") && !f["strict"].is_boolean() && !f["strict"].is_null())
      return Status::Errorf("tools[", i, "].function.strict must be a boolean");
    const bool strict = f.contains("strict") && f["strict"] == true;
    any_strict = any_strict || strict;
    grammar::ToolCallFunction fn;
    fn.name = f["name"].get<std::string>();
    // Keys in sorted order (nlohmann::json), as the chat template's dictsort shows them.
    if (f.contains("parameters") && !f["parameters"].is_null())
      fn.parameters = nlohmann::ordered_json::parse(f["parameters"].dump());
    fn.constrained = forced || strict;
    functions.push_back(std::move(fn));
  }
  if (!forced && !any_strict) return out;
  grammar::ToolCallGrammarOptions options;
  options.require_call = forced;
  options.parallel = parallel;
  options.allow_thought = !forced && enable_thinking;
  grammar::GbnfLimits limits;
  limits.stand_in_bytes = true;
  for (bool in_thought : {false, true}) {
    options.in_thought = in_thought;
    auto gbnf = grammar::ToolCallGbnf(functions, options);
    if (!gbnf.ok()) return gbnf.status();
    auto parsed = grammar::ParseGbnf(*gbnf, limits);
    if (!parsed.ok()) return Status::Errorf("the tool-call grammar does not parse: ", parsed.status().message());
    (in_thought ? out.grammar_in_thought : out.grammar) = std::move(*gbnf);
  }
  return out;
}

}  // namespace g4
