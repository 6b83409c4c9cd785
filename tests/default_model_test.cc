// The embedded default model (a tiny Gemma-4 trained on the King James Bible, issue 9):
// g4's logits on the expanded checkpoint match the PyTorch model that trained it (logits saved
// at export in models/default/reference.json), and greedy decoding completes well-known verses.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "kernels/ops.h"
#include "model/forward.h"
#include "model/loader.h"
#include "runtime/generate.h"
#include "runtime/sampler.h"
#include "testing/run_g4.h"
#include "tokenizer/tokenizer.h"

namespace g4 {
namespace {

std::string DefaultModelDir() { return AssetsDir() + "/models/default"; }

class DefaultModel : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto m = LoadModel(DefaultModelDir(), ModelOptions{.threads = 1});
    if (m.ok()) model_ = std::move(m).value().release();
    auto t = LoadModelTokenizer(DefaultModelDir());
    if (t.ok()) tokenizer_ = std::move(t).value().release();
  }
  static void TearDownTestSuite() {
    delete model_;
    delete tokenizer_;
  }
  void SetUp() override {
    ASSERT_NE(model_, nullptr) << "default model missing: run tools/setup.sh";
    ASSERT_NE(tokenizer_, nullptr);
  }
  std::string Complete(const std::string& prompt, int n) {
    KvCache cache(model_->plan(), 256, 64);
    GenerateOptions options;
    options.max_new_tokens = n;
    options.stop_ids = {1, 106, 107};  // stop at the end of the verse line too
    auto r = Generate(*model_, cache, tokenizer_->Encode(prompt, /*add_bos=*/true), options);
    EXPECT_TRUE(r.ok()) << r.status().message();
    if (!r.ok()) return "";
    std::vector<int> ids = r->tokens;
    if (!ids.empty() && ids.back() == 107) ids.pop_back();
    return tokenizer_->Decode(ids);
  }
  static Model* model_;
  static Tokenizer* tokenizer_;
};
Model* DefaultModel::model_ = nullptr;
Tokenizer* DefaultModel::tokenizer_ = nullptr;

TEST_F(DefaultModel, LogitsMatchThePyTorchModelThatTrainedIt) {
  std::ifstream in(SourceDir() + "/models/default/reference.json");
  ASSERT_TRUE(in.good());
  nlohmann::json ref = nlohmann::json::parse(in);
  const std::vector<int> sample_ids = ref["sample_ids"].get<std::vector<int>>();
  const int V = model_->plan().vocab;
  double max_diff = 0;
  int compared = 0;
  for (const auto& seq : ref["sequences"]) {
    const std::vector<int> ids = seq["ids"].get<std::vector<int>>();
    KvCache cache(model_->plan(), static_cast<int>(ids.size()), 16);
    Activations act;
    auto logits = Prefill(*model_, cache, ids, 16, /*all_rows=*/true, act);
    ASSERT_TRUE(logits.ok()) << logits.status().message();
    ApplySoftcapInPlace(logits->data(), static_cast<int>(logits->size()), static_cast<float>(model_->plan().softcap));
    const auto& positions = seq["positions"];
    ASSERT_LE(positions.size(), ids.size());
    for (size_t t = 0; t < positions.size(); ++t) {
      const float* row = logits->data() + t * V;
      const auto& p = positions[t];
      const auto top_ids = p["top_ids"].get<std::vector<int>>();
      const auto top_logits = p["top_logits"].get<std::vector<double>>();
      for (size_t k = 0; k < top_ids.size(); ++k, ++compared)
        max_diff = std::max(max_diff, std::abs(row[top_ids[k]] - top_logits[k]));
      EXPECT_EQ(ArgMax(row, V), top_ids[0]) << seq["ref"] << " position " << t;
      const auto sample = p["sample_logits"].get<std::vector<double>>();
      for (size_t k = 0; k < sample.size(); ++k, ++compared)
        max_diff = std::max(max_diff, std::abs(row[sample_ids[k]] - sample[k]));
    }
  }
  std::printf("default model: %d logits compared with PyTorch, max |diff| %.2e\n", compared, max_diff);
  EXPECT_GT(compared, 1000);
  EXPECT_LT(max_diff, 1e-4);
}

TEST_F(DefaultModel, GreedyDecodingCompletesVerses) {
  const std::pair<const char*, const char*> verses[] = {
      {"In the beginning God", " created the heaven and the earth."},
      {"And God said, Let there be light:", " and there was light."},
      {"The LORD is my shepherd;", " I shall not want."},
      {"In the beginning was the Word,", " and the Word was with God, and the Word was God."},
      {"For God so loved the world,",
       " that he gave his only begotten Son, that whosoever believeth in him should not perish, but "
       "have everlasting life."},
      {"Make a joyful noise unto the LORD,", " all ye lands."},
      {"I will lift up mine eyes unto the hills,", " from whence cometh my help."},
  };
  for (const auto& [prompt, expected] : verses) EXPECT_EQ(Complete(prompt, 48), expected) << prompt;
}

TEST_F(DefaultModel, ReadmeCommandPrintsTheVerse) {
  G4RunResult r = RunG4("run --prompt \"In the beginning God\" -n 9 --threads 1", /*merge_stderr=*/false);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("In the beginning God created the heaven and the earth."), std::string::npos) << r.output;
}

}  // namespace
}  // namespace g4
