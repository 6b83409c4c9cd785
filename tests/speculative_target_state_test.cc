// What GenerateSpeculative hands a drafter that reads the target (the assistant drafter): at every
// proposal, the target's cache holds every context token but the last, and target_hidden is the
// final-normed hidden state of the row that produced the last token, after fully and partly
// accepted drafts alike. A checking drafter recomputes both with a fresh cache and proposes the
// target's own greedy tokens, some of them spoiled, so every acceptance length occurs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "model/loader.h"
#include "runtime/generate.h"
#include "runtime/speculative.h"
#include "testing/checkpoints.h"

namespace g4 {
namespace {

class CheckingDrafter : public Drafter {
 public:
  CheckingDrafter(Model& model, std::vector<int> truth) : model_(model), truth_(std::move(truth)) {}
  const char* name() const override { return "checking"; }
  bool wants_target_state() const override { return true; }
  Status Propose(const DraftRequest& request, Draft* draft) override {
    draft->Clear();
    const std::vector<int>& ctx = *request.context;
    const int H = model_.plan().hidden, n = static_cast<int>(ctx.size());
    EXPECT_EQ(request.target_cache->n_past(), n - 1);
    EXPECT_NE(request.target_hidden, nullptr);
    if (!request.target_hidden) return OkStatus();
    // The hidden of the row at position n - 2, whose logits gave ctx[n - 1].
    KvCache cache(model_.plan(), 256, 256);
    std::vector<BatchRow> rows;
    for (int i = 0; i < n - 1; ++i) rows.push_back({ctx[i], i, &cache, i == n - 2});
    Activations act;
    std::vector<float> logits(model_.plan().vocab);
    G4_RETURN_IF_ERROR(model_.Forward(rows, act, logits.data()));
    double diff = 0;
    for (int i = 0; i < H; ++i)
      diff = std::max(diff, static_cast<double>(std::fabs(act.logits_in[i] - request.target_hidden[i])));
    worst_ = std::max(worst_, diff);
    ++calls_;
    // The target's own continuation, the (calls % 4)-th drafted token spoiled.
    const size_t done = ctx.size() - prompt_size_;
    for (int i = 0; i < request.max_tokens && done + i < truth_.size(); ++i)
      draft->tokens.push_back(i == calls_ % 4 ? (truth_[done + i] + 1) % model_.plan().vocab
                                               : truth_[done + i]);
    return OkStatus();
  }
  size_t prompt_size_ = 0;
  double worst_ = 0;
  int calls_ = 0;

 private:
  Model& model_;
  std::vector<int> truth_;
};

TEST(SpeculativeTargetState, DrafterSeesTheCacheAndHiddenOfTheLastToken) {
  for (const char* preset : {"e2b", "12b"}) {
    SCOPED_TRACE(preset);
    auto model = LoadModel(TinyCheckpoint(preset, {.vocab = 512}), {.threads = 2});
    ASSERT_TRUE(model.ok()) << model.status().message();
    Model& m = **model;
    const std::vector<int> prompt = {2, 17, 40, 99, 17, 40, 99, 5, 17, 40};
    GenerateOptions options;
    options.max_new_tokens = 40;
    options.ignore_eos = true;
    KvCache plain_cache(m.plan(), 256, 16);
    auto plain = Generate(m, plain_cache, prompt, options);
    ASSERT_TRUE(plain.ok());
    CheckingDrafter drafter(m, plain->tokens);
    drafter.prompt_size_ = prompt.size();
    KvCache cache(m.plan(), 256, 16);
    SpeculativeOptions spec;
    spec.draft_max = 3;
    auto result = GenerateSpeculative(m, cache, prompt, options, drafter, spec);
    ASSERT_TRUE(result.ok()) << result.status().message();
    EXPECT_EQ(result->tokens, plain->tokens);
    EXPECT_GT(drafter.calls_, 5);
    EXPECT_GT(result->accepted, 0);
    EXPECT_LT(result->accepted, result->drafted);
    // A batched row vs a one-row-at-the-end prefill: float32 summation-order noise only.
    EXPECT_LT(drafter.worst_, 1e-4) << "hidden handed to the drafter is not the last token's";
  }
}

}  // namespace
}  // namespace g4
