// The tokenizer layer (tokenizer.json, the chat-template component, Gemma-4 output parsing)
// builds on base/, io/ and template/ only: no file in src/tokenizer includes a header from a
// layer above it (model, runtime, server, ...). Test files are exempt.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <string>

namespace g4 {
namespace {

TEST(TokenizerLayering, IncludesOnlyBaseIoTemplateAndTokenizerHeaders) {
  const std::set<std::string> allowed = {"base", "io", "template", "tokenizer"};
  const std::filesystem::path dir = std::filesystem::path(G4_SOURCE_DIR) / "src" / "tokenizer";
  int files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (name.size() > 8 && name.compare(name.size() - 8, 8, "_test.cc") == 0) continue;  // tests are exempt
    std::ifstream in(entry.path());
    ++files;
    std::string line;
    while (std::getline(in, line)) {
      const std::string prefix = "#include \"";
      if (line.rfind(prefix, 0) != 0) continue;
      const std::string header = line.substr(prefix.size());
      const std::string folder = header.substr(0, header.find('/'));
      EXPECT_TRUE(allowed.count(folder)) << entry.path().filename().string() << ": " << line;
    }
  }
  EXPECT_GT(files, 5);
}

}  // namespace
}  // namespace g4
