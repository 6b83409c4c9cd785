// Tensor-parallel serving (parallel/tp_serve.h): the Scheduler on rank 0, with the leader as its
// step listener and in-process follower ranks running FollowSteps, gives the same greedy tokens
// (and log-probabilities within 1e-3) as the Scheduler on one rank, on every tiny preset: for
// sequences batched into the same steps, prompts over several prefill chunks and past the
// sliding window, a slot whose cache is rewound for prefix reuse and one that is reset. The
// followers' caches only track rank 0's through the step messages, so any mistake there changes
// the all-reduced sums and the output. Failure paths end every rank. A gate holds the engine
// until each wave is submitted, so the slots each sequence takes do not depend on thread timing.
#include "parallel/tp_serve.h"

#include <gtest/gtest.h>

#include <cmath>
#include <condition_variable>
#include <future>
#include <mutex>

#include "model/arch/gemma4.h"
#include "model/architecture.h"
#include "model/rank_plan.h"
#include "runtime/scheduler.h"
#include "testing/checkpoints.h"

namespace g4 {
namespace {

constexpr int kVocab = 512;
constexpr int kMaxNew = 12;

struct Seq {
  std::vector<int> tokens;
  std::vector<double> logprobs;
  SequenceResult result;
};

std::vector<int> Prompt(int len, uint32_t seed) {
  std::vector<int> p{2};
  uint32_t x = 2654435761u * (seed + 1);
  while (static_cast<int>(p.size()) < len) {
    x = x * 1664525u + 1013904223u;
    p.push_back(10 + static_cast<int>((x >> 8) % (kVocab - 10)));
  }
  return p;
}

SchedulerOptions Options() {
  SchedulerOptions so;
  so.parallel = 2;
  so.context = 256;
  so.prefill_chunk = 8;    // long prompts take several steps ...
  so.max_batch_rows = 12;  // ... and share them with the other sequence's rows
  so.prefix_reuse = true;
  return so;
}

// Holds the engine before its next forward step until the whole wave is submitted. Without it,
// a descheduled test thread let the first sequence run to its end alone, the second took its
// slot, and the prefix the next wave counts on was gone (seen 1 run in 30 on 2 busy cores).
class WaveGate : public StepListener {
 public:
  explicit WaveGate(StepListener* next) : next_(next) {}
  void Close() {
    std::lock_guard<std::mutex> lock(mutex_);
    open_ = false;
  }
  void Open() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      open_ = true;
    }
    opened_.notify_all();
  }
  void BeforeForward(const std::vector<BatchRow>& rows,
                     const std::vector<int>& row_slots) override {
    {
      std::unique_lock<std::mutex> lock(mutex_);
      opened_.wait(lock, [&] { return open_; });
    }
    if (next_) next_->BeforeForward(rows, row_slots);
  }

 private:
  StepListener* next_;
  std::mutex mutex_;
  std::condition_variable opened_;
  bool open_ = true;
};

// Runs the sequences of each wave together (all submitted before the engine takes a step); a
// wave finishes before the next starts. `make_wave(i, earlier)` builds wave i from the results
// so far.
using WaveMaker =
    std::function<std::vector<std::vector<int>>(int wave, const std::vector<Seq>& earlier)>;
std::vector<Seq> Serve(Model& model, StepListener* listener, int waves,
                       const WaveMaker& make_wave) {
  WaveGate gate(listener);
  Scheduler scheduler(model, Options(), &gate);
  std::vector<Seq> all;
  for (int w = 0; w < waves; ++w) {
    const std::vector<std::vector<int>> prompts = make_wave(w, all);
    gate.Close();
    std::vector<std::shared_ptr<Seq>> seqs;
    std::vector<std::future<void>> done;
    for (const auto& prompt : prompts) {
      auto seq = std::make_shared<Seq>();
      auto promise = std::make_shared<std::promise<void>>();
      done.push_back(promise->get_future());
      SequenceRequest r;
      r.prompt = prompt;
      r.max_new_tokens = kMaxNew;
      r.top_logprobs = 0;
      r.on_token = [seq](const TokenInfo& t) {
        seq->tokens.push_back(t.token);
        seq->logprobs.push_back(t.logprob);
        return true;
      };
      r.on_done = [seq, promise](const SequenceResult& res) {
        seq->result = res;
        promise->set_value();
      };
      EXPECT_EQ(scheduler.Submit(std::move(r)).admission, Admission::kAccepted);
      seqs.push_back(seq);
    }
    gate.Open();
    for (auto& f : done) f.wait();
    for (auto& s : seqs) all.push_back(*s);
  }
  return all;
}

// Wave 0: a prompt past three sliding windows (the rings wrap) and a short one, batched.
// Wave 1: the first prompt plus its first six tokens and more (a free slot's cache is rewound
// to the shared prefix), and a fresh prompt (the other slot's cache is reset).
// Wave 2: two short prompts at once into the slots as they are.
std::vector<std::vector<int>> Waves(int wave, const std::vector<Seq>& earlier, int long_len) {
  if (wave == 0) return {Prompt(long_len, 1), Prompt(13, 2)};
  if (wave == 1) {
    std::vector<int> extended = Prompt(long_len, 1);
    extended.insert(extended.end(), earlier[0].tokens.begin(), earlier[0].tokens.begin() + 6);
    const std::vector<int> more = Prompt(6, 3);
    extended.insert(extended.end(), more.begin() + 1, more.end());
    std::vector<int> fresh = Prompt(21, 4);
    fresh[0] = 3;  // shares no prefix with any slot
    return {extended, fresh};
  }
  return {Prompt(5, 5), Prompt(9, 6)};
}

