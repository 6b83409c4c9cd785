// A Jinja chat template, rendered as Hugging Face transformers renders it: Jinja2's
// ImmutableSandboxedEnvironment with trim_blocks, lstrip_blocks and loop controls, tojson as
// json.dumps(ensure_ascii=False), and the globals raise_exception() and strftime_now().
//
//   G4_ASSIGN_OR_RETURN(auto tmpl, jinja::Template::Parse(source));
//   G4_ASSIGN_OR_RETURN(std::string prompt, tmpl.Render(context));  // messages, tools, ...
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "base/status.h"
#include "template/interpreter.h"

namespace g4::jinja {

class Template {
 public:
  // Errors name the line: "line 3: unexpected end of template, expected 'endif'".
  static Result<Template> Parse(std::string_view source);

  // `context` holds the template's variables; object key order is kept (Python dicts keep it).
  Result<std::string> Render(const nlohmann::ordered_json& context, const RenderLimits& limits = {}) const;
  Result<std::string> Render(const nlohmann::json& context, const RenderLimits& limits = {}) const;
  // A context already converted (a dict): callers that build it themselves skip a JSON copy.
  Result<std::string> RenderValue(const Value& context, const RenderLimits& limits = {}) const;

 private:
  explicit Template(std::shared_ptr<const Body> body) : body_(std::move(body)) {}
  std::shared_ptr<const Body> body_;
};

// JSON -> template value (ints stay ints, floats floats; object order kept).
Value FromJson(const nlohmann::ordered_json& json);
Value FromJson(const nlohmann::json& json);

}  // namespace g4::jinja
