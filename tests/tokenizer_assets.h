// Test helpers: where the test assets are, and the two test tokenizers, each loaded once per
// process (loading one takes ~0.2 s). Tests that need an asset skip with a message when it is
// missing: run tools/setup.sh first.
#pragma once

#include <cstdlib>
#include <memory>
#include <string>

#include "base/mapped_file.h"
#include "testing/paths.h"
#include "tokenizer/tokenizer.h"

namespace g4::testing {

using ::g4::AssetsDir;
using ::g4::SourceDir;

// name: "gemma3" (Google's Gemma-3 tokenizer.json) or "gemma4" (the derived Gemma-4 test file).
inline std::string TokenizerPath(const std::string& name) {
  return AssetsDir() + "/tokenizer/" + name + ".json";
}

// nullptr if the file is missing; a load error is fatal (the test fails loudly).
inline const Tokenizer* SharedTokenizer(const std::string& name) {
  static std::unique_ptr<Tokenizer> gemma3, gemma4;
  static bool loaded3 = false, loaded4 = false;
  auto& slot = name == "gemma3" ? gemma3 : gemma4;
  bool& loaded = name == "gemma3" ? loaded3 : loaded4;
  if (!loaded) {
    loaded = true;
    std::string path = TokenizerPath(name);
    if (!FileExists(path)) return nullptr;
    auto result = Tokenizer::Load(path);
    if (!result.ok()) {
      fprintf(stderr, "loading %s failed: %s\n", path.c_str(), result.status().message().c_str());
      std::abort();
    }
    slot = std::move(result).value();
  }
  return slot.get();
}

}  // namespace g4::testing

#define G4_REQUIRE_TOKENIZER(var, name)                                                          \
  const ::g4::Tokenizer* var = ::g4::testing::SharedTokenizer(name);                             \
  if (!var) {                                                                                    \
    GTEST_SKIP() << "missing " << ::g4::testing::TokenizerPath(name) << " (run tools/setup.sh)"; \
  }                                                                                              \
  static_assert(true, "")
