// Fuzzes the /v1/responses body parser (server/responses_api): any body either becomes a chat
// request or a 400 with a message; an accepted one is rendered with the built-in chat format, as
// the server does next, and its output is written through the ResponsesWriter, whose every event
// and final response must be JSON. previous_response_id "resp_1" resolves to a stored
// conversation, so chained bodies are reached too.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "server/responses_api.h"
#include "tokenizer/chat_gemma4.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string body(reinterpret_cast<const char*>(data), size);
  g4::ApiLimits limits;
  limits.vocab = 1000;
  const g4::ResponsesLookup lookup =
      [](const std::string& id) -> std::optional<nlohmann::ordered_json> {
    if (id != "resp_1") return std::nullopt;
    return nlohmann::ordered_json::parse(
        R"([{"role":"user","content":"q"},{"role":"assistant","content":"","tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}}]}])");
  };
  g4::ResponsesRequest req;
  g4::ApiError error;
  if (!g4::ParseResponsesRequest(body, limits, lookup, &req, &error)) {
    if (error.message.empty() || error.status != 400) std::abort();
    (void)g4::DumpJson(error.ToJson());
    return 0;
  }
  if (req.api.route != g4::ApiRoute::kChat || req.api.chat_template.messages.empty()) std::abort();
  g4::Gemma4ChatOptions options;
  options.enable_thinking = req.api.enable_thinking;
  (void)g4::RenderGemma4Chat(req.api.messages,
                             req.api.tools_enabled ? req.api.tools : nlohmann::json(), options);
  // The body's own text as model output: reasoning, then content, then one call.
  g4::ResponsesWriter writer(std::move(req), "resp_f-1", 0, "m");
  std::string sse = writer.Start();
  sse += writer.Add({body.substr(0, size / 2), ""});
  sse += writer.Add({"", body.substr(size / 2)});
  g4::SequenceResult result;
  result.finish_reason = size % 2 ? "stop" : "length";
  const nlohmann::json calls =
      nlohmann::json::array({{{"id", "call_0"},
                              {"type", "function"},
                              {"function", {{"name", "f"}, {"arguments", body}}}}});
  sse += writer.Finish(result, size % 3 ? nlohmann::json::array() : calls);
  (void)g4::DumpJson(writer.Response());
  (void)writer.Conversation();
  if (sse.find("event: response.created\n") != 0) std::abort();
  return 0;
}
