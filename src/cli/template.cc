// g4 template: the prompt a chat-completions request body renders to with the model's own chat
// template, printed exactly (no newline of its own), as the server would tokenize it.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <iostream>
#include <iterator>
#include <string>

#include <nlohmann/json.hpp>

#include "base/mapped_file.h"
#include "cli/cli_util.h"
#include "cli/command.h"
#include "tokenizer/chat_template.h"

namespace g4::cli {
namespace {

int RunTemplate(int argc, char** argv) {
  CLI::App app{"g4 template: render a chat-completions request with the model's chat template"};
  std::string model_dir = DefaultModelPath();
  std::string request_path;
  app.add_option("--model", model_dir, "model directory or g4 pack artifact");
  app.add_option("--request", request_path, "the JSON body a client POSTs to /v1/chat/completions (- = stdin)")
      ->required();
  CLI11_PARSE(app, argc, argv);

  std::string body;
  if (request_path == "-") {
    body.assign(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
  } else {
    auto text = ReadFileToString(request_path);
    if (!text.ok()) return Fail("template", text.status());
    body = std::move(*text);
  }
  const auto json = nlohmann::ordered_json::parse(body, nullptr, false);
  if (json.is_discarded()) return Fail("template", Status::Errorf(request_path, ": not valid JSON"));
  auto request = ChatTemplateRequestFromBody(json);
  if (!request.ok()) return Fail("template", request.status());
  auto chat_template = ChatTemplate::Load(model_dir);
  if (!chat_template.ok()) return Fail("template", chat_template.status());
  auto prompt = chat_template->Render(*request);
  if (!prompt.ok()) return Fail("template", prompt.status());
  std::fwrite(prompt->data(), 1, prompt->size(), stdout);
  return std::fflush(stdout) == 0 ? 0 : 1;
}

}  // namespace

G4_COMMAND("template", "print the prompt a chat request renders to with the model's chat template", RunTemplate);

}  // namespace g4::cli
