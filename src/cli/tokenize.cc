// g4 tokenize / g4 detokenize: the tokenizer from the command line, and the bulk JSONL modes
// tools/tokenizer_diff.js uses to compare g4 with Hugging Face tokenizers.
#include <CLI/CLI.hpp>
#include <charconv>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/command.h"
#include "tokenizer/tokenizer.h"

namespace g4::cli {
namespace {

struct TokenizerFlags {
  std::string model_dir;
  std::string tokenizer_file;
  void Add(CLI::App& app) {
    app.add_option("--model", model_dir, "model directory holding tokenizer.json");
    app.add_option("--tokenizer", tokenizer_file, "a tokenizer.json file (overrides --model)");
  }
  std::string Path() const {
    if (!tokenizer_file.empty()) return tokenizer_file;
    return (model_dir.empty() ? DefaultModelPath() : model_dir) + "/tokenizer.json";
  }
};

std::unique_ptr<Tokenizer> LoadOrReport(const TokenizerFlags& flags) {
  auto result = Tokenizer::Load(flags.Path());
  if (!result.ok()) {
    std::fprintf(stderr, "g4: %s\n", result.status().message().c_str());
    return nullptr;
  }
  return std::move(result).value();
}

void AppendIds(const std::vector<int>& ids, char separator, std::string* out) {
  char buffer[16];
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i) out->push_back(separator);
    auto end = std::to_chars(buffer, buffer + sizeof buffer, ids[i]).ptr;
    out->append(buffer, end);
  }
}

// "2,105, 2364" or "2 105 2364" or "[2,105]" -> ids.
bool ParseIdList(const std::string& text, std::vector<int>* ids) {
  const char* p = text.data();
  const char* end = p + text.size();
  while (p < end) {
    if (*p == ',' || *p == ' ' || *p == '[' || *p == ']' || *p == '\n' || *p == '\t') {
      ++p;
      continue;
    }
    int id;
    auto [next, error] = std::from_chars(p, end, id);
    if (error != std::errc()) return false;
    ids->push_back(id);
    p = next;
  }
  return true;
}

int RunTokenize(int argc, char** argv) {
  CLI::App app{
      "Print the token ids of TEXT (comma-separated). Special-token markers in the text "
      "are parsed; no <bos> is added unless --add-bos."};
  TokenizerFlags flags;
  flags.Add(app);
  std::vector<std::string> words;
  bool jsonl = false, add_bos = false, pieces = false, check = false;
  app.add_option("text", words, "text to tokenize (words are joined with spaces)");
  app.add_flag("--jsonl", jsonl,
               "read one JSON string per stdin line, write one JSON array of ids per line");
  app.add_flag("--add-bos", add_bos, "prepend <bos>");
  app.add_flag("--pieces", pieces, "print one 'id<TAB>piece' line per token instead");
  app.add_flag("--check", check, "run the Gemma-4 tokenizer sanity checks and exit");
  CLI11_PARSE(app, argc, argv);

  auto tokenizer = LoadOrReport(flags);
  if (!tokenizer) return 1;
  if (check) {
    Status status = CheckGemma4Tokenizer(*tokenizer);
    std::printf("%s\n", status.ok() ? "tokenizer ok" : status.message().c_str());
    return status.ok() ? 0 : 1;
  }
  if (jsonl) {
    std::string line, out;
    size_t line_number = 0;
    while (std::getline(std::cin, line)) {
      ++line_number;
      std::string text;
      try {
        text = nlohmann::json::parse(line).get<std::string>();
      } catch (const std::exception& e) {
        std::fprintf(stderr, "g4 tokenize: stdin line %zu is not a JSON string: %s\n", line_number,
                     e.what());
        return 1;
      }
      out.clear();
      out.push_back('[');
      AppendIds(tokenizer->Encode(text, add_bos), ',', &out);
      out.append("]\n");
      std::fwrite(out.data(), 1, out.size(), stdout);
    }
    return 0;
  }
  if (words.empty()) {
    std::fprintf(stderr, "g4 tokenize: give TEXT or --jsonl\n");
    return 2;
  }
  std::string text;
  for (size_t i = 0; i < words.size(); ++i) text += (i ? " " : "") + words[i];
  std::vector<int> ids = tokenizer->Encode(text, add_bos);
  if (pieces) {
    for (int id : ids) std::printf("%d\t%s\n", id, std::string(tokenizer->Piece(id)).c_str());
    return 0;
  }
  std::string out;
  AppendIds(ids, ',', &out);
  std::printf("%s\n", out.c_str());
  return 0;
}

int RunDetokenize(int argc, char** argv) {
  CLI::App app{"Print the text of comma-separated token ids."};
  TokenizerFlags flags;
  flags.Add(app);
  std::vector<std::string> words;
  bool jsonl = false, skip_special = false;
  app.add_option("ids", words, "ids, e.g. 2,105,2364");
  app.add_flag("--jsonl", jsonl,
               "read one JSON array of ids per stdin line, write one JSON string per line");
  app.add_flag("--skip-special", skip_special, "leave out special tokens");
  CLI11_PARSE(app, argc, argv);

  auto tokenizer = LoadOrReport(flags);
  if (!tokenizer) return 1;
  if (jsonl) {
    std::string line;
    size_t line_number = 0;
    while (std::getline(std::cin, line)) {
      ++line_number;
      std::vector<int> ids;
      if (!ParseIdList(line, &ids)) {
        std::fprintf(stderr, "g4 detokenize: stdin line %zu is not a list of ids\n", line_number);
        return 1;
      }
      std::string out = nlohmann::json(tokenizer->Decode(ids, skip_special))
                            .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
      out.push_back('\n');
      std::fwrite(out.data(), 1, out.size(), stdout);
    }
    return 0;
  }
  std::vector<int> ids;
  for (const std::string& word : words) {
    if (!ParseIdList(word, &ids)) {
      std::fprintf(stderr, "g4 detokenize: '%s' is not a list of ids\n", word.c_str());
      return 2;
    }
  }
  std::string text = tokenizer->Decode(ids, skip_special);
  std::fwrite(text.data(), 1, text.size(), stdout);
  std::fputc('\n', stdout);
  return 0;
}

}  // namespace

G4_COMMAND("tokenize", "print token ids for text (--jsonl for bulk)", RunTokenize);
G4_COMMAND("detokenize", "print the text for token ids (--jsonl for bulk)", RunDetokenize);

}  // namespace g4::cli
