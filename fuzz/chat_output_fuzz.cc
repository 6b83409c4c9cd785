// Fuzzes model-output parsing: the streaming Gemma4OutputParser (fed in fuzzer-chosen chunks),
// ParseGemma4Output, the tool-call argument parser and chat-template detection. The streaming
// split must agree with the one-shot parse (documented in chat_gemma4.h), and whatever it
// returns must be serializable as the JSON the server sends.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include <nlohmann/json.hpp>

#include "fuzz_util.h"
#include "tokenizer/chat_gemma4.h"
#include "tokenizer/chat_template.h"

namespace {

void Append(const g4::ChatOutput& part, g4::ChatOutput* all) {
  all->reasoning += part.reasoning;
  all->content += part.content;
  for (const auto& call : part.tool_calls) {
    // arguments must be a JSON object text (OpenAI clients JSON.parse it).
    nlohmann::json args = nlohmann::json::parse(call.arguments, nullptr, false);
    if (args.is_discarded() || !args.is_object()) std::abort();
    all->tool_calls.push_back(call);
  }
}

bool Same(const g4::ChatOutput& a, const g4::ChatOutput& b) {
  if (a.reasoning != b.reasoning || a.content != b.content) return false;
  if (a.tool_calls.size() != b.tool_calls.size()) return false;
  for (size_t i = 0; i < a.tool_calls.size(); ++i)
    if (a.tool_calls[i].name != b.tool_calls[i].name ||
        a.tool_calls[i].arguments != b.tool_calls[i].arguments)
      return false;
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  g4::fuzz::Knobs knobs(data, size);
  const uint8_t chunk_seed = knobs.Byte();
  std::string_view text(reinterpret_cast<const char*>(data), size);

  g4::ChatOutput whole;
  Append(g4::ParseGemma4Output(text), &whole);

  g4::Gemma4OutputParser parser;
  g4::ChatOutput streamed;
  size_t pos = 0, step = 0;
  while (pos < text.size()) {
    // Chunk lengths 1..8 from the seed: token pieces are short, and markers split anywhere.
    size_t n = 1 + ((chunk_seed >> (step % 6)) + step) % 8;
    ++step;
    n = std::min(n, text.size() - pos);
    // The server feeds IncrementalDecoder output, which never splits a UTF-8 character.
    while (pos + n < text.size() && (static_cast<uint8_t>(text[pos + n]) & 0xC0) == 0x80) ++n;
    Append(parser.Push(text.substr(pos, n)), &streamed);
    pos += n;
  }
  Append(parser.Finish(), &streamed);
  if (!Same(whole, streamed)) {
    auto show = [](const char* what, const g4::ChatOutput& o) {
      std::fprintf(stderr, "%s: reasoning=%s content=%s calls=%zu\n", what,
                   nlohmann::json(o.reasoning).dump(-1, ' ', true, nlohmann::json::error_handler_t::replace).c_str(),
                   nlohmann::json(o.content).dump(-1, ' ', true, nlohmann::json::error_handler_t::replace).c_str(),
                   o.tool_calls.size());
    };
    show("one-shot", whole);
    show("streamed", streamed);
    std::abort();
  }

  auto args = g4::ParseGemma4Arguments(text);
  if (args.ok()) (void)args->dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  auto repaired = g4::ParseGemma4ArgumentsLenient(text);
  if (repaired.ok()) (void)repaired->dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  (void)g4::DetectChatTemplateVersion(std::string(text));
  return 0;
}
