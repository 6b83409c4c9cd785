// Speculative decoding of constrained sequences in the scheduler (g4 serve's path): drafts are cut
// at the first token the grammar or forced prefix rejects, each verify row samples under its own
// state's mask, and the recogniser advances over the kept tokens only. The oracle is the same
// scheduler without drafters (plain constrained decoding, tested in constrained_decoding_test):
// greedy tokens, finish reasons and logprobs must be the same, on a JSON schema, a GBNF grammar
// and a forced prefix followed by a grammar (a forced tool call's shape).
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <future>

#include "grammar/gbnf_parser.h"
#include "grammar/json_schema.h"
#include "model/loader.h"
#include "runtime/ngram_drafter.h"
#include "runtime/scheduler.h"
#include "testing/checkpoints.h"
#include "testing/tiny_vocabulary.h"

// Speculative decoding of constrained sequences: drafts are cut at the first token the grammar or
// forced prefix rejects, each verify row samples under its own state's mask, and the recogniser
// advances over the kept tokens only. In the scheduler (g4 serve's path) the oracle is the same
// scheduler without drafters, in GenerateSpeculative (g4 run / g4 bench) plain constrained
// Generate (both tested in constrained_decoding_test): greedy tokens, finish reasons and logprobs
// must be the same, on a JSON schema, a GBNF grammar and (scheduler) a forced prefix followed by
// a grammar (a forced tool call's shape); sampled outputs must stay inside the grammar.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>

#include "runtime/draft_model_drafter.h"
#include "runtime/generate.h"
#include "runtime/ngram_drafter.h"
#include "runtime/scheduler.h"
#include "runtime/speculative.h"
#include "testing/grammars.h"
#include "testing/scripted_drafter.h"
#include "testing/sequences.h"
#include "testing/tiny_model.h"
#include "testing/tiny_vocabulary.h"

namespace g4 {
namespace {

using grammar::TokenConstraint;

// Words and numbers in brackets: nothing JSON about it.
const char* kList = "root ::= \"[\" item (\", \" item)* \"]\"\nitem ::= [a-z]+ | [0-9]+\n";

// The tiny vocabulary's one-byte tokens spelling `text`.
std::vector<int> ByteTokens(const std::string& text) {
  std::vector<int> ids;
  for (unsigned char c : text) ids.push_back(c + 2);
  return ids;
}

struct Case {
  std::vector<int> prompt;
  std::string gbnf;
  std::vector<std::vector<int>> forced;
};

std::vector<std::vector<int>> Prompts(const std::vector<Case>& cases) {
  std::vector<std::vector<int>> prompts;
  for (const Case& c : cases) prompts.push_back(c.prompt);
  return prompts;
}

// Spoils the plain output's next tokens in turn: the last one shifted by one id (the grammar may
// or may not allow it), one in the middle replaced by the special id 0 (the grammar never allows
// it: the draft must be cut there), or left as is; with `first`, the first one is always 0.
ScriptedDrafter::Spoil Spoiler(int vocab, bool first = false) {
  return [vocab, first](int call, std::vector<int>& d) {
    const size_t n = d.size();
    if (call % 3 == 1 && n > 0) d.back() = (d.back() + 1) % vocab;
    if (call % 3 == 2 && n > 1) d[n / 2] = 0;
    if (first && n > 0) d[0] = 0;
  };
}

class ConstrainedSpeculation : public TinyModelTest {
 protected:
  // Runs every case at once through `scheduler` (each with a fresh constraint) and returns the
  // outcomes in case order.
  std::vector<SequenceOutcome> RunAll(Scheduler& scheduler, const std::vector<Case>& cases,
                                      const SamplingParams& sampling, int top_logprobs, int max_new) {
    const auto trie = TinyTrie(model_->plan().vocab, kEos);
    std::vector<SequenceRunner> runners(cases.size());
    for (size_t i = 0; i < cases.size(); ++i) {
      const Case& c = cases[i];
      SequenceRequest req = runners[i].Request(c.prompt, max_new);
      req.stop_ids = {kEos};
      req.sampling = sampling;
      req.top_logprobs = top_logprobs;
      req.forced_prefixes = c.forced;
      req.constraint = std::make_shared<TokenConstraint>(trie, GbnfAutomaton(c.gbnf));
      EXPECT_EQ(scheduler.Submit(std::move(req)).admission, Admission::kAccepted);
    }
    std::vector<SequenceOutcome> outcomes;
    for (auto& r : runners) outcomes.push_back(r.future.get());
    return outcomes;
  }

