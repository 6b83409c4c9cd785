// Fuzzes the chat-template component (tokenizer/chat_template.h) the way the server drives it:
// any JSON body -> ChatTemplateRequestFromBody -> Render with g4's Gemma-4-format test template
// (tests/templates/gemma4_g4_small.jinja) and with the built-in format. Clients send anything;
// the answer must be a prompt or an error with a message, never a crash or a hang.
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <sstream>

#include <nlohmann/json.hpp>

#include "tokenizer/chat_template.h"

namespace {

const g4::ChatTemplate& TestTemplate() {
  static const g4::ChatTemplate t = [] {
    std::ifstream in(std::string(G4_SOURCE_DIR) + "/tests/templates/gemma4_g4_small.jinja");
    std::stringstream text;
    text << in.rdbuf();
    auto parsed = g4::ChatTemplate::FromSource(text.str(), g4::ChatTemplateSource::kFile,
                                               {{"bos_token", "<bos>"}, {"eos_token", "<eos>"}});
    if (!parsed.ok()) std::abort();
    return *parsed;
  }();
  return t;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto body = nlohmann::ordered_json::parse(data, data + size, nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded()) return 0;
  auto request = g4::ChatTemplateRequestFromBody(body);
  if (!request.ok()) {
    if (request.status().message().empty()) std::abort();
    return 0;
  }
  for (const g4::ChatTemplate& t : {TestTemplate(), g4::ChatTemplate::BuiltIn()}) {
    auto prompt = t.Render(*request);
    if (!prompt.ok() && prompt.status().message().empty()) std::abort();
  }
  return 0;
}