class TensorParallelServe : public ::testing::TestWithParam<std::string> {};

TEST_P(TensorParallelServe, SchedulerOverRanksMatchesOneRank) {
  const std::string dir = TinyCheckpoint(GetParam(), {.vocab = kVocab});
  ASSERT_FALSE(dir.empty());
  auto config = LoadModelConfig(dir);
  ASSERT_TRUE(config.ok());
  const int long_len = 3 * config->sliding_window + 5;
  ASSERT_LT(long_len + 2 * kMaxNew + 8, Options().context);
  auto make = [&](int w, const std::vector<Seq>& earlier) { return Waves(w, earlier, long_len); };

  ModelOptions mo;
  mo.threads = 1;
  auto one_model = LoadModel(dir, mo);
  ASSERT_TRUE(one_model.ok()) << one_model.status().message();
  const std::vector<Seq> one = Serve(**one_model, nullptr, 3, make);
  ASSERT_EQ(one.size(), 6u);
  // The rewind path really ran: the extended prompt reused the first prompt's cache.
  EXPECT_GE(one[2].result.cached_tokens, long_len);

  auto full = PlanFromConfig(*config);
  ASSERT_TRUE(full.ok());
  for (int tp : {2, 4}) {
    if (!CheckTensorParallel(*full, tp).ok()) continue;
    SCOPED_TRACE("tp " + std::to_string(tp));
    auto leader = TensorParallelLeader::Create(tp);
    ASSERT_TRUE(leader.ok()) << leader.status().message();
    auto model = (*leader)->Load(dir, mo);
    ASSERT_TRUE(model.ok()) << model.status().message();
    const SchedulerOptions so = Options();
    ASSERT_TRUE((*leader)->Start(so.parallel, so.context, so.prefill_chunk).ok());
    const std::vector<Seq> many = Serve(**model, leader->get(), 3, make);
    (*leader)->Stop();  // returns once every follower thread has left its loop
    ASSERT_EQ(many.size(), one.size());
    for (size_t i = 0; i < one.size(); ++i) {
      SCOPED_TRACE("sequence " + std::to_string(i));
      EXPECT_EQ(many[i].result.finish_reason, "length");
      EXPECT_EQ(many[i].result.cached_tokens, one[i].result.cached_tokens);
      EXPECT_EQ(many[i].tokens, one[i].tokens);
      ASSERT_EQ(many[i].logprobs.size(), one[i].logprobs.size());
      for (size_t t = 0; t < one[i].logprobs.size(); ++t)
        EXPECT_NEAR(many[i].logprobs[t], one[i].logprobs[t], 1e-3) << "token " << t;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Presets, TensorParallelServe, ::testing::Values("e2b", "e4b", "12b"));

// A rank count the model cannot be split over fails on every rank: Load returns the reason and
// no follower thread is left waiting (the leader's destructor joins them).
TEST(TensorParallelServeFailures, FailedLoadEndsEveryRank) {
  const std::string dir = TinyCheckpoint("e2b", {.vocab = kVocab});
  auto full = LoadModelPlan(dir);
  ASSERT_TRUE(full.ok());
  int bad = 2;
  while (CheckTensorParallel(*full, bad).ok()) ++bad;
  auto leader = TensorParallelLeader::Create(bad);
  ASSERT_TRUE(leader.ok());
  ModelOptions mo;
  mo.threads = 1;
  auto model = (*leader)->Load(dir, mo);
  EXPECT_FALSE(model.ok());
  (*leader)->Stop();
}

// The tiny E4B (its KV heads split) loaded over two in-process ranks, one thread each; `leader`
// is null if that failed.
struct TwoRanks {
  std::unique_ptr<TensorParallelLeader> leader;
  std::unique_ptr<Model> model;  // rank 0's share
};
TwoRanks LoadE4bOverTwoRanks(const LockstepDraft& draft = {}) {
  auto leader = TensorParallelLeader::Create(2);
  if (!leader.ok()) return {};
  ModelOptions mo;
  mo.threads = 1;
  auto model = (*leader)->Load(TinyCheckpoint("e4b", {.vocab = kVocab}), mo, draft);
  if (!model.ok()) return {};
  return {std::move(*leader), std::move(*model)};
}

// Rank 0 failing after the load (say its tokenizer is broken) says stop before any start.
TEST(TensorParallelServeFailures, StopBeforeStartEndsTheFollowers) {
  TwoRanks ranks = LoadE4bOverTwoRanks();
  ASSERT_TRUE(ranks.leader);
  ranks.leader->Stop();
  ranks.leader->Stop();  // idempotent
}

// Drafting in lockstep (an assistant that reads split KV heads): a follower that cannot load the
// assistant makes Start fail with the reason, and every rank still stops.
TEST(TensorParallelServeFailures, AFollowerWithoutTheAssistantFailsTheStart) {
  TwoRanks ranks = LoadE4bOverTwoRanks(LockstepDraft{"/nonexistent/assistant"});
  ASSERT_TRUE(ranks.leader);
  const Status started = ranks.leader->Start(2, 64, 8, KvType::kF32, /*draft_in_lockstep=*/true);
  EXPECT_FALSE(started.ok());
  EXPECT_NE(started.message().find("1 follower rank(s) could not load the assistant"),
            std::string::npos)
      << started.message();
  ranks.leader->Stop();
}

TEST(TensorParallelServeFailures, OneRankIsNotTensorParallel) {
  EXPECT_FALSE(TensorParallelLeader::Create(1).ok());
}

}  // namespace
}  // namespace g4