  // With `forced`, every third case starts with a forced prefix (the scheduler's requests only).
  static std::vector<Case> Cases(bool forced = true) {
    const std::string person = SchemaGbnf(kPersonSchema);
    std::vector<Case> cases;
    for (int i = 0; i < 3; ++i) {
      cases.push_back({{2, 10 + i, 20 + i}, person, {}});
      cases.push_back({{2, 40 + i, 50 + i}, kList, {}});
      // A forced tool call's shape: fixed opening tokens, then the grammar (which the prefix
      // must satisfy) decides.
      if (forced)
        cases.push_back({{2, 70 + i, 80 + i}, person, {ByteTokens("{\"name\":\"Jo"), ByteTokens("{\"name\":\"Ab")}});
    }
    return cases;
  }

  // Fails the test unless `tokens` are inside the case's grammar, and complete (valid JSON that
  // keeps the schema's promises, for the schema) when they ended with "stop".
  void CheckOutput(const Case& c, const std::vector<int>& tokens, const std::string& finish_reason) {
    const auto trie = TinyTrie(model_->plan().vocab, kEos);
    const std::string text = TokensText(*trie, tokens);
    TokenConstraint check(trie, GbnfAutomaton(c.gbnf));
    for (int t : tokens) ASSERT_TRUE(check.Accept(t)) << text;
    if (finish_reason != "stop") {
      EXPECT_EQ(finish_reason, "length") << text;
      return;
    }
    EXPECT_TRUE(check.IsComplete()) << text;
    if (c.gbnf != kList) CheckPerson(text);
  }

