// Fuzzes the HTTP request-body parsers of every server route (server/openai_api): chat
// completions, completions, /generate, /tokenize, /detokenize. A knob byte picks the route; the
// rest is the body. An accepted chat request is also rendered with the chat template, as the
// server does next, so shapes the validator lets through must be ones the renderer handles.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "fuzz_util.h"
#include "server/openai_api.h"
#include "tokenizer/chat_gemma4.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  g4::fuzz::Knobs knobs(data, size);
  const uint8_t k = knobs.Byte();
  const std::string body(reinterpret_cast<const char*>(data), size);
  g4::ApiError error;
  switch (k % 5) {
    case 3: {
      g4::TokenizeRequest req;
      if (!g4::ParseTokenizeRequest(body, &req, &error)) (void)g4::DumpJson(error.ToJson());
      return 0;
    }
    case 4: {
      std::vector<int> tokens;
      if (!g4::ParseDetokenizeRequest(body, 1000, &tokens, &error)) {
        (void)g4::DumpJson(error.ToJson());
        return 0;
      }
      for (int t : tokens)
        if (t < 0 || t >= 1000) std::abort();
      return 0;
    }
    default:
      break;
  }
  const g4::ApiRoute route = k % 5 == 0 ? g4::ApiRoute::kChat
                             : k % 5 == 1 ? g4::ApiRoute::kCompletion
                                          : g4::ApiRoute::kGenerate;
  g4::ApiLimits limits;
  limits.vocab = 1000;
  limits.defaults.do_sample = k & 8;
  g4::ApiRequest req;
  if (!g4::ParseApiRequest(route, body, limits, &req, &error)) {
    if (error.message.empty()) std::abort();
    (void)g4::DumpJson(error.ToJson());
    return 0;
  }
  for (int id : req.prompt_ids)
    if (id < 0 || id >= limits.vocab) std::abort();
  if (req.sampling.top_k < 0 || req.sampling.top_k > limits.vocab) std::abort();
  if (req.top_logprobs < 0 || req.top_logprobs > 20) std::abort();
  if (route == g4::ApiRoute::kChat) {
    g4::Gemma4ChatOptions options;
    options.enable_thinking = req.enable_thinking;
    auto prompt = g4::RenderGemma4Chat(req.messages, req.tools_enabled ? req.tools : nlohmann::json(),
                                       options);
    (void)prompt;
  }
  return 0;
}
