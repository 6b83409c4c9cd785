// The embedded default model (a tiny Gemma-4 trained on the King James Bible, issue 9):
// g4's logits on the expanded checkpoint match the PyTorch model that trained it (logits saved
// at export in models/default/reference.json), greedy decoding completes well-known verses, and
// in the chat template the model answers and ends its turn with <turn|> as the PyTorch model does.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "kernels/ops.h"
#include "model/forward.h"
#include "model/loader.h"
#include "runtime/generate.h"
#include "runtime/sampler.h"
#include "testing/run_g4.h"
#include "tokenizer/chat_template.h"
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

// reference.json "chat": greedy exchanges of the PyTorch model (float64, full vocabulary). g4's
// template and tokenizer must give the same prompt ids, and g4's greedy answer must be the same
// tokens, ending the turn with <turn|> (106) well before the token limit.
TEST_F(DefaultModel, ChatAnswersEndTheirTurnAsThePyTorchModelDoes) {
  std::ifstream in(SourceDir() + "/models/default/reference.json");
  ASSERT_TRUE(in.good());
  const nlohmann::json ref = nlohmann::json::parse(in);
  ASSERT_TRUE(ref.contains("chat"));
  auto chat_template = ChatTemplate::Load(DefaultModelDir());
  ASSERT_TRUE(chat_template.ok()) << chat_template.status().message();
  ChatTemplateRequest request;
  int exchanges = 0;
  for (const auto& c : ref["chat"]) {
    if (c["turn"].get<int>() == 0) request.messages = nlohmann::ordered_json::array();
    request.messages.push_back({{"role", "user"}, {"content", c["question"].get<std::string>()}});
    auto text = chat_template->Render(request);
    ASSERT_TRUE(text.ok()) << text.status().message();
    const std::vector<int> prompt = tokenizer_->Encode(*text);  // the template writes <bos>
    EXPECT_EQ(prompt, c["prompt_ids"].get<std::vector<int>>()) << c["question"];

    KvCache cache(model_->plan(), 256, 64);
    GenerateOptions options;
    options.max_new_tokens = 80;
    options.stop_ids = model_->plan().config.eos_token_ids;
    auto r = Generate(*model_, cache, prompt, options);
    ASSERT_TRUE(r.ok()) << r.status().message();
    const auto expected = c["greedy_ids"].get<std::vector<int>>();
    EXPECT_EQ(r->tokens, expected) << c["question"];
    ASSERT_FALSE(r->tokens.empty());
    EXPECT_EQ(r->tokens.back(), 106) << c["question"] << " does not end its turn";
    EXPECT_EQ(r->finish_reason, "stop") << c["question"];
    std::vector<int> answer(r->tokens.begin(), r->tokens.end() - 1);
    EXPECT_EQ(tokenizer_->Decode(answer), c["greedy_text"].get<std::string>());
    request.messages.push_back({{"role", "assistant"}, {"content", tokenizer_->Decode(answer)}});
    ++exchanges;
  }
  EXPECT_GE(exchanges, 5);
}

// The command a newcomer types: `g4 run --chat` answers and stops by itself (finish "stop").
TEST_F(DefaultModel, RunChatAnswersAndStops) {
  G4RunResult r = RunG4("run --chat --prompt \"Continue: The LORD is my shepherd;\" -n 80 --threads 1 --json",
                        /*merge_stderr=*/false);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json j = nlohmann::json::parse(r.output);
  EXPECT_EQ(j["finish_reason"], "stop") << r.output;
  EXPECT_EQ(j["text"], "I shall not want.") << r.output;  // Psalm 23:1 (KJV)
}

}  // namespace
}  // namespace g4
