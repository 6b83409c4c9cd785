// g4 perplexity: the window rule, the logits file, perplexity against the float64 reference over
// the same windows, KL of a run against itself and against another format, and the command's
// errors; g4 doctor's perplexity check inside the turn format.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "base/thread_pool.h"
#include "io/logits_file.h"
#include "model/loader.h"
#include "model/random_prompt.h"
#include "reference/reference.h"
#include "runtime/perplexity.h"
#include "testing/checkpoints.h"
#include "testing/run_g4.h"

namespace g4 {
namespace {

std::vector<int> Iota(int n, int from) {
  std::vector<int> v(n);
  for (int i = 0; i < n; ++i) v[i] = from + i;
  return v;
}

TEST(PerplexityWindows, SideBySideByDefaultScoringTheSecondHalf) {
  auto w = PlanPerplexityWindows({2}, Iota(100, 10), 16, 0);
  ASSERT_TRUE(w.ok()) << w.status().message();
  ASSERT_EQ(w->size(), 6u);  // 15 text tokens per window: 100 / 15 = 6 whole windows
  for (size_t k = 0; k < w->size(); ++k) {
    const auto& win = (*w)[k];
    EXPECT_EQ(win.ids.size(), 16u);
    EXPECT_EQ(win.ids[0], 2);
    EXPECT_EQ(win.ids[1], 10 + static_cast<int>(15 * k));
    EXPECT_EQ(win.first_scored, 8);
  }
  // A long prefix pushes the scored part behind it; a stride overlaps windows.
  auto chat = PlanPerplexityWindows(Iota(10, 1000), Iota(40, 10), 16, 3);
  ASSERT_TRUE(chat.ok());
  EXPECT_EQ((*chat)[0].first_scored, 10);
  EXPECT_EQ(chat->size(), 12u);  // starts 0, 3, ..., 33 (33 + 6 <= 40)
  EXPECT_EQ((*chat)[1].text_start, 3);
}

TEST(PerplexityWindows, ErrorsNameTheLimit) {
  auto short_text = PlanPerplexityWindows({2}, Iota(10, 10), 16, 0);
  ASSERT_FALSE(short_text.ok());
  EXPECT_NE(short_text.status().message().find("the text has 10 tokens; one window of --ctx 16 needs 15"),
            std::string::npos) << short_text.status().message();
  auto nothing_scored = PlanPerplexityWindows(Iota(8, 1000), Iota(100, 10), 8, 0);
  ASSERT_FALSE(nothing_scored.ok());
  EXPECT_NE(nothing_scored.status().message().find("leaves nothing to score"), std::string::npos);
  EXPECT_FALSE(PlanPerplexityWindows({2}, Iota(100, 10), 16, -1).ok());
}

TEST(LogitsFile, RoundTripsAndRefusesDamage) {
  const std::string dir = TestTempDir("logits_file");
  const std::string path = dir + "/a.topk";
  std::vector<double> lp(50);
  std::vector<float> logits(50);
  for (int i = 0; i < 50; ++i) logits[i] = 0.01f * (i % 7);
  LogSoftmax(logits.data(), 50, lp);
  LogitsFileHeader h{.k = 4, .vocab = 50, .ctx = 16, .stride = 15, .flags = kLogitsFileChat, .positions = 0,
                     .tokens_hash = 0x1234};
  auto w = LogitsFileWriter::Create(path, h);
  ASSERT_TRUE(w.ok()) << w.status().message();
  const TopKRecord r = SummarizeDistribution(lp, 7, 4);
  ASSERT_TRUE((*w)->Append(r).ok());
  ASSERT_TRUE((*w)->Append(r).ok());
  ASSERT_TRUE((*w)->Finish().ok());
  auto f = ReadLogitsFile(path);
  ASSERT_TRUE(f.ok()) << f.status().message();
  EXPECT_EQ(f->header.positions, 2u);
  EXPECT_EQ(f->header.tokens_hash, 0x1234u);
  EXPECT_EQ(f->header.flags, kLogitsFileChat);
  ASSERT_EQ(f->records.size(), 2u);
  EXPECT_EQ(f->records[1].ids, r.ids);
  EXPECT_EQ(f->records[1].logprobs, r.logprobs);
  EXPECT_EQ(f->records[1].target, 7);
  EXPECT_EQ(f->records[1].log_rest, r.log_rest);
  // The top 4 are the ids with i % 7 == 6 (6, 13, 20, 27), ties in id order.
  EXPECT_EQ(r.ids, (std::vector<int>{6, 13, 20, 27}));
  EXPECT_NEAR(std::exp(r.log_rest) + 4 * std::exp(r.logprobs[0]), 1.0, 1e-6);
  EXPECT_EQ(CompareWithBase(f->records[0], lp).kl, 0.0);

  // Truncated by one byte; not a logits file at all.
  std::ifstream in(path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::ofstream(dir + "/short.topk", std::ios::binary) << bytes.substr(0, bytes.size() - 1);
  auto truncated = ReadLogitsFile(dir + "/short.topk");
  ASSERT_FALSE(truncated.ok());
  EXPECT_NE(truncated.status().message().find("truncated or damaged"), std::string::npos);
  std::ofstream(dir + "/other.topk", std::ios::binary) << "hello";
  EXPECT_FALSE(ReadLogitsFile(dir + "/other.topk").ok());
}

TEST(KlStatistics, KnownDistributions) {
  // Base p = (0.5, 0.25, 0.25) saved with k = 1: bins {0}, rest. This run q = (0.25, 0.5, 0.25).
  const std::vector<double> p = {std::log(0.5), std::log(0.25), std::log(0.25)};
  const std::vector<double> q = {std::log(0.25), std::log(0.5), std::log(0.25)};
  const TopKRecord base = SummarizeDistribution(p, 1, 1);
  const KlSample s = CompareWithBase(base, q);
  const double expected = 0.5 * std::log(0.5 / 0.25) + 0.5 * std::log(0.5 / 0.75);
  EXPECT_NEAR(s.kl, expected, 1e-7);
  EXPECT_FALSE(s.same_top1);
  EXPECT_NEAR(std::exp(s.logprob) - std::exp(s.base_logprob), 0.25, 1e-7);
  // With k = 3 (the whole vocabulary) it is the full KL.
  EXPECT_NEAR(CompareWithBase(SummarizeDistribution(p, 1, 3), q).kl,
              0.5 * std::log(2.0) + 0.25 * std::log(0.5), 1e-7);
  const KlSummary sum = SummarizeKl({s, CompareWithBase(SummarizeDistribution(p, 0, 1), p)});
  EXPECT_NEAR(sum.mean_kl, expected / 2, 1e-7);
  EXPECT_EQ(sum.median_kl, 0.0);  // nearest rank: the smaller of two
  EXPECT_NEAR(sum.max_kl, expected, 1e-7);
  EXPECT_DOUBLE_EQ(sum.same_top1, 0.5);
}

// The row scoring over a thread pool gives the single-threaded numbers bit for bit: each row is
// one task with the same operations in the same order (and the scratch rows are per thread).
TEST(PerplexityRowScorer, ThreadsGiveTheSameBits) {
  const int vocab = 1 << 16, rows = 11, k = 64;
  std::vector<float> logits(static_cast<size_t>(rows) * vocab);
  uint32_t x = 12345;
  for (float& v : logits) {
    x = x * 1664525u + 1013904223u;
    v = static_cast<float>(x >> 8) / (1u << 24) * 40.0f - 20.0f;
  }
  std::vector<ScoredRow> scored;
  std::vector<TopKRecord> base_records;
  std::vector<double> lp;
  for (int r = 0; r < rows; ++r) {
    scored.push_back(ScoredRow{0, r, (r * 7919) % vocab, logits.data() + static_cast<size_t>(r) * vocab});
    // A base from the neighbouring row, so the KL is not zero.
    LogSoftmax(logits.data() + static_cast<size_t>((r + 1) % rows) * vocab, vocab, lp);
    base_records.push_back(SummarizeDistribution(lp, scored.back().target, k));
  }
  std::vector<const TopKRecord*> bases;
  for (const TopKRecord& b : base_records) bases.push_back(&b);
  bases[3] = nullptr;  // a row without a base

  std::vector<RowScore> one, many;
  RowScorer(nullptr, vocab).Score(scored, k, bases, one);
  ThreadPool pool(4);
  RowScorer threaded(&pool, vocab);
  threaded.Score(scored, k, bases, many);
  threaded.Score(scored, k, bases, many);  // scratch reused
  ASSERT_EQ(one.size(), many.size());
  for (int r = 0; r < rows; ++r) {
    SCOPED_TRACE(r);
    EXPECT_EQ(one[r].logprob, many[r].logprob);
    EXPECT_EQ(one[r].top.ids, many[r].top.ids);
    EXPECT_EQ(one[r].top.logprobs, many[r].top.logprobs);
    EXPECT_EQ(one[r].top.log_rest, many[r].top.log_rest);
    EXPECT_EQ(one[r].top.target_logprob, many[r].top.target_logprob);
    EXPECT_EQ(one[r].kl.kl, many[r].kl.kl);
    EXPECT_EQ(one[r].kl.same_top1, many[r].kl.same_top1);
    EXPECT_EQ(one[r].kl.logprob, many[r].kl.logprob);
    // And the same as the functions it runs, called directly.
    LogSoftmax(scored[r].logits, vocab, lp);
    EXPECT_EQ(one[r].logprob, lp[scored[r].target]);
    if (bases[r]) {
      EXPECT_GT(one[r].kl.kl, 0.0);
      EXPECT_EQ(one[r].kl.kl, CompareWithBase(*bases[r], lp).kl);
    }
  }
}

// The engine's perplexity over windows equals the float64 reference's over the same windows, to
// the float32 noise floor (the reference run in float against itself in double).
TEST(PerplexityVsReference, SameWindowsSameNumbers) {
  for (const char* preset : {"e2b", "12b"}) {
    const std::string dir = TinyCheckpoint(preset, {.vocab = 512});
    ASSERT_FALSE(dir.empty());
    auto ref = reference::ReferenceModel::Load(dir, {.threads = 2});
    ASSERT_TRUE(ref.ok()) << ref.status().message();
    auto model = LoadModel(dir, ModelOptions{.threads = 2});
    ASSERT_TRUE(model.ok()) << model.status().message();
    std::vector<int> text = RandomPromptIds(161, 512, 5);
    text.erase(text.begin());  // no <bos> in the text: the windows start with one
    const int ctx = 48;        // 3 sliding windows of the tiny presets (16)
    auto windows = PlanPerplexityWindows({2}, text, ctx, 20);
    ASSERT_TRUE(windows.ok()) << windows.status().message();

    PerplexityAccumulator engine;
    std::vector<double> engine_lp, lp;
    ASSERT_TRUE(ScorePerplexityWindows(**model, *windows, 13, [&](const ScoredRow& row) {
      LogSoftmax(row.logits, 512, lp);
      engine.Add(lp[row.target]);
      engine_lp.push_back(lp[row.target]);
      return OkStatus();
    }).ok());

    PerplexityAccumulator ref64, ref32;
    double max_engine = 0, max_floor = 0;
    size_t i = 0;
    for (const PerplexityWindow& w : *windows) {
      auto l64 = (*ref)->Logits<double>(w.ids);
      auto l32 = (*ref)->Logits<float>(w.ids);
      ASSERT_TRUE(l64.ok() && l32.ok());
      for (int j = w.first_scored; j < ctx; ++j, ++i) {
        std::vector<float> r64((*l64)[j - 1].begin(), (*l64)[j - 1].end());
        std::vector<float> r32((*l32)[j - 1].begin(), (*l32)[j - 1].end());
        // The double logits' log-softmax in double (float rounding of them is far below the floor).
        LogSoftmax(r64.data(), 512, lp);
        const double a = lp[w.ids[j]];
        LogSoftmax(r32.data(), 512, lp);
        const double b = lp[w.ids[j]];
        ref64.Add(a);
        ref32.Add(b);
        max_engine = std::max(max_engine, std::fabs(engine_lp[i] - a));
        max_floor = std::max(max_floor, std::fabs(b - a));
      }
    }
    ASSERT_EQ(i, engine_lp.size());
    const double floor_nll = std::fabs(ref32.MeanNll() - ref64.MeanNll());
    const double diff_nll = std::fabs(engine.MeanNll() - ref64.MeanNll());
    std::printf("[%s] %zu windows, %lld scored: PPL engine %.6f, float64 %.6f; mean NLL diff %.2e (floor %.2e), "
                "max per-token diff %.2e (floor %.2e)\n", preset, windows->size(),
                static_cast<long long>(engine.count()), engine.Perplexity(), ref64.Perplexity(), diff_nll, floor_nll,
                max_engine, max_floor);
    EXPECT_EQ(engine.count(), ref64.count());
    // Measured (2 threads): per token 1.6e-5 / 2.4e-5 against floors of 1.9e-5 / 2.8e-5 (e2b / 12b);
    // mean NLL 1.3e-6 / 1.4e-6. A mean cannot differ by more than its terms' largest difference,
    // so the mean is held to the per-token floor.
    EXPECT_LT(max_engine, 5 * max_floor) << preset;
    EXPECT_LT(diff_nll, max_floor) << preset;
  }
}

// --- the command, on the trained default model over held-out text (Proverbs 1) ---

std::string HeldOut() { return SourceDir() + "/tests/data/kjv-proverbs-1.txt"; }

// The first `verses` lines of the held-out text, in a file of their own (short runs for CI).
std::string HeldOutVerses(int verses) {
  const std::string path = TestTempDir("held_out") + "/verses.txt";
  std::ifstream in(HeldOut());
  std::ofstream out(path);
  std::string line;
  for (int i = 0; i < verses && std::getline(in, line); ++i) out << line << "\n";
  return path;
}

nlohmann::json RunJson(const std::string& args) {
  G4RunResult r = RunG4("perplexity --threads 2 --json " + args, /*merge_stderr=*/false);
  EXPECT_EQ(r.exit_code, 0) << args << "\n" << r.output;
  auto j = nlohmann::json::parse(r.output, nullptr, false);
  EXPECT_FALSE(j.is_discarded()) << r.output;
  return j;
}

TEST(PerplexityCommand, KlAgainstItselfIsZeroAndQ8IsNot) {
  const std::string dir = TestTempDir("ppl_cmd");
  const std::string common = "--model " + AssetsDir() + "/models/default --file " + HeldOutVerses(12) + " --ctx 64";
  const nlohmann::json base = RunJson(common + " --save-logits " + dir + "/bf16.topk");
  EXPECT_GE(base["scored"].get<int>(), 64);
  EXPECT_GT(base["ppl"].get<double>(), 1.0);

  const nlohmann::json self = RunJson(common + " --kl-base " + dir + "/bf16.topk");
  EXPECT_EQ(self["ppl"], base["ppl"]);
  EXPECT_EQ(self["kl"]["mean_kl"].get<double>(), 0.0);
  EXPECT_EQ(self["kl"]["max_kl"].get<double>(), 0.0);
  EXPECT_EQ(self["kl"]["same_top1"].get<double>(), 1.0);
  EXPECT_NEAR(self["kl"]["base_ppl"].get<double>(), base["ppl"].get<double>(), 1e-4 * base["ppl"].get<double>());

  // One thread instead of two (forward, softcap and row scoring split differently): the same file,
  // byte for byte.
  G4RunResult one = RunG4("perplexity --threads 1 " + common + " --save-logits " + dir + "/bf16-t1.topk");
  ASSERT_EQ(one.exit_code, 0) << one.output;
  auto bytes = [](const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  };
  EXPECT_EQ(bytes(dir + "/bf16-t1.topk"), bytes(dir + "/bf16.topk"));

  const nlohmann::json q8 = RunJson(common + " --quant q8 --kl-base " + dir + "/bf16.topk");
  EXPECT_GT(q8["kl"]["mean_kl"].get<double>(), 0.0);
  EXPECT_LT(q8["kl"]["same_top1"].get<double>(), 1.0 + 1e-12);

  // A saved run over other windows is refused, naming the difference.
  G4RunResult other = RunG4("perplexity " + common + " --stride 20 --kl-base " + dir + "/bf16.topk");
  EXPECT_NE(other.exit_code, 0);
  EXPECT_NE(other.output.find("was saved with stride 63, this run has 20"), std::string::npos) << other.output;
}

// --tp 2 (two ranks in this process, and two processes under mpirun when it is installed) against
// one rank: the same windows and numbers to the float32 noise of a split sum. Measured on the
// default model (Proverbs 1, ctx 64, 320 positions): mean KL 1.3e-8, max 1.3e-7, ln(PPL ratio)
// 1e-7, same top-1 everywhere; in-process and MPI give the same bits. Bounds: 100x.
TEST(PerplexityCommand, TensorParallelMatchesOneRank) {
  const std::string dir = TestTempDir("ppl_tp");
  const std::string common = "--model " + AssetsDir() + "/models/default --file " + HeldOutVerses(12) + " --ctx 64";
  const nlohmann::json base = RunJson(common + " --save-logits " + dir + "/tp1.topk");
  auto expect_same = [&](const nlohmann::json& tp, const char* how) {
    SCOPED_TRACE(how);
    EXPECT_EQ(tp["tp"].get<int>(), 2);
    EXPECT_EQ(tp["scored"], base["scored"]);
    EXPECT_LT(tp["kl"]["mean_kl"].get<double>(), 1e-6);
    EXPECT_LT(tp["kl"]["max_kl"].get<double>(), 1e-5);
    EXPECT_LT(std::fabs(tp["kl"]["mean_ln_ppl_ratio"].get<double>()), 1e-5);
    EXPECT_GE(tp["kl"]["same_top1"].get<double>(), 0.99);
  };
  G4RunResult threads = RunG4("perplexity --tp 2 --threads 1 --json " + common + " --kl-base " + dir + "/tp1.topk",
                              /*merge_stderr=*/false);
  ASSERT_EQ(threads.exit_code, 0) << threads.output;
  expect_same(nlohmann::json::parse(threads.output), "in-process ranks");

  if (!HaveMpirun()) GTEST_SKIP() << "mpirun not found: the two-process run is skipped";
  G4RunResult mpi = RunG4Mpi(2, "perplexity --threads 1 --json " + common + " --kl-base " + dir + "/tp1.topk",
                             /*merge_stderr=*/false);
  if (mpi.exit_code != 0 && mpi.output.find("built without MPI") != std::string::npos)
    GTEST_SKIP() << "g4 was built without MPI";
  ASSERT_EQ(mpi.exit_code, 0) << mpi.output;
  // Only rank 0 writes: one JSON line.
  EXPECT_EQ(mpi.output.find("\"tp\""), mpi.output.rfind("\"tp\"")) << mpi.output;
  expect_same(nlohmann::json::parse(mpi.output), "mpirun -np 2");
}

TEST(PerplexityCommand, ChatScoresTheTextInsideTheModelTurn) {
  const nlohmann::json chat = RunJson("--model " + AssetsDir() + "/models/default --file " + HeldOutVerses(12) +
                                      " --ctx 96 --chat");
  EXPECT_TRUE(chat["chat"].get<bool>());
  // <bos><|turn>user\nContinue the text.<turn|>\n<|turn>model\n
  EXPECT_GT(chat["prefix_tokens"].get<int>(), 5);
  EXPECT_EQ(chat["scored"].get<int>(), chat["windows"].get<int>() * 48);
}

TEST(PerplexityCommand, ErrorsArePreciseAndNonZero) {
  const std::string dir = TestTempDir("ppl_err");
  const std::string model = "--model " + AssetsDir() + "/models/default ";
  std::ofstream(dir + "/short.txt") << "In the beginning";
  struct Case {
    std::string args, message;
  };
  for (const Case& c : {
           Case{model + "--file " + dir + "/short.txt --ctx 64", "one window of --ctx 64 needs 63"},
           Case{model + "--file " + HeldOut() + " --ctx 5000", "--ctx 5000 exceeds the model's max_position_embeddings 4096"},
           Case{model + "--file " + dir + "/missing.txt", "cannot open --file"},
           Case{model + "--file " + HeldOut() + " --ctx 64 --kl-base " + dir + "/short.txt", "is not a g4 perplexity logits file"},
           Case{model + "--file " + HeldOut() + " --ctx 1", "--ctx must be >= 2"},
       }) {
    G4RunResult r = RunG4("perplexity " + c.args);
    EXPECT_NE(r.exit_code, 0) << c.args;
    EXPECT_NE(r.output.find(c.message), std::string::npos) << c.args << "\n" << r.output;
  }
}

}  // namespace
}  // namespace g4

namespace g4 {
namespace {

// A view of checkpoint `src` that ships the Gemma-4 chat template (links, no copy of the weights).
std::string WithChatTemplate(const std::string& src, const std::string& name) {
  const std::string dir = TestTempDir(name);
  for (const char* f : {"config.json", "generation_config.json", "tokenizer.json", "model.safetensors"})
    EXPECT_EQ(symlink((src + "/" + f).c_str(), (dir + "/" + f).c_str()), 0) << f;
  std::ifstream in(SourceDir() + "/tests/templates/gemma4_g4_small.jinja");
  std::ofstream(dir + "/chat_template.jinja") << in.rdbuf();
  return dir;
}

TEST(DoctorPerplexity, FlagsRandomWeightsAndPassesTheTrainedModel) {
  // Random weights read English as noise: a FAIL that says so.
  G4RunResult random = RunG4("doctor --model " + WithChatTemplate(TinyCheckpoint("e2b"), "doctor_random"));
  EXPECT_NE(random.exit_code, 0);
  EXPECT_NE(random.output.find("FAIL  perplexity"), std::string::npos) << random.output;
  EXPECT_NE(random.output.find("does not read this text as language"), std::string::npos) << random.output;
  // The trained default model (KJV only) still predicts English far better than chance.
  G4RunResult trained = RunG4("doctor --model " + WithChatTemplate(AssetsDir() + "/models/default", "doctor_trained"));
  EXPECT_NE(trained.output.find("OK    perplexity"), std::string::npos) << trained.output;
  // No template shipped: skipped, and --no-perplexity skips it.
  G4RunResult plain = RunG4("doctor --no-perplexity --model " + AssetsDir() + "/models/default");
  EXPECT_NE(plain.output.find("SKIP  perplexity     skipped (--no-perplexity)"), std::string::npos) << plain.output;
}

}  // namespace
}  // namespace g4
