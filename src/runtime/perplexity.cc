#include "runtime/perplexity.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "runtime/sampler.h"

namespace g4 {

Result<std::vector<PerplexityWindow>> PlanPerplexityWindows(const std::vector<int>& prefix,
                                                            const std::vector<int>& text, int ctx,
                                                            int stride) {
  const int p = static_cast<int>(prefix.size());
  const int first = std::max(p, ctx / 2);
  if (first >= ctx)
    return Status::Errorf("--ctx ", ctx, " leaves nothing to score: the window starts with ", p,
                          " prefix tokens and scores from position max(", p, ", ctx/2) on; use --ctx > ", 2 * p);
  const int text_per_window = ctx - p;
  if (stride == 0) stride = text_per_window;
  if (stride < 1) return Status::Errorf("--stride must be >= 1 (got ", stride, ")");
  if (static_cast<int64_t>(text.size()) < text_per_window)
    return Status::Errorf("the text has ", text.size(), " tokens; one window of --ctx ", ctx, " needs ",
                          text_per_window, " (", p, " of the window are the prefix); give more text or a smaller --ctx");
  std::vector<PerplexityWindow> windows;
  for (int64_t s = 0; s + text_per_window <= static_cast<int64_t>(text.size()); s += stride) {
    PerplexityWindow w;
    w.ids = prefix;
    w.ids.insert(w.ids.end(), text.begin() + s, text.begin() + s + text_per_window);
    w.first_scored = first;
    w.text_start = s;
    windows.push_back(std::move(w));
  }
  return windows;
}

uint64_t HashPerplexityWindows(const std::vector<PerplexityWindow>& windows) {
  uint64_t h = 1469598103934665603ull;
  auto mix = [&h](uint32_t v) {
    for (int i = 0; i < 4; ++i) {
      h ^= (v >> (8 * i)) & 0xff;
      h *= 1099511628211ull;
    }
  };
  for (const auto& w : windows) {
    mix(static_cast<uint32_t>(w.first_scored));
    mix(static_cast<uint32_t>(w.ids.size()));
    for (int id : w.ids) mix(static_cast<uint32_t>(id));
  }
  return h;
}

namespace {

constexpr int64_t kSoftcapBlock = 1 << 14;

}  // namespace

Status ScorePerplexityChunks(Model& model, const std::vector<PerplexityWindow>& windows, int batch,
                             const std::function<Status(const std::vector<ScoredRow>&)>& on_chunk,
                             const std::function<void(int)>& on_window) {
  if (windows.empty()) return OkStatus();
  const ModelPlan& plan = model.plan();
  const int ctx = static_cast<int>(windows[0].ids.size());
  batch = std::clamp(batch, 1, ctx);
  KvCache cache(plan, ctx, batch);
  Activations act;
  std::vector<float> logits(static_cast<size_t>(batch) * plan.vocab);
  std::vector<BatchRow> rows;
  std::vector<int> wanted_pos;  // scored position each logits row predicts
  std::vector<ScoredRow> scored;
  for (size_t w = 0; w < windows.size(); ++w) {
    const PerplexityWindow& win = windows[w];
    if (static_cast<int>(win.ids.size()) != ctx) return Status::Error("internal: windows of different sizes");
    for (int id : win.ids)
      if (id < 0 || id >= plan.vocab)
        return Status::Errorf("token id ", id, " is outside the model's vocabulary of ", plan.vocab);
    cache.Reset();
    for (int start = 0; start < ctx; start += batch) {
      const int end = std::min(ctx, start + batch);
      rows.clear();
      wanted_pos.clear();
      for (int i = start; i < end; ++i) {
        // Row i's logits predict the token at i + 1: wanted when i + 1 is scored.
        const bool want = i + 1 >= win.first_scored && i + 1 < ctx;
        rows.push_back(BatchRow{win.ids[i], i, &cache, want});
        if (want) wanted_pos.push_back(i + 1);
      }
      G4_RETURN_IF_ERROR(model.Forward(rows, act, wanted_pos.empty() ? nullptr : logits.data()));
      if (wanted_pos.empty() || !on_chunk) continue;
      // The softcap (a tanh per logit: 262,144 per row on Gemma) in blocks over the pool; each
      // logit's value does not depend on the split.
      const int64_t n_logits = static_cast<int64_t>(wanted_pos.size()) * plan.vocab;
      const float cap = static_cast<float>(plan.softcap);
      model.pool().ParallelFor((n_logits + kSoftcapBlock - 1) / kSoftcapBlock, [&](int64_t b, int) {
        const int64_t from = b * kSoftcapBlock;
        ApplySoftcapInPlace(logits.data() + from, static_cast<int>(std::min(kSoftcapBlock, n_logits - from)), cap);
      });
      scored.clear();
      for (size_t r = 0; r < wanted_pos.size(); ++r)
        scored.push_back(ScoredRow{static_cast<int>(w), wanted_pos[r], win.ids[wanted_pos[r]],
                                   logits.data() + r * plan.vocab});
      G4_RETURN_IF_ERROR(on_chunk(scored));
    }
    if (on_window) on_window(static_cast<int>(w) + 1);
  }
  return OkStatus();
}

Status ScorePerplexityWindows(Model& model, const std::vector<PerplexityWindow>& windows, int batch,
                              const std::function<Status(const ScoredRow&)>& on_row,
                              const std::function<void(int)>& on_window) {
  return ScorePerplexityChunks(
      model, windows, batch,
      [&](const std::vector<ScoredRow>& rows) -> Status {
        for (const ScoredRow& row : rows) G4_RETURN_IF_ERROR(on_row(row));
        return OkStatus();
      },
      on_window);
}

void LogSoftmax(const float* logits, int n, std::vector<double>& out) {
  double m = -INFINITY;
  for (int i = 0; i < n; ++i) m = std::max(m, static_cast<double>(logits[i]));
  double s = 0;
  for (int i = 0; i < n; ++i) s += std::exp(static_cast<double>(logits[i]) - m);
  const double lse = m + std::log(s);
  out.resize(n);
  for (int i = 0; i < n; ++i) out[i] = static_cast<double>(logits[i]) - lse;
}

namespace {

// log of the probability of every id not in `ids`, summed directly (no 1 - sum cancellation).
float LogRestMass(const std::vector<double>& logprobs, const std::vector<int>& ids) {
  std::vector<int> sorted = ids;
  std::sort(sorted.begin(), sorted.end());
  double rest = 0;
  size_t k = 0;
  for (int i = 0; i < static_cast<int>(logprobs.size()); ++i) {
    if (k < sorted.size() && sorted[k] == i) {
      ++k;
      continue;
    }
    rest += std::exp(logprobs[i]);
  }
  return static_cast<float>(std::log(rest));  // -inf when nothing is left
}

}  // namespace

TopKRecord SummarizeDistribution(const std::vector<double>& logprobs, int target, int k) {
  const int n = static_cast<int>(logprobs.size());
  k = std::min(k, n);
  std::vector<int> order(n);
  std::iota(order.begin(), order.end(), 0);
  auto more_likely = [&](int a, int b) { return logprobs[a] > logprobs[b] || (logprobs[a] == logprobs[b] && a < b); };
  std::partial_sort(order.begin(), order.begin() + k, order.end(), more_likely);
  TopKRecord r;
  r.target = target;
  r.target_logprob = static_cast<float>(logprobs[target]);
  r.ids.assign(order.begin(), order.begin() + k);
  for (int id : r.ids) r.logprobs.push_back(static_cast<float>(logprobs[id]));
  r.log_rest = LogRestMass(logprobs, r.ids);
  return r;
}

KlSample CompareWithBase(const TopKRecord& base, const std::vector<double>& logprobs) {
  KlSample s;
  // KL of the base's k + 1 bins (its top k, the rest) against this run's mass in the same bins:
  // a lower bound of the full KL that equals it as the rest's mass goes to 0. Both sides are
  // rounded to float as stored, so a run against its own file gives exactly 0.
  double kl = 0;
  for (size_t i = 0; i < base.ids.size(); ++i) {
    const double lp = base.logprobs[i];
    const double lq = static_cast<float>(logprobs[base.ids[i]]);
    kl += std::exp(lp) * (lp - lq);
  }
  if (std::isfinite(base.log_rest)) {
    const double lq_rest = LogRestMass(logprobs, base.ids);
    kl += std::exp(static_cast<double>(base.log_rest)) * (base.log_rest - lq_rest);
  }
  s.kl = std::max(0.0, kl);  // rounding can leave -1e-17 for equal distributions
  int top = 0;
  for (int i = 1; i < static_cast<int>(logprobs.size()); ++i)
    if (logprobs[i] > logprobs[top]) top = i;
  s.same_top1 = !base.ids.empty() && top == base.ids[0];
  s.base_logprob = base.target_logprob;
  s.logprob = static_cast<float>(logprobs[base.target]);
  return s;
}

RowScorer::RowScorer(ThreadPool* pool, int vocab)
    : pool_(pool), vocab_(vocab), scratch_(pool ? pool->size() : 1) {}

void RowScorer::Score(const std::vector<ScoredRow>& rows, int top_k, const std::vector<const TopKRecord*>& bases,
                      std::vector<RowScore>& out) {
  out.resize(rows.size());
  auto score = [&](int64_t i, int thread) {
    std::vector<double>& lp = scratch_[thread];
    const ScoredRow& row = rows[i];
    RowScore& s = out[i];
    LogSoftmax(row.logits, vocab_, lp);
    s.logprob = lp[row.target];
    if (top_k > 0) s.top = SummarizeDistribution(lp, row.target, top_k);
    if (!bases.empty() && bases[i]) s.kl = CompareWithBase(*bases[i], lp);
  };
  if (!pool_ || pool_->size() == 1 || rows.size() < 2) {
    for (size_t i = 0; i < rows.size(); ++i) score(static_cast<int64_t>(i), 0);
    return;
  }
  pool_->ParallelFor(static_cast<int64_t>(rows.size()), score);
}

double PerplexityAccumulator::Perplexity() const { return std::exp(MeanNll()); }

double PerplexityAccumulator::PerplexityError() const {
  if (n_ < 2) return 0;
  const double mean = MeanNll();
  const double var = std::max(0.0, (sum_sq_ / n_ - mean * mean) * n_ / (n_ - 1));
  return Perplexity() * std::sqrt(var / n_);
}

KlSummary SummarizeKl(const std::vector<KlSample>& samples) {
  KlSummary s;
  s.positions = static_cast<int64_t>(samples.size());
  if (samples.empty()) return s;
  std::vector<double> kls;
  PerplexityAccumulator base, self;
  double dp_sum = 0, dp_sq = 0, same = 0;
  for (const KlSample& x : samples) {
    kls.push_back(x.kl);
    base.Add(x.base_logprob);
    self.Add(x.logprob);
    const double dp = std::exp(x.logprob) - std::exp(x.base_logprob);
    dp_sum += dp;
    dp_sq += dp * dp;
    same += x.same_top1;
  }
  const double n = static_cast<double>(samples.size());
  s.mean_kl = std::accumulate(kls.begin(), kls.end(), 0.0) / n;
  std::sort(kls.begin(), kls.end());
  // Nearest-rank quantiles: the smallest value with at least q of the samples at or below it.
  auto quantile = [&](double q) {
    const size_t rank = static_cast<size_t>(std::ceil(q * n));
    return kls[std::clamp<size_t>(rank, 1, kls.size()) - 1];
  };
  s.median_kl = quantile(0.5);
  s.p99_kl = quantile(0.99);
  s.max_kl = kls.back();
  s.same_top1 = same / n;
  s.mean_dp = dp_sum / n;
  s.rms_dp = std::sqrt(dp_sq / n);
  s.base_ppl = base.Perplexity();
  s.ppl = self.Perplexity();
  s.mean_log_ppl_ratio = self.MeanNll() - base.MeanNll();
  return s;
}

}  // namespace g4
