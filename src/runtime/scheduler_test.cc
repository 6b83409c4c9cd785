// Continuous batching must not change results, must free slots on cancel/timeout, and must
// reject work beyond its queue. Runs on a tiny synthetic checkpoint with a small vocabulary.
#include "runtime/scheduler.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <thread>
#include <tuple>

#include "runtime/generate.h"
#include "runtime/ngram_drafter.h"
#include "testing/scripted_drafter.h"
#include "testing/sequences.h"
#include "testing/tiny_model.h"

namespace g4 {
namespace {

std::vector<int> Prompt(int seed, int len, int vocab) {
  std::vector<int> p;
  uint32_t x = 2654435761u * (seed + 1);
  for (int i = 0; i < len; ++i) {
    x = x * 1664525u + 1013904223u;
    p.push_back(2 + static_cast<int>((x >> 8) % (vocab - 2)));
  }
  return p;
}

class SchedulerTest : public TinyModelTest {};

TEST_F(SchedulerTest, BatchedGreedyEqualsAloneTokenForToken) {
  ASSERT_NE(model_, nullptr);
  const int vocab = model_->plan().vocab;
  const int n = 16, max_new = 10;
  // Prompt lengths cross the sliding window and the prefill chunk (8) of the batched runs.
  std::vector<std::vector<int>> prompts;
  for (int i = 0; i < n; ++i) prompts.push_back(Prompt(i, 3 + (i * 7) % 30, vocab));

  // Alone: the single-sequence generator, one fresh cache each.
  std::vector<std::vector<int>> alone;
  for (int i = 0; i < n; ++i) {
    KvCache cache(model_->plan(), 128, 64);
    GenerateOptions go;
    go.max_new_tokens = max_new;
    auto r = Generate(*model_, cache, prompts[i], go);
    ASSERT_TRUE(r.ok()) << r.status().message();
    alone.push_back(r->tokens);
  }

  // Together: 16 slots, small prefill chunks and row budget so prefills interleave with decodes.
  SchedulerOptions so;
  so.parallel = n;
  so.context = 128;
  so.prefill_chunk = 8;
  so.max_batch_rows = 20;
  so.prefix_reuse = false;
  Scheduler scheduler(*model_, so);
  std::vector<SequenceRunner> runners(n);
  for (int i = 0; i < n; ++i) {
    auto sub = scheduler.Submit(runners[i].Request(prompts[i], max_new));
    ASSERT_EQ(sub.admission, Admission::kAccepted) << sub.message;
  }
  for (int i = 0; i < n; ++i) {
    SequenceOutcome o = runners[i].future.get();
    EXPECT_EQ(o.result.finish_reason, "length");
    EXPECT_EQ(o.tokens, alone[i]) << "sequence " << i << " differs when batched";
    EXPECT_EQ(o.result.completion_tokens, max_new);
    EXPECT_EQ(o.result.prompt_tokens, static_cast<int>(prompts[i].size()));
  }
  EXPECT_LT(scheduler.stats().steps, static_cast<uint64_t>(n * max_new))
      << "sequences were not batched";

  // Fewer slots than sequences: the rest wait in the queue and join as slots free up.
  SchedulerOptions small = so;
  small.parallel = 3;
  small.prefix_reuse = true;
  Scheduler queued(*model_, small);
  std::vector<SequenceRunner> again(n);
  for (int i = 0; i < n; ++i)
    ASSERT_EQ(queued.Submit(again[i].Request(prompts[i], max_new)).admission, Admission::kAccepted);
  for (int i = 0; i < n; ++i) EXPECT_EQ(again[i].future.get().tokens, alone[i]) << "sequence " << i;
}

TEST_F(SchedulerTest, ShortRequestKeepsDecodingWhileALongPromptPrefillsInChunks) {
  // A long prompt is prefilled --prefill-chunk rows per step, beside the other slots' decode
  // rows: a sequence already decoding gets a token at every one of those steps instead of waiting
  // for the whole prompt, and chunking changes neither sequence's tokens.
  ASSERT_NE(model_, nullptr);
  const int vocab = model_->plan().vocab;
  const int chunk = 8, long_len = 100;
  SchedulerOptions so;
  so.parallel = 2;
  so.context = 160;
  so.prefill_chunk = chunk;
  so.max_batch_rows = chunk;
  so.prefix_reuse = false;
  Scheduler scheduler(*model_, so);
  std::atomic<int> short_tokens{0};
  std::atomic<int> short_tokens_at_long_first{-1};
  std::promise<void> short_started, long_submitted;
  std::shared_future<void> long_queued = long_submitted.get_future().share();
  SequenceRunner shorter;
  SequenceRequest a = shorter.Request(Prompt(40, 4, vocab), 60);
  // The engine waits after the short sequence's first token until the long one is queued, so a
  // slow test thread cannot let the short sequence run ahead (the count below is exact).
  a.on_token = [&, out = shorter.outcome, long_queued](const TokenInfo& t) {
    out->tokens.push_back(t.token);
    if (short_tokens.fetch_add(1) == 0) {
      short_started.set_value();
      long_queued.wait();
    }
    return true;
  };
  ASSERT_EQ(scheduler.Submit(std::move(a)).admission, Admission::kAccepted);
  short_started.get_future().wait();
  const int before = short_tokens.load();
  SequenceRunner longer;
  SequenceRequest b = longer.Request(Prompt(41, long_len, vocab), 4);
  b.on_token = [&, out = longer.outcome](const TokenInfo& t) {
    if (out->tokens.empty()) short_tokens_at_long_first.store(short_tokens.load());
    out->tokens.push_back(t.token);
    return true;
  };
  const Admission admitted = scheduler.Submit(std::move(b)).admission;
  long_submitted.set_value();
  ASSERT_EQ(admitted, Admission::kAccepted);
  const SequenceOutcome long_out = longer.future.get();
  const SequenceOutcome short_out = shorter.future.get();
  // ceil(100 / 8) = 13 prefill steps, each with a decode row of the short sequence (one step of
  // slack: the long sequence is admitted before or after the step that emitted `before`).
  const int during = short_tokens_at_long_first.load() - before;
  EXPECT_GE(during, (long_len + chunk - 1) / chunk - 1)
      << "the short sequence stalled while the long prompt was prefilled";

  for (const auto& [prompt, max_new, got] :
       {std::tuple{Prompt(40, 4, vocab), 60, short_out.tokens},
        std::tuple{Prompt(41, long_len, vocab), 4, long_out.tokens}}) {
    KvCache cache(model_->plan(), 160, 128);
    GenerateOptions go;
    go.max_new_tokens = max_new;
    go.prefill_chunk = 128;
    auto alone = Generate(*model_, cache, prompt, go);
    ASSERT_TRUE(alone.ok()) << alone.status().message();
    EXPECT_EQ(got, alone->tokens) << "prompt of " << prompt.size() << " tokens";
  }
}

TEST_F(SchedulerTest, PrefixReuseGivesTheSameTokens) {
  ASSERT_NE(model_, nullptr);
  const int vocab = model_->plan().vocab;
  SchedulerOptions so;
  so.parallel = 1;
  so.context = 128;
  so.prefill_chunk = 16;
  Scheduler scheduler(*model_, so);
  std::vector<int> first = Prompt(100, 20, vocab);
  SequenceRunner a;
  ASSERT_EQ(scheduler.Submit(a.Request(first, 6)).admission, Admission::kAccepted);
  SequenceOutcome oa = a.future.get();
  // The next turn extends the first prompt and its answer.
  std::vector<int> second = first;
  second.insert(second.end(), oa.tokens.begin(), oa.tokens.end());
  std::vector<int> more = Prompt(101, 5, vocab);
  second.insert(second.end(), more.begin(), more.end());
  SequenceRunner b;
  ASSERT_EQ(scheduler.Submit(b.Request(second, 6)).admission, Admission::kAccepted);
  SequenceOutcome ob = b.future.get();
  EXPECT_GE(ob.result.cached_tokens, 20);

  KvCache cache(model_->plan(), 128, 64);
  GenerateOptions go;
  go.max_new_tokens = 6;
  auto fresh = Generate(*model_, cache, second, go);
  ASSERT_TRUE(fresh.ok());
  EXPECT_EQ(ob.tokens, fresh->tokens);
}

TEST_F(SchedulerTest, CancelFreesTheSlotAtOnce) {
  ASSERT_NE(model_, nullptr);
  SchedulerOptions so;
  so.parallel = 1;
  so.context = 512;
  so.max_queue = 4;
  Scheduler scheduler(*model_, so);
  SequenceRunner a, b;
  // The engine thread stops inside the 10th token's callback until the test has cancelled, so
  // the result does not depend on how fast the machine generates.
  constexpr int kCancelAt = 10;
  auto reached = std::make_shared<std::promise<void>>();
  auto resume = std::make_shared<std::promise<void>>();
  std::shared_future<void> resumed = resume->get_future().share();
  auto req = a.Request(Prompt(1, 5, 512), 100000);
  auto record = req.on_token;
  req.on_token = [record, reached, resumed, n = 0](const TokenInfo& t) mutable {
    record(t);
    if (++n == kCancelAt) {
      reached->set_value();
      resumed.wait();
    }
    return true;
  };
  auto sub_a = scheduler.Submit(std::move(req));
  ASSERT_EQ(sub_a.admission, Admission::kAccepted);
  auto sub_b = scheduler.Submit(b.Request(Prompt(2, 5, 512), 3));
  ASSERT_EQ(sub_b.admission, Admission::kAccepted);
  reached->get_future().wait();
  sub_a.handle->Cancel();
  resume->set_value();
  SequenceOutcome oa = a.future.get();
  EXPECT_EQ(oa.result.finish_reason, "cancelled");
  // Cancel takes effect at the next engine step: at most one more token.
  EXPECT_LE(oa.result.completion_tokens, kCancelAt + 1);
  SequenceOutcome ob = b.future.get();
  EXPECT_EQ(ob.result.finish_reason, "length");
  EXPECT_EQ(ob.tokens.size(), 3u);
  EXPECT_TRUE(scheduler.WaitIdle(std::chrono::steady_clock::now() + std::chrono::seconds(5)));
  EXPECT_EQ(scheduler.stats().running, 0);
}

TEST_F(SchedulerTest, FullQueueRejectsAndTimeoutsEndClearly) {
  ASSERT_NE(model_, nullptr);
  SchedulerOptions so;
  so.parallel = 1;
  so.context = 4096;
  so.max_queue = 1;
  Scheduler scheduler(*model_, so);
  SequenceRunner a, b, c;
  auto long_req = a.Request(Prompt(3, 4, 512), 4000);
  long_req.timeout_seconds = 0.3;
  // The first token's callback outlasts the deadline, so A times out however fast the engine is.
  auto record = long_req.on_token;
  long_req.on_token = [record, n = 0](const TokenInfo& t) mutable {
    record(t);
    if (++n == 1) std::this_thread::sleep_for(std::chrono::milliseconds(400));
    return true;
  };
  auto sub_a = scheduler.Submit(std::move(long_req));
  ASSERT_EQ(sub_a.admission, Admission::kAccepted);
  // Give the engine a moment to move A into the slot, so B is the one queued.
  for (int i = 0; i < 100 && scheduler.stats().running == 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  auto sub_b = scheduler.Submit(b.Request(Prompt(4, 4, 512), 2));
  ASSERT_EQ(sub_b.admission, Admission::kAccepted);
  auto sub_c = scheduler.Submit(c.Request(Prompt(5, 4, 512), 2));
  EXPECT_EQ(sub_c.admission, Admission::kQueueFull);
  EXPECT_FALSE(sub_c.message.empty());
  SequenceOutcome oa = a.future.get();
  EXPECT_EQ(oa.result.finish_reason, "timeout");
  EXPECT_EQ(b.future.get().result.finish_reason, "length");
}

TEST_F(SchedulerTest, RejectsPromptsThatDoNotFitAndStopsOnRequest) {
  ASSERT_NE(model_, nullptr);
  SchedulerOptions so;
  so.parallel = 2;
  so.context = 16;
  Scheduler scheduler(*model_, so);
  SequenceRunner a;
  auto sub = scheduler.Submit(a.Request(Prompt(6, 16, 512), 4));
  EXPECT_EQ(sub.admission, Admission::kInvalid);
  EXPECT_NE(sub.message.find("16 tokens"), std::string::npos) << sub.message;
  SequenceRunner bad;
  EXPECT_EQ(scheduler.Submit(bad.Request({1, 999999}, 4)).admission, Admission::kInvalid);

  // max_new_tokens is capped to the room left: 16 - 10 = 6 tokens, then "length".
  SequenceRunner b;
  ASSERT_EQ(scheduler.Submit(b.Request(Prompt(7, 10, 512), 1000)).admission, Admission::kAccepted);
  SequenceOutcome ob = b.future.get();
  EXPECT_EQ(ob.result.finish_reason, "length");
  EXPECT_EQ(ob.result.completion_tokens, 6);

  // The callback ends a sequence (a stop string matched): finish_reason "stop".
  SequenceRunner c;
  auto req = c.Request(Prompt(8, 4, 512), 10);
  auto inner = req.on_token;
  int seen = 0;
  req.on_token = [inner, &seen](const TokenInfo& t) {
    inner(t);
    return ++seen < 2;
  };
  ASSERT_EQ(scheduler.Submit(std::move(req)).admission, Admission::kAccepted);
  SequenceOutcome oc = c.future.get();
  EXPECT_EQ(oc.result.finish_reason, "stop");
  EXPECT_EQ(oc.tokens.size(), 2u);

  // Logprobs: the sampled token's and k alternatives, best first.
  SequenceRunner d;
  auto lp_req = d.Request(Prompt(9, 4, 512), 2);
  std::vector<TokenInfo> infos;
  auto lp_inner = lp_req.on_token;
  lp_req.on_token = [lp_inner, &infos](const TokenInfo& t) {
    infos.push_back(t);
    return lp_inner(t);
  };
  lp_req.top_logprobs = 3;
  ASSERT_EQ(scheduler.Submit(std::move(lp_req)).admission, Admission::kAccepted);
  d.future.get();
  ASSERT_EQ(infos.size(), 2u);
  ASSERT_EQ(infos[0].top.size(), 3u);
  EXPECT_EQ(infos[0].top[0].first, infos[0].token);  // greedy takes the most likely
  EXPECT_LE(infos[0].logprob, 0.0);
  EXPECT_GE(infos[0].top[0].second, infos[0].top[1].second);

  scheduler.StopAccepting();
  SequenceRunner e;
  EXPECT_EQ(scheduler.Submit(e.Request(Prompt(10, 4, 512), 2)).admission, Admission::kStopped);
}

TEST(AllowedNextTokensTest, WalksTheAlternativesAndFreesOnceOneIsComplete) {
  const std::vector<std::vector<int>> prefixes = {{5, 6, 7}, {5, 8}, {9}};
  EXPECT_EQ(AllowedNextTokens(prefixes, {}), (std::vector<int>{5, 9}));
  EXPECT_EQ(AllowedNextTokens(prefixes, {5}), (std::vector<int>{6, 8}));
  EXPECT_EQ(AllowedNextTokens(prefixes, {5, 6}), (std::vector<int>{7}));
  EXPECT_TRUE(AllowedNextTokens(prefixes, {5, 6, 7}).empty());
  EXPECT_TRUE(AllowedNextTokens(prefixes, {5, 8, 1, 2}).empty());
  EXPECT_TRUE(AllowedNextTokens(prefixes, {9}).empty());
  EXPECT_TRUE(AllowedNextTokens({}, {1, 2}).empty());
}

// A forced prefix is generated token for token, and what follows is what the model generates
// from the prompt with that prefix appended (the independent oracle: an unconstrained run).
TEST_F(SchedulerTest, ForcedPrefixThenFreeContinuation) {
  ASSERT_NE(model_, nullptr);
  const int vocab = model_->plan().vocab;
  SchedulerOptions so;
  so.parallel = 4;
  so.context = 128;
  so.prefix_reuse = false;
  Scheduler scheduler(*model_, so);
  const std::vector<int> prompt = Prompt(40, 12, vocab);
  const std::vector<int> forced = {17, 300, 42};
  const int max_new = 8;

  SequenceRunner a;
  SequenceRequest req = a.Request(prompt, max_new);
  req.forced_prefixes = {forced};
  ASSERT_EQ(scheduler.Submit(std::move(req)).admission, Admission::kAccepted);
  SequenceOutcome oa = a.future.get();
  ASSERT_EQ(oa.tokens.size(), static_cast<size_t>(max_new));
  EXPECT_EQ(std::vector<int>(oa.tokens.begin(), oa.tokens.begin() + 3), forced);

  std::vector<int> extended = prompt;
  extended.insert(extended.end(), forced.begin(), forced.end());
  SequenceRunner b;
  ASSERT_EQ(scheduler.Submit(b.Request(extended, max_new - 3)).admission, Admission::kAccepted);
  EXPECT_EQ(std::vector<int>(oa.tokens.begin() + 3, oa.tokens.end()), b.future.get().tokens);

  // Two alternatives that share a first token: greedy takes the likelier second token, as the
  // unconstrained distribution after the shared token ranks them.
  const std::vector<int> alt_a = {17, 300, 42}, alt_b = {17, 301};
  std::vector<int> after_shared = prompt;
  after_shared.push_back(17);
  SequenceRunner c;
  SequenceRequest probe = c.Request(after_shared, 1);
  std::vector<TokenInfo> infos;
  auto inner = probe.on_token;
  probe.on_token = [inner, &infos](const TokenInfo& t) {
    infos.push_back(t);
    return inner(t);
  };
  probe.top_logprobs = vocab;
  ASSERT_EQ(scheduler.Submit(std::move(probe)).admission, Admission::kAccepted);
  c.future.get();
  ASSERT_EQ(infos.size(), 1u);
  double lp300 = -1e300, lp301 = -1e300;
  for (const auto& [id, lp] : infos[0].top) {
    if (id == 300) lp300 = lp;
    if (id == 301) lp301 = lp;
  }
  ASSERT_NE(lp300, lp301);
  const std::vector<int>& expected = lp300 > lp301 ? alt_a : alt_b;
  SequenceRunner d;
  SequenceRequest both = d.Request(prompt, 5);
  both.forced_prefixes = {alt_a, alt_b};
  ASSERT_EQ(scheduler.Submit(std::move(both)).admission, Admission::kAccepted);
  SequenceOutcome od = d.future.get();
  ASSERT_GE(od.tokens.size(), expected.size());
  EXPECT_EQ(std::vector<int>(od.tokens.begin(), od.tokens.begin() + expected.size()), expected);

  // Sampling (temperature 1, no top-k): every run still starts with one of the alternatives.
  for (uint64_t seed = 0; seed < 12; ++seed) {
    SequenceRunner e;
    SequenceRequest sampled = e.Request(prompt, 4);
    sampled.forced_prefixes = {alt_a, alt_b};
    sampled.sampling.temperature = 1.0f;
    sampled.sampling.seed = seed;
    sampled.sampling.has_seed = true;
    ASSERT_EQ(scheduler.Submit(std::move(sampled)).admission, Admission::kAccepted);
    const std::vector<int> t = e.future.get().tokens;
    ASSERT_GE(t.size(), 3u);
    const bool is_a = std::vector<int>(t.begin(), t.begin() + 3) == alt_a;
    const bool is_b = std::vector<int>(t.begin(), t.begin() + 2) == alt_b;
    EXPECT_TRUE(is_a || is_b) << "seed " << seed << " starts " << t[0] << " " << t[1] << " "
                              << t[2];
  }

  // Out-of-vocabulary forced tokens are refused at the door.
  SequenceRunner f;
  SequenceRequest bad = f.Request(prompt, 4);
  bad.forced_prefixes = {{1, vocab}};
  EXPECT_EQ(scheduler.Submit(std::move(bad)).admission, Admission::kInvalid);
}

TEST_F(SchedulerTest, SpeculatingAndPlainSlotsGiveThePlainTokens) {
  ASSERT_NE(model_, nullptr);
  const int vocab = model_->plan().vocab;
  const int n = 8, max_new = 23;  // not a multiple of draft_max + 1: max_new must cut a pass
  // Repetitive prompts, so prompt lookup finds matches.
  std::vector<std::vector<int>> prompts;
  for (int i = 0; i < n; ++i) {
    const std::vector<int> unit = Prompt(200 + i, 3 + i % 3, vocab);
    std::vector<int> p;
    for (int r = 0; r < 4; ++r) p.insert(p.end(), unit.begin(), unit.end());
    prompts.push_back(p);
  }
  std::vector<std::vector<int>> plain;
  for (int i = 0; i < n; ++i) {
    KvCache cache(model_->plan(), 128, 64);
    GenerateOptions go;
    go.max_new_tokens = max_new;
    auto r = Generate(*model_, cache, prompts[i], go);
    ASSERT_TRUE(r.ok()) << r.status().message();
    plain.push_back(r->tokens);
  }

  // Slots 0, 3, 6: scripted drafts; 1, 4, 7: prompt lookup; 2, 5: none.
  SchedulerOptions so;
  so.parallel = n;
  so.context = 128;
  so.prefill_chunk = 8;
  so.draft_max = 4;
  so.make_drafter = [&](int slot) -> std::unique_ptr<Drafter> {
    // Every other proposal's last token is wrong.
    if (slot % 3 == 0)
      return std::make_unique<ScriptedDrafter>(&prompts, &plain, [vocab](int call, std::vector<int>& d) {
        if (call % 2 == 0 && !d.empty()) d.back() = (d.back() + 1) % vocab;
      });
    if (slot % 3 == 1) return std::make_unique<NgramDrafter>(1, 3);
    return nullptr;
  };
  Scheduler scheduler(*model_, so);
  for (int round = 0; round < 2; ++round) {  // the second reuses the rolled-back caches' prefixes
    std::vector<SequenceRunner> runners(n);
    for (int i = 0; i < n; ++i)
      ASSERT_EQ(scheduler.Submit(runners[i].Request(prompts[i], max_new)).admission, Admission::kAccepted);
    for (int i = 0; i < n; ++i) {
      SequenceOutcome o = runners[i].future.get();
      EXPECT_EQ(o.result.finish_reason, "length");
      EXPECT_EQ(o.tokens, plain[i]) << "round " << round << ", sequence " << i;
      EXPECT_EQ(o.result.completion_tokens, max_new);
    }
  }
  const SchedulerStats s = scheduler.stats();
  EXPECT_TRUE(s.speculative);
  EXPECT_GT(s.spec_accepted, 0u) << "no draft was accepted: the test proves nothing";
  EXPECT_LT(s.spec_accepted, s.spec_drafted) << "no draft was rejected: rollback untested";
  EXPECT_GT(s.spec_tokens, s.spec_target_passes);

  // A callback that stops mid-pass (a stop string) ends the sequence exactly there.
  SequenceRunner stopper;
  SequenceRequest r = stopper.Request(prompts[0], max_new);
  auto out = stopper.outcome;
  r.on_token = [out](const TokenInfo& t) {
    out->tokens.push_back(t.token);
    return out->tokens.size() < 7;
  };
  ASSERT_EQ(scheduler.Submit(std::move(r)).admission, Admission::kAccepted);
  SequenceOutcome o = stopper.future.get();
  EXPECT_EQ(o.result.finish_reason, "stop");
  EXPECT_EQ(o.tokens, std::vector<int>(plain[0].begin(), plain[0].begin() + 7));
  EXPECT_EQ(o.result.completion_tokens, 7);
}

}  // namespace
}  // namespace g4
