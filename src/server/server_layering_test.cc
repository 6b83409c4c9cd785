// The server talks to the model only through runtime (runtime/serving_engine.h): no file in
// src/server may include io/, kernels/, model/ or parallel/ headers directly (grammar/, the
// constrained-decoding engine the server compiles response formats with, is allowed) (the build lets it:
// they lie below runtime; this test holds the server to the engine interface).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <string>

namespace g4 {
namespace {

TEST(ServerLayering, IncludesOnlyBaseRuntimeTokenizerAndServerHeaders) {
  const std::set<std::string> allowed = {"base", "grammar", "runtime", "template", "tokenizer", "server"};
  const std::filesystem::path dir = std::filesystem::path(G4_SOURCE_DIR) / "src" / "server";
  int files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
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