  static constexpr int kEos = 1;
  static constexpr double kLogprobTolerance = 1e-4;
};

TEST_F(ConstrainedSpeculation, GreedyTokensAndLogprobsEqualPlainConstrainedDecoding) {
  ASSERT_NE(model_, nullptr);
  const int vocab = model_->plan().vocab;
  const std::vector<Case> cases = Cases();
  SchedulerOptions so;
  so.parallel = 4;
  so.context = 512;
  so.prefill_chunk = 8;
  so.prefix_reuse = false;
  const int max_new = 120, top = 3;
  std::vector<SequenceOutcome> plain;
  {
    Scheduler scheduler(*model_, so);
    plain = RunAll(scheduler, cases, {}, top, max_new);
  }
  const std::vector<std::vector<int>> prompts = Prompts(cases);
  std::vector<std::vector<int>> plain_tokens;
  for (const auto& o : plain) plain_tokens.push_back(o.tokens);
  so.draft_max = 4;
  so.make_drafter = [&](int slot) -> std::unique_ptr<Drafter> {
    if (slot % 2 == 0) return std::make_unique<ScriptedDrafter>(&prompts, &plain_tokens, Spoiler(vocab));
    return std::make_unique<NgramDrafter>(1, 3);
  };
  Scheduler scheduler(*model_, so);
  const std::vector<SequenceOutcome> spec = RunAll(scheduler, cases, {}, top, max_new);
  int stopped = 0;
  double max_diff = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    SCOPED_TRACE("case " + std::to_string(i));
    EXPECT_EQ(spec[i].result.finish_reason, plain[i].result.finish_reason);
    stopped += plain[i].result.finish_reason == "stop";
    ASSERT_EQ(spec[i].tokens, plain[i].tokens);
    CheckOutput(cases[i], plain[i].tokens, plain[i].result.finish_reason);
    if (!cases[i].forced.empty()) {
      const auto t = plain[i].tokens;
      EXPECT_TRUE(std::equal(cases[i].forced[0].begin(), cases[i].forced[0].end(), t.begin()) ||
                  std::equal(cases[i].forced[1].begin(), cases[i].forced[1].end(), t.begin()));
    }
    for (size_t k = 0; k < plain[i].infos.size(); ++k) {
      const TokenInfo &a = spec[i].infos[k], &b = plain[i].infos[k];
      // A verify row is the same math as a one-row decode but summed in another order by the
      // batched matrix product: measured differences are up to 1.2e-5 here.
      EXPECT_NEAR(a.logprob, b.logprob, kLogprobTolerance) << "token " << k;
      ASSERT_EQ(a.top.size(), b.top.size());
      for (size_t j = 0; j < a.top.size(); ++j) {
        // Masked-out tokens fill the list at -inf, in no particular order.
        if (std::isinf(b.top[j].second)) {
          EXPECT_TRUE(std::isinf(a.top[j].second)) << "token " << k;
          continue;
        }
        EXPECT_EQ(a.top[j].first, b.top[j].first) << "token " << k;
        EXPECT_NEAR(a.top[j].second, b.top[j].second, kLogprobTolerance) << "token " << k;
        max_diff = std::max(max_diff, std::abs(a.top[j].second - b.top[j].second));
      }
      max_diff = std::max(max_diff, std::abs(a.logprob - b.logprob));
    }
  }
  std::printf("largest logprob difference, speculative vs plain: %.3g\n", max_diff);
  EXPECT_GE(stopped, 3) << "too few outputs completed their grammar: the test proves little";
  const SchedulerStats s = scheduler.stats();
  EXPECT_GT(s.spec_accepted, 0u) << "no draft was accepted: the test proves nothing";
  EXPECT_LT(s.spec_accepted, s.spec_drafted) << "no draft was rejected: rollback untested";
  EXPECT_GT(s.spec_tokens, s.spec_target_passes);

