// The assistant (MTP) drafter inside continuous batching (g4 serve --spec mtp): every slot's
// drafter must see THAT slot's cache (holding every context token but the last) and the hidden
// state of THAT slot's row which gave the last token, while 6 sequences share each step. A
// checking drafter recomputes both from the context with a fresh cache, compares, and checks that
// the assistant drafts the same from the scheduler's state as from the fresh one; it then proposes
// the target's own greedy tokens, every other proposal spoiled, so each acceptance length occurs.
// Then the real MtpDrafter per slot (one shared assistant) must give the plain greedy tokens.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>

#include "model/assistant.h"
#include "model/loader.h"
#include "model/synth_assistant.h"
#include "runtime/generate.h"
#include "runtime/mtp_drafter.h"
#include "runtime/scheduler.h"
#include "testing/checkpoints.h"
#include "testing/scripted_drafter.h"
#include "testing/sequences.h"

namespace g4 {
namespace {

struct Shared {
  Model* model = nullptr;
  Assistant* assistant = nullptr;
  const std::vector<std::vector<int>>* prompts = nullptr;
  const std::vector<std::vector<int>>* plain = nullptr;
};

class CheckingDrafter : public Drafter {
 public:
  explicit CheckingDrafter(const Shared& s) : s_(s) {}
  const char* name() const override { return "checking"; }
  bool wants_target_state() const override { return true; }
  Status Propose(const DraftRequest& request, Draft* draft) override {
    draft->Clear();
    const std::vector<int>& ctx = *request.context;
    const int n = static_cast<int>(ctx.size()), H = s_.model->plan().hidden;
    EXPECT_EQ(request.target_cache->n_past(), n - 1);
    EXPECT_NE(request.target_hidden, nullptr);
    EXPECT_EQ(request.min_probability, 0.25f);  // the scheduler's draft_p_min
    if (!request.target_hidden || request.target_cache->n_past() != n - 1) return OkStatus();
    // The hidden of the row at position n - 2, whose logits gave ctx[n - 1], from a fresh cache.
    KvCache fresh(s_.model->plan(), 256, 256);
    std::vector<BatchRow> rows;
    for (int i = 0; i < n - 1; ++i) rows.push_back({ctx[i], i, &fresh, i == n - 2});
    Activations act;
    std::vector<float> logits(s_.model->plan().vocab);
    G4_RETURN_IF_ERROR(s_.model->Forward(rows, act, logits.data()));
    for (int i = 0; i < H; ++i)
      worst = std::max(worst, static_cast<double>(std::fabs(act.logits_in[i] - request.target_hidden[i])));
    // The assistant reads the cache's K/V: its drafts from the slot's state and the fresh one agree.
    std::vector<int> from_slot, from_fresh;
    const std::vector<float> hidden(act.logits_in.begin(), act.logits_in.begin() + H);
    G4_RETURN_IF_ERROR(s_.assistant->Draft(*request.target_cache, ctx.back(), n - 1,
                                           request.target_hidden, 3, &from_slot));
    G4_RETURN_IF_ERROR(s_.assistant->Draft(fresh, ctx.back(), n - 1, hidden.data(), 3, &from_fresh));
    EXPECT_EQ(from_slot, from_fresh) << "the assistant's drafts depend on the slot's state";
    ++calls;
    // The target's own continuation of this context's prompt, every other proposal spoiled.
    return script_.Propose(request, draft);
  }
  double worst = 0;
  int calls = 0;

