// Speculative decoding (runtime/speculative.h) against plain decoding and the float64 reference:
// greedy output token for token on every tiny preset, at the sliding rings' wrap with the
// tightest ring the drafts allow, with prompt lookup, a draft model that agrees (the target
// itself: long accepted runs and bonus tokens) and one that mostly does not (rejections and
// rollbacks every pass), in q8/q4, from a packed artifact and over two tensor-parallel ranks.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>

#include "model/architecture.h"
#include "model/loader.h"
#include "model/pack_writer.h"
#include "model/random_prompt.h"
#include "parallel/tensor_parallel.h"
#include "reference/reference.h"
#include "runtime/draft_model_drafter.h"
#include "runtime/generate.h"
#include "runtime/ngram_drafter.h"
#include "runtime/speculative.h"
#include "testing/checkpoints.h"
#include "testing/compare.h"

namespace g4 {
namespace {

constexpr int kVocab = 512;
constexpr int kNew = 40;
constexpr int kDraftMax = 4;

int Window(const ModelPlan& plan) {
  int window = 0;
  for (const auto& l : plan.layers) window = std::max(window, l.window);
  return window;
}

std::unique_ptr<Model> Load(const std::string& source, WeightType quant = WeightType::kBF16) {
  ModelOptions options;
  options.threads = 2;
  options.load.quant = quant;
  auto model = LoadModel(source, options);
  EXPECT_TRUE(model.ok()) << model.status().message();
  return model.ok() ? std::move(*model) : nullptr;
}

GenerateOptions Greedy() {
  GenerateOptions options;
  options.max_new_tokens = kNew;
  options.ignore_eos = true;
  options.prefill_chunk = kDraftMax + 1;
  return options;
}

// A cache whose rings are as small as drafts of kDraftMax allow: window + kDraftMax slots.
KvCache TightCache(const Model& model) { return KvCache(model.plan(), 128, kDraftMax + 1); }

std::vector<int> Plain(Model& model, const std::vector<int>& prompt) {
  KvCache cache = TightCache(model);
  auto r = Generate(model, cache, prompt, Greedy());
  EXPECT_TRUE(r.ok()) << r.status().message();
  return r.ok() ? r->tokens : std::vector<int>{};
}

GenerateResult Speculative(Model& model, const std::vector<int>& prompt, Drafter& drafter,
                           SpeculativeOptions spec = {.draft_max = kDraftMax},
                           GenerateOptions options = Greedy()) {
  KvCache cache = TightCache(model);
  auto r = GenerateSpeculative(model, cache, prompt, options, drafter, spec);
  EXPECT_TRUE(r.ok()) << r.status().message();
  if (!r.ok()) return {};
  // Left as Generate leaves it: every token but the last generated one.
  EXPECT_EQ(cache.n_past(), static_cast<int64_t>(prompt.size() + r->tokens.size()) - 1);
  return *r;
}

std::unique_ptr<Drafter> DraftWith(Model& draft, const SamplingParams& sampling = {}) {
  auto d = DraftModelDrafter::Create(draft, kVocab, sampling, 128, kDraftMax + 1);
  EXPECT_TRUE(d.ok()) << d.status().message();
  return d.ok() ? std::move(*d) : nullptr;
}

// A prompt past twice the largest window whose reference greedy trace is decisive: every step's
// top-1/top-2 gap is far above the engine's accepted error, so argmax comparisons are meaningful.
std::vector<int> DecisivePrompt(const std::string& dir, const ModelPlan& plan,
                                std::vector<int>* expected) {
  auto ref = reference::ReferenceModel::Load(dir);
  EXPECT_TRUE(ref.ok()) << ref.status().message();
  if (!ref.ok()) return {};
  const int window = Window(plan);
  for (uint32_t seed = 100; seed < 120; ++seed) {
    std::vector<int> p = RandomPromptIds(2 * window + 3, plan.vocab, seed);
    // A repeated stretch, so prompt lookup finds matches.
    p.insert(p.end(), p.begin() + 3, p.begin() + 3 + window / 2);
    auto ref64 = (*ref)->Logits<double>(p);
    auto ref32 = (*ref)->Logits<float>(p);
    EXPECT_TRUE(ref64.ok() && ref32.ok());
    const double margin = 8 * std::max(2e-3, 5 * MaxAbsDiff(*ref32, *ref64));
    auto trace = (*ref)->GreedyTrace(p, kNew);
    EXPECT_TRUE(trace.ok()) << trace.status().message();
    if (!trace.ok()) return {};
    double min_gap = 1e9;
    for (const auto& s : *trace) min_gap = std::min(min_gap, s.top1 - s.top2);
    if (min_gap <= margin) continue;
    expected->clear();
    for (const auto& s : *trace) expected->push_back(s.token);
    return p;
  }
  ADD_FAILURE() << "no decisive prompt among 20 seeds";
  return {};
}

class SpeculativeGreedy : public ::testing::TestWithParam<std::string> {};

TEST_P(SpeculativeGreedy, EqualsPlainDecodingAndTheReferenceAcrossTheRingWrap) {
  const std::string dir = TinyCheckpoint(GetParam(), {.vocab = kVocab});
  const std::string other_dir = TinyCheckpoint("e2b", {.seed = 2, .vocab = kVocab});
  ASSERT_FALSE(dir.empty() || other_dir.empty());
  auto model = Load(dir);
  auto other = Load(other_dir);
  ASSERT_TRUE(model && other);
  std::vector<int> expected;
  const std::vector<int> prompt = DecisivePrompt(dir, model->plan(), &expected);
  ASSERT_FALSE(prompt.empty());
  const std::vector<int> plain = Plain(*model, prompt);
  ASSERT_EQ(plain, expected) << "plain decoding vs the float64 reference";
  std::printf("[%s] window %d, prompt %zu + %d tokens: the rings wrap %d times\n",
              GetParam().c_str(), Window(model->plan()), prompt.size(), kNew,
              static_cast<int>((prompt.size() + kNew) / (Window(model->plan()) + kDraftMax)));

  NgramDrafter ngram(1, 3);
  auto self = DraftWith(*model);
  auto stranger = DraftWith(*other);
  ASSERT_TRUE(self && stranger);
  struct Run {
    const char* name;
    Drafter* drafter;
    bool adaptive;
  };
  for (const Run& run : {Run{"ngram", &ngram, false}, Run{"self", self.get(), false},
                         Run{"stranger", stranger.get(), false},
                         Run{"stranger adaptive", stranger.get(), true}}) {
    run.drafter->Reset();
    const GenerateResult r =
        Speculative(*model, prompt, *run.drafter, {.draft_max = kDraftMax, .adaptive = run.adaptive});
    std::printf("[%s] %-17s drafted %3lld accepted %3lld in %lld target passes\n", GetParam().c_str(),
                run.name, static_cast<long long>(r.drafted), static_cast<long long>(r.accepted),
                static_cast<long long>(r.target_passes));
    EXPECT_EQ(r.tokens, plain) << run.name;
    EXPECT_GT(r.drafted, 0) << run.name;
    if (run.drafter == self.get()) {
      EXPECT_GE(r.accepted, r.drafted * 9 / 10) << "the target drafting for itself";
      EXPECT_LT(r.target_passes, kNew / 2);
    }
    if (run.drafter == stranger.get()) {
      EXPECT_LT(r.accepted, r.drafted / 2) << "rejections expected";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Presets, SpeculativeGreedy, ::testing::Values("e2b", "e4b", "12b"));

// Quantized weights and a packed artifact: speculative == plain in each format.
TEST(SpeculativeFormats, Q8Q4AndArtifactEqualPlain) {
  const std::string dir = TinyCheckpoint("e4b", {.vocab = kVocab});
  const std::string other_dir = TinyCheckpoint("e2b", {.seed = 2, .vocab = kVocab});
  ASSERT_FALSE(dir.empty() || other_dir.empty());
  const std::string artifact = TestTempDir("spec-pack") + "/model.g4";
  PackModelOptions pack;
  pack.quant = WeightType::kQ4;
  pack.threads = 2;
  ASSERT_TRUE(PackModel(dir, artifact, pack).ok());
  auto other = Load(other_dir, WeightType::kQ8);
  ASSERT_TRUE(other);
  const std::vector<int> prompt = RandomPromptIds(40, kVocab, 5);
  struct Format {
    const char* name;
    std::unique_ptr<Model> model;
  };
  Format formats[] = {{"q8", Load(dir, WeightType::kQ8)},
                      {"q4", Load(dir, WeightType::kQ4)},
                      {"q4 artifact", Load(artifact)}};
  for (Format& f : formats) {
    ASSERT_TRUE(f.model) << f.name;
    const std::vector<int> plain = Plain(*f.model, prompt);
    NgramDrafter ngram(1, 3);
    EXPECT_EQ(Speculative(*f.model, prompt, ngram).tokens, plain) << f.name << " ngram";
    auto stranger = DraftWith(*other);
    ASSERT_TRUE(stranger);
    EXPECT_EQ(Speculative(*f.model, prompt, *stranger).tokens, plain) << f.name << " draft model";
    auto self = DraftWith(*f.model);
    EXPECT_EQ(Speculative(*f.model, prompt, *self).tokens, plain) << f.name << " self";
  }
}

// Two tensor-parallel ranks: every rank runs rank 0's draft and keeps rank 0's tokens.
TEST(SpeculativeTensorParallel, TwoRanksEqualPlain) {
  const std::string dir = TinyCheckpoint("12b", {.vocab = kVocab});
  ASSERT_FALSE(dir.empty());
  std::vector<int> prompt = RandomPromptIds(30, kVocab, 9);
  prompt.insert(prompt.end(), prompt.begin(), prompt.begin() + 10);
  std::vector<int> plain, spec;
  int64_t drafted = 0;
  ModelOptions options;
  options.threads = 1;
  const Status st = RunTensorParallel(2, [&](Communicator* comm) -> Status {
    G4_ASSIGN_OR_RETURN(std::unique_ptr<Model> model, LoadModel(dir, options.OnRanks(comm)));
    KvCache a = TightCache(*model), b = TightCache(*model);
    G4_ASSIGN_OR_RETURN(GenerateResult p, Generate(*model, a, prompt, Greedy()));
    NgramDrafter ngram(1, 3);
    G4_ASSIGN_OR_RETURN(GenerateResult s, GenerateSpeculative(*model, b, prompt, Greedy(), ngram,
                                                              {.draft_max = kDraftMax}));
    if (comm->rank() == 0) {
      plain = p.tokens;
      spec = s.tokens;
      drafted = s.drafted;
    }
    return OkStatus();
  });
  ASSERT_TRUE(st.ok()) << st.message();
  ASSERT_EQ(plain.size(), static_cast<size_t>(kNew));
  EXPECT_EQ(spec, plain);
  EXPECT_GT(drafted, 0);
}

// Stops end generation mid-draft with the cache as plain decoding leaves it.
TEST(SpeculativeStops, StopIdInsideAnAcceptedRunEndsThere) {
  const std::string dir = TinyCheckpoint("e2b", {.vocab = kVocab});
  auto model = Load(dir);
  ASSERT_TRUE(model);
  const std::vector<int> prompt = RandomPromptIds(20, kVocab, 3);
  const std::vector<int> plain = Plain(*model, prompt);
  GenerateOptions options = Greedy();
  options.ignore_eos = false;
  options.stop_ids = {plain[7]};
  const size_t first_stop = std::find(plain.begin(), plain.end(), plain[7]) - plain.begin();
  auto self = DraftWith(*model);
  const GenerateResult r = Speculative(*model, prompt, *self, {.draft_max = kDraftMax}, options);
  EXPECT_EQ(r.finish_reason, "stop");
  EXPECT_EQ(r.tokens, std::vector<int>(plain.begin(), plain.begin() + first_stop + 1));
  // The callback asking to stop, too.
  KvCache cache = TightCache(*model);
  int seen = 0;
  auto c = GenerateSpeculative(*model, cache, prompt, Greedy(), *self, {.draft_max = kDraftMax},
                               [&](int) { return ++seen < 6; });
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->finish_reason, "cancelled");
  EXPECT_EQ(c->tokens, std::vector<int>(plain.begin(), plain.begin() + 6));
  EXPECT_EQ(cache.n_past(), static_cast<int64_t>(prompt.size()) + 5);
}

// The rollback bound at a ring (E2B tiny: window 8; chunk 5 gives rings of 12 slots): after
// positions up to 39 are written, keys from 28 on are kept, so a query at 35 or later (window
// from 28) still sees all of its keys and a rollback to 35 or later is safe; 34 would need key 27.
TEST(SpeculativeRollback, RefusedExactlyWhereARingLostAKeyInTheWindow) {
  const std::string dir = TinyCheckpoint("e2b", {.vocab = kVocab});
  auto plan = LoadModelPlan(dir);
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  ASSERT_EQ(Window(*plan), 8);
  KvCache cache(*plan, 128, 5);
  cache.set_n_past(40);
  EXPECT_FALSE(cache.RollbackTo(34));
  EXPECT_EQ(cache.n_past(), 40);
  EXPECT_FALSE(cache.RollbackTo(41));
  EXPECT_TRUE(cache.RollbackTo(36));  // a verify pass of 5 rows from 35, its first row kept
  EXPECT_EQ(cache.n_past(), 36);
  EXPECT_TRUE(cache.RollbackTo(36));
}

TEST(SpeculativeOptionsCheck, DraftLongerThanTheCacheChunkIsAnError) {
  const std::string dir = TinyCheckpoint("e2b", {.vocab = kVocab});
  auto model = Load(dir);
  ASSERT_TRUE(model);
  KvCache cache(model->plan(), 64, 4);
  NgramDrafter ngram(1, 3);
  auto r = GenerateSpeculative(*model, cache, {2, 5, 7}, Greedy(), ngram, {.draft_max = 4});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("needs a KV cache taking 5 rows"), std::string::npos)
      << r.status().message();
  auto wrong = DraftModelDrafter::Create(*model, kVocab + 1, {}, 64, 5);
  ASSERT_FALSE(wrong.ok());
  EXPECT_NE(wrong.status().message().find("vocabulary"), std::string::npos);
}

// Seeded sampling runs end to end with either drafter and repeats itself under the same seed.
TEST(SpeculativeSampling, SeededRunsAreReproducible) {
  const std::string dir = TinyCheckpoint("e2b", {.vocab = kVocab});
  auto model = Load(dir);
  ASSERT_TRUE(model);
  GenerateOptions options = Greedy();
  options.sampling.temperature = 0.9f;
  options.sampling.top_k = 20;
  options.sampling.seed = 11;
  options.sampling.has_seed = true;
  const std::vector<int> prompt = RandomPromptIds(20, kVocab, 4);
  NgramDrafter ngram(1, 3);
  auto self = DraftWith(*model, options.sampling);
  for (Drafter* d : {static_cast<Drafter*>(&ngram), self.get()}) {
    d->Reset();
    const GenerateResult a = Speculative(*model, prompt, *d, {.draft_max = kDraftMax}, options);
    d->Reset();
    const GenerateResult b = Speculative(*model, prompt, *d, {.draft_max = kDraftMax}, options);
    EXPECT_EQ(a.tokens.size(), static_cast<size_t>(kNew)) << d->name();
    EXPECT_EQ(a.tokens, b.tokens) << d->name();
  }
}

}  // namespace
}  // namespace g4
