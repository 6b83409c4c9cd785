// Chat-template rendering speed: a 20-turn conversation with three tools (nested parameter
// schemas, tool calls and results, reasoning) through src/template/testdata/gemma4_style.jinja,
// a template in the style of Gemma-4's (recursive macros, dictsort, namespaces), and the same
// conversation as a request through the chat-template component.
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "template/template.h"
#include "tokenizer/chat_template.h"

namespace g4 {
namespace {

std::string ReadTemplate() {
  const char* env = std::getenv("G4_SOURCE_DIR");
  std::ifstream in(std::string(env && *env ? env : G4_SOURCE_DIR) + "/src/template/testdata/gemma4_style.jinja");
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

nlohmann::ordered_json Conversation() {
  using json = nlohmann::ordered_json;
  json tools = json::array();
  for (int t = 0; t < 3; ++t) {
    tools.push_back(json::parse(R"({"type": "function", "function": {"name": "tool_)" + std::to_string(t) + R"(",
      "description": "Looks things up in a database of places and times.",
      "parameters": {"type": "object", "required": ["city", "options"], "properties": {
        "city": {"type": "string", "description": "City name"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
        "days": {"type": "integer", "description": "How many days"},
        "options": {"type": "object", "description": "Extra options", "required": ["hourly"], "properties": {
          "hourly": {"type": "boolean"}, "fields": {"type": "array", "items": {"type": "string"}}}}}}}})"));
  }
  json messages = json::array({json{{"role", "system"}, {"content", "You are a helpful assistant. Answer briefly."}}});
  for (int turn = 0; turn < 20; ++turn) {
    messages.push_back({{"role", "user"}, {"content", "Question number " + std::to_string(turn) + ": what is the weather in Zürich?"}});
    if (turn % 3 == 1) {
      messages.push_back(json::parse(R"({"role": "assistant", "content": null, "reasoning_content": "I should call the tool.",
        "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "tool_1",
          "arguments": {"city": "Zürich", "days": 3, "options": {"hourly": true, "fields": ["temp", "wind"]}}}}]})"));
      messages.push_back({{"role", "tool"}, {"name", "tool_1"}, {"content", "{\"temp\": 21.5, \"wind\": \"calm\"}"}});
    }
    messages.push_back({{"role", "assistant"}, {"content", "It is sunny and 21 degrees, with a light breeze from the west."}});
  }
  return json{{"messages", messages}, {"tools", tools}, {"add_generation_prompt", true},
              {"enable_thinking", false}, {"bos_token", "<bos>"}};
}

// Times render() (a Result<std::string>) and reports the prompt's size.
template <typename Render>
void TimeRenders(benchmark::State& state, Render render) {
  size_t bytes = 0;
  for (auto _ : state) {
    auto out = render();
    if (!out.ok()) {
      state.SkipWithError(out.status().message().c_str());
      return;
    }
    bytes = out->size();
    benchmark::DoNotOptimize(out);
  }
  state.counters["prompt_bytes"] = static_cast<double>(bytes);
}

void BM_TemplateRender20TurnsWithTools(benchmark::State& state) {
  auto tmpl = jinja::Template::Parse(ReadTemplate());
  if (!tmpl.ok()) {
    state.SkipWithError(tmpl.status().message().c_str());
    return;
  }
  const auto context = Conversation();
  TimeRenders(state, [&] { return tmpl->Render(context); });
}
BENCHMARK(BM_TemplateRender20TurnsWithTools)->Unit(benchmark::kMicrosecond);

// The whole chat path of a request: the OpenAI body (tool-call arguments as JSON strings, as
// clients send them) through the chat-template component (tokenizer/chat_template.h), with g4's
// Gemma-4-format test template, or the template file in G4_BENCH_CHAT_TEMPLATE (e.g. a real one).
void BM_ChatTemplateRender20TurnsWithTools(benchmark::State& state) {
  const char* override_path = std::getenv("G4_BENCH_CHAT_TEMPLATE");
  const char* env = std::getenv("G4_SOURCE_DIR");
  std::ifstream in(override_path && *override_path
                       ? std::string(override_path)
                       : std::string(env && *env ? env : G4_SOURCE_DIR) + "/tests/templates/gemma4_g4_small.jinja");
  std::stringstream text;
  text << in.rdbuf();
  auto tmpl = ChatTemplate::FromSource(text.str(), ChatTemplateSource::kFile, {{"bos_token", "<bos>"}});
  if (!tmpl.ok()) {
    state.SkipWithError(tmpl.status().message().c_str());
    return;
  }
  auto context = Conversation();
  ChatTemplateRequest request;
  for (auto& m : context["messages"])
    if (m.contains("tool_calls"))
      for (auto& call : m["tool_calls"]) call["function"]["arguments"] = call["function"]["arguments"].dump();
  request.messages = context["messages"];
  request.tools = context["tools"];
  TimeRenders(state, [&] { return tmpl->Render(request); });
}
BENCHMARK(BM_ChatTemplateRender20TurnsWithTools)->Unit(benchmark::kMicrosecond);

void BM_TemplateParse(benchmark::State& state) {
  const std::string source = ReadTemplate();
  for (auto _ : state) benchmark::DoNotOptimize(jinja::Template::Parse(source));
}
BENCHMARK(BM_TemplateParse)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace g4
