// Tokenizer benchmarks: tokenizer.json load time, encode and decode throughput on a mixed text.
// The text is this repository's own sources, data and docs (code, English prose, JSON with
// multilingual strings and chat prompts), built the same way by tools/tokenizer_bench.js, which
// measures Hugging Face tokenizers on it for docs/performance.md.
//   G4_SOURCE_DIR (default: the configured source dir), G4_ASSETS (default: $G4_SOURCE_DIR/assets)
#include <benchmark/benchmark.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "testing/paths.h"
#include "tokenizer/tokenizer.h"

namespace g4 {
namespace {

std::string TokenizerPath() { return AssetsDir() + "/tokenizer/gemma4.json"; }

// Files under src/, tests/data/, tools/ and docs/ ending in .cc .h .js .py .json .md, in byte order
// of their relative paths, concatenated. Keep in sync with BenchText() in tools/tokenizer_bench.js.
const std::string& BenchText() {
  static const std::string text = [] {
    namespace fs = std::filesystem;
    std::vector<std::string> files;
    for (const char* dir : {"src", "tests/data", "tools", "docs"}) {
      fs::path root = fs::path(SourceDir()) / dir;
      if (!fs::exists(root)) continue;
      for (const auto& entry : fs::recursive_directory_iterator(root)) {
        std::string ext = entry.path().extension().string();
        if (entry.is_regular_file() && (ext == ".cc" || ext == ".h" || ext == ".js" ||
                                        ext == ".py" || ext == ".json" || ext == ".md"))
          files.push_back(fs::relative(entry.path(), SourceDir()).string());
      }
    }
    std::sort(files.begin(), files.end());
    std::string all;
    for (const std::string& file : files) {
      std::ifstream in(fs::path(SourceDir()) / file, std::ios::binary);
      std::ostringstream contents;
      contents << in.rdbuf();
      all += contents.str();
    }
    return all;
  }();
  return text;
}

const Tokenizer* SharedTokenizer(benchmark::State& state) {
  static std::unique_ptr<Tokenizer> tokenizer = [] {
    auto result = Tokenizer::Load(TokenizerPath());
    return result.ok() ? std::move(result).value() : nullptr;
  }();
  if (!tokenizer)
    state.SkipWithError(("cannot load " + TokenizerPath() + " (run tools/setup.sh)").c_str());
  return tokenizer.get();
}

void BM_TokenizerLoad(benchmark::State& state) {
  for (auto _ : state) {
    auto result = Tokenizer::Load(TokenizerPath());
    if (!result.ok()) {
      state.SkipWithError(result.status().message().c_str());
      break;
    }
    benchmark::DoNotOptimize((*result)->vocab_size());
  }
}
BENCHMARK(BM_TokenizerLoad)->Unit(benchmark::kMillisecond)->Iterations(5);

void BM_TokenizerEncode(benchmark::State& state) {
  const Tokenizer* tokenizer = SharedTokenizer(state);
  if (!tokenizer) return;
  const std::string& text = BenchText();
  size_t tokens = 0;
  for (auto _ : state) {
    std::vector<int> ids = tokenizer->Encode(text);
    tokens = ids.size();
    benchmark::DoNotOptimize(ids.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * text.size()));
  state.counters["text_bytes"] = static_cast<double>(text.size());
  state.counters["tokens"] = static_cast<double>(tokens);
  state.counters["tokens_per_s"] = benchmark::Counter(
      static_cast<double>(tokens), benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_TokenizerEncode)->Unit(benchmark::kMillisecond);

// Short prompts one at a time (a server's case): each line of the text is one call.
void BM_TokenizerEncodeLines(benchmark::State& state) {
  const Tokenizer* tokenizer = SharedTokenizer(state);
  if (!tokenizer) return;
  std::vector<std::string> lines;
  std::istringstream in(BenchText());
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  for (auto _ : state)
    for (const std::string& line : lines) benchmark::DoNotOptimize(tokenizer->Encode(line).data());
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * BenchText().size()));
  state.counters["calls"] = static_cast<double>(lines.size());
}
BENCHMARK(BM_TokenizerEncodeLines)->Unit(benchmark::kMillisecond);

void BM_TokenizerDecode(benchmark::State& state) {
  const Tokenizer* tokenizer = SharedTokenizer(state);
  if (!tokenizer) return;
  std::vector<int> ids = tokenizer->Encode(BenchText());
  for (auto _ : state) benchmark::DoNotOptimize(tokenizer->Decode(ids).data());
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * BenchText().size()));
}
BENCHMARK(BM_TokenizerDecode)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace g4