  // Drafts that start with a token the grammar never allows are cut to nothing before they
  // reach the forward pass (verifying them would also reject them: only the count tells).
  std::atomic<uint64_t> spoiled{0};
  so.make_drafter = [&](int) -> std::unique_ptr<Drafter> {
    return std::make_unique<ScriptedDrafter>(&prompts, &plain_tokens, Spoiler(vocab, true), &spoiled);
  };
  Scheduler cutting(*model_, so);
  const std::vector<SequenceOutcome> cut = RunAll(cutting, cases, {}, -1, max_new);
  for (size_t i = 0; i < cases.size(); ++i) EXPECT_EQ(cut[i].tokens, plain[i].tokens) << "case " << i;
  EXPECT_GT(spoiled.load(), 0u);
  // Only the forced prefixes' own drafts remain.
  uint64_t forced_tokens = 0;
  for (const Case& c : cases)
    if (!c.forced.empty()) forced_tokens += c.forced[0].size();
  EXPECT_LE(cutting.stats().spec_drafted, forced_tokens);
}

TEST_F(ConstrainedSpeculation, SampledOutputsStayInsideTheGrammar) {
  ASSERT_NE(model_, nullptr);
  const std::vector<Case> cases = Cases();
  SchedulerOptions so;
  so.parallel = 4;
  so.context = 512;
  so.prefill_chunk = 8;
  so.draft_max = 3;
  so.make_drafter = [](int) { return std::make_unique<NgramDrafter>(1, 3); };
  Scheduler scheduler(*model_, so);
  int completed = 0;
  for (uint64_t seed = 0; seed < 3; ++seed) {
    const SamplingParams sp = SeededSampling(1.2f, seed);
    const std::vector<SequenceOutcome> out = RunAll(scheduler, cases, sp, -1, 150);
    for (size_t i = 0; i < cases.size(); ++i) {
      // Whatever was drawn, a fresh recogniser accepts it, and a "stop" is a complete output.
      CheckOutput(cases[i], out[i].tokens, out[i].result.finish_reason);
      completed += out[i].result.finish_reason == "stop";
    }
  }
  EXPECT_GE(completed, 6);
  EXPECT_GT(scheduler.stats().spec_accepted, 0u);
}

// GenerateSpeculative under options.constraint against constrained Generate, greedy: the same
// tokens and finish reason with a scripted drafter whose drafts the grammar partly rejects (and,
// spoiled at their first token, always: then nothing is verified), prompt lookup, and the model
// drafting for itself (its unconstrained picks disagree with the masked target wherever the
// grammar bites); at a max_new that cuts passes short and one that lets outputs complete.
TEST_F(ConstrainedSpeculation, GenerateSpeculativeGreedyEqualsConstrainedGenerate) {
  ASSERT_NE(model_, nullptr);
  const int vocab = model_->plan().vocab;
  const auto trie = TinyTrie(vocab, kEos);
  const std::vector<Case> cases = Cases(/*forced=*/false);
  const std::vector<std::vector<int>> prompts = Prompts(cases);
  auto run = [&](const Case& c, int max_new, Drafter* drafter, const SamplingParams& sampling) {
    TokenConstraint constraint(trie, GbnfAutomaton(c.gbnf));
    KvCache cache(model_->plan(), 256, 8);
    GenerateOptions go;
    go.max_new_tokens = max_new;
    go.stop_ids = {kEos};
    go.sampling = sampling;
    go.constraint = &constraint;
    go.prefill_chunk = cache.max_chunk();
    if (drafter) drafter->Reset();
    auto r = drafter ? GenerateSpeculative(*model_, cache, c.prompt, go, *drafter, {.draft_max = 4})
                     : Generate(*model_, cache, c.prompt, go);
    EXPECT_TRUE(r.ok()) << r.status().message();
    // A cut-off output is never claimed complete, a finished one always is.
    if (r.ok()) {
      EXPECT_EQ(constraint.IsComplete(), r->finish_reason == "stop");
    }
    return r.ok() ? *r : GenerateResult{};
  };
  for (int max_new : {9, 120}) {
    SCOPED_TRACE("max_new " + std::to_string(max_new));
    std::vector<std::vector<int>> plain;
    std::vector<std::string> reasons;
    int stopped = 0;
    for (const Case& c : cases) {
      const GenerateResult r = run(c, max_new, nullptr, {});
      CheckOutput(c, r.tokens, r.finish_reason);
      plain.push_back(r.tokens);
      reasons.push_back(r.finish_reason);
      stopped += r.finish_reason == "stop";
    }
    if (max_new == 120) {
      EXPECT_GE(stopped, 3) << "too few outputs completed their grammar: the test proves little";
    }
    ScriptedDrafter scripted(&prompts, &plain, Spoiler(vocab));
    ScriptedDrafter spoiled(&prompts, &plain, Spoiler(vocab, true));
    NgramDrafter ngram(1, 3);
    auto self = DraftModelDrafter::Create(*model_, vocab, {}, 256, 8);
    ASSERT_TRUE(self.ok()) << self.status().message();
    for (Drafter* drafter : std::initializer_list<Drafter*>{&scripted, &spoiled, &ngram, self->get()}) {
      SCOPED_TRACE(drafter == &spoiled ? "spoiled" : drafter->name());
      int64_t drafted = 0, accepted = 0;
      for (size_t i = 0; i < cases.size(); ++i) {
        const GenerateResult r = run(cases[i], max_new, drafter, {});
        EXPECT_EQ(r.tokens, plain[i]) << "case " << i;
        EXPECT_EQ(r.finish_reason, reasons[i]) << "case " << i;
        drafted += r.drafted;
        accepted += r.accepted;
      }
      std::printf("max_new %d, %s drafter: %lld drafted, %lld accepted\n", max_new,
                  drafter == &spoiled ? "spoiled" : drafter->name(), static_cast<long long>(drafted),
                  static_cast<long long>(accepted));
      if (drafter == &spoiled) {
        // Cut to nothing before the forward pass (verifying them would also reject them).
        EXPECT_EQ(drafted, 0);
        continue;
      }
      EXPECT_GT(accepted, 0) << "no draft was accepted: the test proves nothing";
      if (drafter == self->get()) {
        // The model's own greedy picks are the masked target's wherever the grammar allows them,
        // and cut where it does not: every draft that reaches verification is kept.
        EXPECT_EQ(accepted, drafted);
      } else if (max_new == 120) {
        EXPECT_LT(accepted, drafted) << "no draft was rejected: rollback untested";
      }
    }
  }
}

// Sampled: speculative sampling under the masks keeps every output inside the grammar, with a
// deterministic drafter (prompt lookup) and a sampling one (the model drafting for itself: its q
// goes into the residual).
TEST_F(ConstrainedSpeculation, GenerateSpeculativeSampledOutputsStayInsideTheGrammar) {
  ASSERT_NE(model_, nullptr);
  const int vocab = model_->plan().vocab;
  const auto trie = TinyTrie(vocab, kEos);
  const std::vector<Case> cases = Cases(/*forced=*/false);
  int completed = 0;
  int64_t accepted = 0;
  for (uint64_t seed = 0; seed < 2; ++seed) {
    const SamplingParams sp = SeededSampling(1.2f, seed);
    NgramDrafter ngram(1, 3);
    auto self = DraftModelDrafter::Create(*model_, vocab, sp, 256, 8);
    ASSERT_TRUE(self.ok()) << self.status().message();
    for (Drafter* drafter : std::initializer_list<Drafter*>{&ngram, self->get()}) {
      for (const Case& c : cases) {
        TokenConstraint constraint(trie, GbnfAutomaton(c.gbnf));
        KvCache cache(model_->plan(), 256, 8);
        GenerateOptions go;
        go.max_new_tokens = 150;
        go.stop_ids = {kEos};
        go.sampling = sp;
        go.constraint = &constraint;
        go.prefill_chunk = cache.max_chunk();
        drafter->Reset();
        auto r = GenerateSpeculative(*model_, cache, c.prompt, go, *drafter, {.draft_max = 3});
        ASSERT_TRUE(r.ok()) << r.status().message();
        CheckOutput(c, r->tokens, r->finish_reason);
        completed += r->finish_reason == "stop";
        accepted += r->accepted;
      }
    }
  }
  EXPECT_GE(completed, 8);
  EXPECT_GT(accepted, 0);
}

// As in plain constrained decoding: when every token the grammar allows is suppressed, the
// result is an error, not a token outside the grammar.
TEST_F(ConstrainedSpeculation, GenerateSpeculativeAllAllowedTokensSuppressedIsAnError) {
  ASSERT_NE(model_, nullptr);
  const auto trie = TinyTrie(model_->plan().vocab, kEos);
  for (float temperature : {0.0f, 1.0f}) {
    TokenConstraint c(trie, GbnfAutomaton("root ::= \"a\"\n"));
    KvCache cache(model_->plan(), 64, 8);
    GenerateOptions go;
    go.max_new_tokens = 4;
    go.constraint = &c;
    go.sampling.temperature = temperature;
    go.sampling.suppress_tokens = {2 + 'a'};  // the only token the grammar allows
    NgramDrafter ngram(1, 3);
    auto r = GenerateSpeculative(*model_, cache, {2, 3}, go, ngram, {.draft_max = 3});
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().message(), kGrammarSuppressedError);
  }
}

}  // namespace
}  // namespace g4
