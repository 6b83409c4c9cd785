// Turns one row of raw logits into the next token. Greedy decoding takes the argmax of the raw
// logits (softcap is monotonic, so it cannot change the argmax); every other mode applies the
// softcap first, as the reference distribution does, then the processors in HF order.
#pragma once

#include <cstdint>
#include <map>
#include <random>
#include <vector>

namespace g4 {

struct SamplingParams {
  float temperature = 0.0f;  // <= 0: greedy
  int top_k = 0;             // 0: off
  float top_p = 1.0f;
  float min_p = 0.0f;
  float repetition_penalty = 1.0f;  // HF: divide positive / multiply negative logits of seen tokens
  float presence_penalty = 0.0f;    // OpenAI: minus once per seen token
  float frequency_penalty = 0.0f;   // OpenAI: minus per occurrence
  uint64_t seed = 0;
  bool has_seed = false;
  std::vector<int> suppress_tokens;  // logits set to -inf (12B: 258882, 258883)
  std::map<int, float> logit_bias;

  bool greedy() const { return temperature <= 0.0f; }
};

// A sampling distribution over the tokens it can pick: ids (most likely first) and their
// probabilities, which sum to 1. Speculative sampling compares the target's and the drafter's.
struct TokenDistribution {
  std::vector<int> ids;
  std::vector<double> probs;
  double ProbOf(int id) const;  // 0 for an id outside the support
};

class Sampler {
 public:
  Sampler(const SamplingParams& params, float softcap, int vocab);

  // `logits` (raw, pre-softcap) is modified in place. `history` holds the tokens the penalties
  // look at (the generated ones, like OpenAI; pass the prompt too for HF semantics).
  // `allowed`, when given, restricts the choice to the tokens whose bit is set (bit id%64 of word
  // id/64; constrained output: a grammar's mask, a forced tool call's next tokens): every other
  // token gets probability 0, after softcap, penalties and logit_bias, greedy or sampled. A plain
  // greedy call copies the mask for later logprobs: it need only live until Sample returns.
  int Sample(float* logits, const std::vector<int>& history, const uint64_t* allowed = nullptr);

  // The distribution Sample() draws from for these logits (softcap, processors, temperature,
  // top-k/top-p/min-p), without drawing; `logits` is modified in place. Greedy modes give the
  // argmax with probability 1.
  void Distribution(float* logits, const std::vector<int>& history, TokenDistribution* out,
                    const uint64_t* allowed = nullptr);
  // A uniform draw in [0, 1) from this sampler's generator (speculative sampling's accept test).
  double Uniform();
  // One draw from `dist` with this sampler's generator.
  int Draw(const TokenDistribution& dist);

  // After Sample(): log-probability of `token` under the final distribution (softcapped, with
  // penalties and temperature; greedy uses temperature 1). After a plain greedy Sample (no
  // penalties or bias) it reads the `logits` that call was given: ask before they change.
  double LogProb(int token) const;
  // The k most likely tokens under that distribution, with log-probabilities.
  std::vector<std::pair<int, double>> TopLogProbs(int k) const;

  const SamplingParams& params() const { return params_; }

 private:
  void Prepare(float* logits, const std::vector<int>& history, const uint64_t* allowed);
  // After Prepare and temperature: fills candidates_ / probs_ (unnormalised, by logit) and
  // returns how many top-k/top-p/min-p keep (0 when no logit is finite); `mx` is the largest logit.
  size_t Filter(double mx);

  SamplingParams params_;
  float softcap_;
  int vocab_;
  std::mt19937_64 rng_;
  void Normalize() const;  // finishes a greedy call's distribution on first use
  // Distribution of the last call, for logprobs. A plain greedy call only points at its raw
  // logits (greedy_logits_); Normalize() copies them here on first use (most requests never ask).
  mutable std::vector<float> last_logits_;
  const float* greedy_logits_ = nullptr;
  mutable double last_log_norm_ = 0;
  mutable bool norm_pending_ = false;
  // Candidate ids by logit and their weights: kept across calls so sampling does not allocate.
  std::vector<int> candidates_;
  std::vector<double> probs_;
  std::vector<int> token_counts_;  // [vocab] history counts for the penalties
  // A plain greedy call's mask, kept for Normalize (the softcap maps -inf to a finite -softcap).
  std::vector<uint64_t> greedy_allowed_;
  bool greedy_masked_ = false;
};

void ApplySoftcapInPlace(float* logits, int n, float softcap);
// Sets every logit whose bit in `allowed` is clear to -inf.
void ApplyTokenMask(float* logits, int n, const uint64_t* allowed);
// The bitmask (vocab bits) allowing exactly `ids`, into `bits` (resized, reused).
void TokenMaskOf(const std::vector<int>& ids, int vocab, std::vector<uint64_t>* bits);

}  // namespace g4