 private:
  Shared s_;
  ScriptedDrafter script_{s_.prompts, s_.plain, [vocab = s_.model->plan().vocab](int call, std::vector<int>& d) {
                            if (call % 2 == 0 && !d.empty()) d.back() = (d.back() + 1) % vocab;
                          }};
};

TEST(SchedulerMtp, EachSlotDraftsFromItsOwnCacheAndHidden) {
  auto loaded = LoadModel(TinyCheckpoint("e2b", {.vocab = 512}), {.threads = 2});
  ASSERT_TRUE(loaded.ok()) << loaded.status().message();
  Model& model = **loaded;
  auto spec = SynthAssistantPreset("e2b-assistant", "tiny");
  ASSERT_TRUE(spec.ok());
  const std::string dir = TestTempDir("e2b-assistant");
  ASSERT_TRUE(WriteSynthAssistant(*spec, {.vocab = 512}, dir).ok());
  auto assistant = Assistant::Load(dir, model);
  ASSERT_TRUE(assistant.ok()) << assistant.status().message();
  std::shared_ptr<Assistant> shared_assistant = std::move(assistant).value();

  // Prompts of different lengths (prefills of different chunks share steps with decoding slots);
  // 30 new tokens run past the tiny presets' sliding windows.
  const int n = 6, max_new = 30;
  std::vector<std::vector<int>> prompts, plain;
  for (int i = 0; i < n; ++i) {
    std::vector<int> p;
    for (int k = 0; k < 4 + 3 * i; ++k) p.push_back(2 + (37 * k + 101 * i) % 500);
    prompts.push_back(p);
    KvCache cache(model.plan(), 128, 16);
    GenerateOptions go;
    go.max_new_tokens = max_new;
    go.ignore_eos = true;
    auto r = Generate(model, cache, p, go);
    ASSERT_TRUE(r.ok()) << r.status().message();
    plain.push_back(r->tokens);
  }
  SchedulerOptions so;
  so.parallel = n;
  so.context = 128;
  so.prefill_chunk = 8;
  so.draft_max = 3;
  so.draft_p_min = 0.25f;

  const Shared shared{&model, shared_assistant.get(), &prompts, &plain};
  std::vector<CheckingDrafter*> checkers;
  so.make_drafter = [&](int) {
    auto d = std::make_unique<CheckingDrafter>(shared);
    checkers.push_back(d.get());
    return d;
  };
  {
    Scheduler scheduler(model, so);
    std::vector<SequenceRunner> runners(n);
    for (int i = 0; i < n; ++i)
      ASSERT_EQ(scheduler.Submit(runners[i].Request(prompts[i], max_new)).admission, Admission::kAccepted);
    for (int i = 0; i < n; ++i) EXPECT_EQ(runners[i].future.get().tokens, plain[i]) << "sequence " << i;
    const SchedulerStats s = scheduler.stats();
    EXPECT_GT(s.spec_accepted, 0u);
    EXPECT_LT(s.spec_accepted, s.spec_drafted) << "no draft was rejected: partial acceptance untested";
    for (const CheckingDrafter* c : checkers) {
      EXPECT_GT(c->calls, 5);
      // A batched row vs a one-row-at-the-end prefill: float32 summation-order noise only.
      EXPECT_LT(c->worst, 1e-4) << "the hidden handed to a slot's drafter is not its last token's";
    }
  }

  // The real drafter, one per slot over the shared assistant, for two rounds (the second reuses
  // the slots' cached prefixes).
  so.make_drafter = [&](int) { return std::make_unique<MtpDrafter>(shared_assistant); };
  Scheduler scheduler(model, so);
  for (int round = 0; round < 2; ++round) {
    std::vector<SequenceRunner> runners(n);
    for (int i = 0; i < n; ++i)
      ASSERT_EQ(scheduler.Submit(runners[i].Request(prompts[i], max_new)).admission, Admission::kAccepted);
    for (int i = 0; i < n; ++i) {
      const SequenceOutcome o = runners[i].future.get();
      EXPECT_EQ(o.result.finish_reason, "length");
      EXPECT_EQ(o.tokens, plain[i]) << "round " << round << ", sequence " << i;
    }
  }
  const SchedulerStats s = scheduler.stats();
  EXPECT_TRUE(s.speculative);
  EXPECT_GT(s.spec_drafted, 0u);
  EXPECT_EQ(s.spec_tokens, static_cast<uint64_t>(2 * n * (max_new - 1)));
}

}  // namespace
}  // namespace g4
