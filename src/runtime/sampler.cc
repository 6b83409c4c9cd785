#include "runtime/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "kernels/ops.h"

namespace g4 {

void ApplySoftcapInPlace(float* logits, int n, float softcap) { Softcap(logits, n, softcap); }

void ApplyTokenMask(float* logits, int n, const uint64_t* allowed) {
  for (int w = 0; w * 64 < n; ++w) {
    const uint64_t bits = allowed[w];
    if (bits == ~uint64_t{0}) continue;
    const int end = std::min(n, (w + 1) * 64);
    for (int i = w * 64; i < end; ++i)
      if (!((bits >> (i & 63)) & 1)) logits[i] = -INFINITY;
  }
}

void TokenMaskOf(const std::vector<int>& ids, int vocab, std::vector<uint64_t>* bits) {
  bits->assign((static_cast<size_t>(vocab) + 63) / 64, 0);
  for (int id : ids)
    if (id >= 0 && id < vocab) (*bits)[id >> 6] |= uint64_t{1} << (id & 63);
}

Sampler::Sampler(const SamplingParams& params, float softcap, int vocab)
    : params_(params), softcap_(softcap), vocab_(vocab) {
  rng_.seed(params.has_seed ? params.seed : std::random_device{}());
}

void Sampler::Prepare(float* logits, const std::vector<int>& history, const uint64_t* allowed) {
  Softcap(logits, vocab_, softcap_);
  for (const auto& [id, bias] : params_.logit_bias)
    if (id >= 0 && id < vocab_) logits[id] += bias;
  if (params_.repetition_penalty != 1.0f || params_.presence_penalty != 0.0f ||
      params_.frequency_penalty != 0.0f) {
    // Counts per id in a table kept across calls (all zero between them): a second pass over
    // the history penalises each distinct id once and clears its count, so nothing is allocated
    // per token.
    if (token_counts_.size() != static_cast<size_t>(vocab_)) token_counts_.assign(vocab_, 0);
    for (int t : history)
      if (t >= 0 && t < vocab_) token_counts_[t]++;
    for (int t : history) {
      if (t < 0 || t >= vocab_ || token_counts_[t] == 0) continue;
      float& l = logits[t];
      if (params_.repetition_penalty != 1.0f)
        l = l > 0 ? l / params_.repetition_penalty : l * params_.repetition_penalty;
      l -= params_.presence_penalty + params_.frequency_penalty * static_cast<float>(token_counts_[t]);
      token_counts_[t] = 0;
    }
  }
  for (int id : params_.suppress_tokens)
    if (id >= 0 && id < vocab_) logits[id] = -INFINITY;
  // After the softcap, which would map -inf to a finite -softcap.
  if (allowed) ApplyTokenMask(logits, vocab_, allowed);
}

int Sampler::Sample(float* logits, const std::vector<int>& history, const uint64_t* allowed) {
  const bool plain_greedy = params_.greedy() && params_.logit_bias.empty() &&
                            params_.repetition_penalty == 1.0f &&
                            params_.presence_penalty == 0.0f && params_.frequency_penalty == 0.0f;
  if (plain_greedy) {
    for (int id : params_.suppress_tokens)
      if (id >= 0 && id < vocab_) logits[id] = -INFINITY;
    // Masking the raw logits picks the same argmax as masking softcapped ones (monotonic).
    greedy_masked_ = allowed != nullptr;
    if (allowed) ApplyTokenMask(logits, vocab_, allowed);
    int best = static_cast<int>(ArgMax(logits, vocab_));
    if (allowed) greedy_allowed_.assign(allowed, allowed + (vocab_ + 63) / 64);
    // Point at the raw logits: the softcapped, normalised distribution is computed (and the
    // logits copied) only if logprobs are asked for. A softcap + exp pass over 262k logits costs
    // ms per row, and even the 1 MiB copy was a twentieth of a speculative pass of two rows on the
    // default model (the pass is one 64 MiB weight read; docs/performance.md).
    greedy_logits_ = logits;
    norm_pending_ = true;
    return best;
  }
  norm_pending_ = false;
  Prepare(logits, history, allowed);
  const float temp = params_.greedy() ? 1.0f : params_.temperature;
  last_logits_.resize(vocab_);
  for (int i = 0; i < vocab_; ++i) last_logits_[i] = logits[i] / temp;
  const int best = static_cast<int>(ArgMax(last_logits_.data(), vocab_));
  double mx = last_logits_[best], sum = 0;
  for (float l : last_logits_) sum += std::exp(l - mx);
  last_log_norm_ = mx + std::log(sum);
  if (params_.greedy()) return best;

  const size_t keep = Filter(mx);
  if (keep == 0) return best;
  const std::vector<int>& idx = candidates_;
  const std::vector<double>& probs = probs_;
  double kept = 0;
  for (size_t i = 0; i < keep; ++i) kept += probs[i];
  std::uniform_real_distribution<double> uni(0.0, kept);
  double u = uni(rng_), acc = 0;
  for (size_t i = 0; i < keep; ++i) {
    acc += probs[i];
    if (u < acc) return idx[i];
  }
  // Rounding left u at the end: the last kept token, unless it is one of probability 0.
  return probs[keep - 1] > 0 ? idx[keep - 1] : best;
}

size_t Sampler::Filter(double mx) {
  // Candidates sorted by logit; top-k, then top-p (smallest prefix with mass >= p), then min-p.
  std::vector<int>& idx = candidates_;
  idx.clear();
  const int k = params_.top_k > 0 ? std::min(params_.top_k, vocab_) : vocab_;
  if (k < vocab_) {
    idx.resize(vocab_);
    std::iota(idx.begin(), idx.end(), 0);
    std::partial_sort(idx.begin(), idx.begin() + k, idx.end(),
                      [&](int a, int b) { return last_logits_[a] > last_logits_[b]; });
    idx.resize(k);
  } else {
    for (int i = 0; i < vocab_; ++i)
      if (std::isfinite(last_logits_[i])) idx.push_back(i);
    std::sort(idx.begin(), idx.end(), [&](int a, int b) { return last_logits_[a] > last_logits_[b]; });
  }
  // Nothing finite left (every allowed token suppressed): nothing is kept; callers fall back to
  // the argmax, which the caller can recognise as not allowed, rather than draw from an empty set.
  if (idx.empty()) return 0;
  std::vector<double>& probs = probs_;
  probs.resize(idx.size());
  double total = 0;
  for (size_t i = 0; i < idx.size(); ++i) total += probs[i] = std::exp(last_logits_[idx[i]] - mx);
  size_t keep = idx.size();
  if (params_.top_p < 1.0f) {
    double cum = 0;
    for (size_t i = 0; i < idx.size(); ++i) {
      cum += probs[i] / total;
      if (cum >= params_.top_p) {
        keep = i + 1;
        break;
      }
    }
  }
  if (params_.min_p > 0.0f) {
    const double floor = params_.min_p * probs[0];
    size_t i = 1;
    while (i < keep && probs[i] >= floor) ++i;
    keep = i;
  }
  keep = std::max<size_t>(keep, 1);
  return keep;
}

void Sampler::Distribution(float* logits, const std::vector<int>& history, TokenDistribution* out,
                           const uint64_t* allowed) {
  out->ids.clear();
  out->probs.clear();
  if (params_.greedy()) {
    out->ids.push_back(Sample(logits, history, allowed));
    out->probs.push_back(1.0);
    return;
  }
  norm_pending_ = false;
  Prepare(logits, history, allowed);
  last_logits_.resize(vocab_);
  for (int i = 0; i < vocab_; ++i) last_logits_[i] = logits[i] / params_.temperature;
  const int best = static_cast<int>(ArgMax(last_logits_.data(), vocab_));
  const double mx = last_logits_[best];
  double sum = 0;
  for (float l : last_logits_) sum += std::exp(l - mx);
  last_log_norm_ = mx + std::log(sum);
  const size_t keep = Filter(mx);
  double kept = 0;
  for (size_t i = 0; i < keep; ++i) kept += probs_[i];
  for (size_t i = 0; i < keep; ++i) {
    if (probs_[i] <= 0) continue;
    out->ids.push_back(candidates_[i]);
    out->probs.push_back(probs_[i] / kept);
  }
  if (out->ids.empty()) {
    out->ids.push_back(best);
    out->probs.push_back(1.0);
  }
}

double Sampler::Uniform() { return std::uniform_real_distribution<double>(0.0, 1.0)(rng_); }

int Sampler::Draw(const TokenDistribution& dist) {
  const double u = Uniform();
  double acc = 0;
  for (size_t i = 0; i < dist.ids.size(); ++i) {
    acc += dist.probs[i];
    if (u < acc) return dist.ids[i];
  }
  // Rounding left u past the sum: the last token of non-zero probability.
  for (size_t i = dist.ids.size(); i-- > 0;)
    if (dist.probs[i] > 0) return dist.ids[i];
  return dist.ids.empty() ? 0 : dist.ids.front();
}

double TokenDistribution::ProbOf(int id) const {
  for (size_t i = 0; i < ids.size(); ++i)
    if (ids[i] == id) return probs[i];
  return 0;
}

void Sampler::Normalize() const {
  if (!norm_pending_) return;
  norm_pending_ = false;
  last_logits_.assign(greedy_logits_, greedy_logits_ + vocab_);
  Softcap(last_logits_.data(), vocab_, softcap_);
  for (int id : params_.suppress_tokens)
    if (id >= 0 && id < vocab_) last_logits_[id] = -INFINITY;
  if (greedy_masked_) ApplyTokenMask(last_logits_.data(), vocab_, greedy_allowed_.data());
  const int best = static_cast<int>(ArgMax(last_logits_.data(), vocab_));
  double mx = last_logits_[best], sum = 0;
  for (float l : last_logits_) sum += std::exp(l - mx);
  last_log_norm_ = mx + std::log(sum);
}

double Sampler::LogProb(int token) const {
  Normalize();
  if (token < 0 || token >= static_cast<int>(last_logits_.size())) return -INFINITY;
  return last_logits_[token] - last_log_norm_;
}

std::vector<std::pair<int, double>> Sampler::TopLogProbs(int k) const {
  Normalize();
  std::vector<int> idx(last_logits_.size());
  std::iota(idx.begin(), idx.end(), 0);
  k = std::min<int>(k, static_cast<int>(idx.size()));
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(),
                    [&](int a, int b) { return last_logits_[a] > last_logits_[b]; });
  std::vector<std::pair<int, double>> out;
  for (int i = 0; i < k; ++i) out.emplace_back(idx[i], last_logits_[idx[i]] - last_log_norm_);
  return out;
}

}  // namespace g4
