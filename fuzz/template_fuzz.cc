// Fuzzes the Jinja engine (src/template/): parse any bytes as a template, render it against a
// small fixed chat context. Checkpoints ship their own templates, so any template must parse and
// render or give an error: never crash, hang, or exhaust the stack or memory.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include <nlohmann/json.hpp>

#include "template/template.h"

namespace {

const nlohmann::ordered_json& Context() {
  static const auto context = nlohmann::ordered_json::parse(R"({
    "messages": [
      {"role": "system", "content": "Be brief."},
      {"role": "user", "content": [{"type": "text", "text": "Hi ü"}]},
      {"role": "assistant", "content": null, "reasoning_content": "think",
       "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": {"a": [1, 2.5, null, true]}}}]},
      {"role": "tool", "name": "f", "content": "{\"ok\": 1}"}],
    "tools": [{"type": "function", "function": {"name": "f", "description": "d",
               "parameters": {"type": "object", "properties": {"a": {"type": "array", "items": {"type": "number"}}},
                              "required": ["a"]}}}],
    "add_generation_prompt": true, "enable_thinking": false, "bos_token": "<bos>", "eos_token": "<eos>"})");
  return context;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view source(reinterpret_cast<const char*>(data), size);
  auto tmpl = g4::jinja::Template::Parse(source);
  if (!tmpl.ok()) {
    if (tmpl.status().message().empty()) std::abort();
    return 0;
  }
  g4::jinja::RenderLimits limits;
  limits.max_output_bytes = size_t{1} << 20;
  limits.max_steps = 200'000;
  auto out = tmpl->Render(Context(), limits);
  if (!out.ok() && out.status().message().empty()) std::abort();
  return 0;
}
