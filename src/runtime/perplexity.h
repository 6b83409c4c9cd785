// Perplexity over windows of a token sequence, as llama-perplexity scores it, and the statistics
// of one run's distributions against a saved one (KL divergence, top-1 agreement). `g4 perplexity`
// is the front end (docs/perplexity.md has the rules in words).
//
// Windows: each window is `prefix` (BOS, or the chat turn opening) followed by ctx - |prefix|
// consecutive text tokens; window k starts at text token k * stride. Within a window the tokens at
// positions j in [first, ctx) are scored, first = max(|prefix|, ctx / 2): the model's distribution
// at position j - 1 (softcapped logits, log-softmax in double) gives -log p(ids[j]). The first
// half of a window is context only, so every scored token sees at least ctx/2 tokens before it.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "base/status.h"
#include "base/thread_pool.h"
#include "io/logits_file.h"
#include "model/forward.h"

namespace g4 {

struct PerplexityWindow {
  std::vector<int> ids;  // ctx tokens: the prefix, then text
  int first_scored = 0;  // positions [first_scored, ctx) are scored
  int64_t text_start = 0;
};

// stride 0: ctx - |prefix| (windows side by side, as llama-perplexity). Errors say which limit
// the request breaks (text shorter than one window, ctx leaving nothing to score, stride < 1).
Result<std::vector<PerplexityWindow>> PlanPerplexityWindows(const std::vector<int>& prefix,
                                                            const std::vector<int>& text, int ctx,
                                                            int stride);

// FNV-1a over every window's ids and scored range: a saved run and a new one must agree on it.
uint64_t HashPerplexityWindows(const std::vector<PerplexityWindow>& windows);

struct ScoredRow {
  int window = 0;
  int pos = 0;       // position of the scored token in its window
  int target = 0;    // ids[pos]
  const float* logits = nullptr;  // softcapped logits at pos - 1, [vocab]
};

// Runs every window through the model from an empty cache, `batch` rows per Forward (only the rows
// whose logits are needed compute the LM head), and calls on_chunk with the scored positions of
// each Forward, in order (never empty); on_window (may be null) after each window. Under tensor
// parallelism every rank runs it (the same Forward calls); an error on_chunk returns ends this
// rank's loop, so a rank that must stay in step with its peers reports errors after the loop.
// A null on_chunk runs the Forward calls only (a tensor-parallel rank that scores nothing: no
// softcap over its rows).
Status ScorePerplexityChunks(Model& model, const std::vector<PerplexityWindow>& windows, int batch,
                             const std::function<Status(const std::vector<ScoredRow>&)>& on_chunk,
                             const std::function<void(int windows_done)>& on_window = nullptr);

// The same, one scored position at a time.
Status ScorePerplexityWindows(Model& model, const std::vector<PerplexityWindow>& windows, int batch,
                              const std::function<Status(const ScoredRow&)>& on_row,
                              const std::function<void(int windows_done)>& on_window = nullptr);

// log-softmax of n logits, in double.
void LogSoftmax(const float* logits, int n, std::vector<double>& out);

// The top k of a distribution (log-probabilities), the target's log-probability and the rest's
// log-mass, rounded to float as the logits file stores them.
TopKRecord SummarizeDistribution(const std::vector<double>& logprobs, int target, int k);

// One position of a run compared with the same position of a saved base run.
struct KlSample {
  double kl = 0;          // KL(base || this) over the base's top-k ids and the rest as one bin
  bool same_top1 = false;
  double base_logprob = 0, logprob = 0;  // of the target token
};
KlSample CompareWithBase(const TopKRecord& base, const std::vector<double>& logprobs);

// Running perplexity: exp of the mean negative log-likelihood, with the standard error of the
// mean carried through exp (as llama-perplexity prints "PPL = x +/- e").
class PerplexityAccumulator {
 public:
  void Add(double logprob) {
    sum_ -= logprob;
    sum_sq_ += logprob * logprob;
    ++n_;
  }
  int64_t count() const { return n_; }
  double MeanNll() const { return n_ ? sum_ / n_ : 0; }
  double Perplexity() const;
  double PerplexityError() const;

 private:
  double sum_ = 0, sum_sq_ = 0;
  int64_t n_ = 0;
};

// What `g4 perplexity` takes from one scored row: the target's log-probability, the top-K summary
// it saves (top_k > 0) and the comparison with a saved base record (base non-null).
struct RowScore {
  double logprob = 0;
  TopKRecord top;
  KlSample kl;
};

// Scores rows[i] against bases[i] (bases empty, or one per row, null = none) into out[i]: the
// log-softmax over the vocabulary in double and what follows from it, the costly part of a
// perplexity run on a large vocabulary. One task per row on `pool` (null: the calling thread);
// each row is computed by one thread with the same operations in the same order, so the results
// are bitwise the same for any pool size. Keeps one vocabulary-sized scratch row per thread.
class RowScorer {
 public:
  RowScorer(ThreadPool* pool, int vocab);
  void Score(const std::vector<ScoredRow>& rows, int top_k, const std::vector<const TopKRecord*>& bases,
             std::vector<RowScore>& out);

 private:
  ThreadPool* pool_;
  int vocab_;
  std::vector<std::vector<double>> scratch_;
};

struct KlSummary {
  int64_t positions = 0;
  double mean_kl = 0, median_kl = 0, p99_kl = 0, max_kl = 0;
  double same_top1 = 0;           // fraction; llama-perplexity prints it as "Same top p"
  double mean_dp = 0, rms_dp = 0;  // p(target) of this run minus the base's
  double base_ppl = 0, ppl = 0;
  double mean_log_ppl_ratio = 0;  // mean of logprob_base - logprob over positions = ln(PPL/PPL_base)
};
KlSummary SummarizeKl(const std::vector<KlSample>& samples);

}  // namespace g4
