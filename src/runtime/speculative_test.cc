// Speculative sampling keeps the target's output distribution exactly. A synthetic target and
// drafter (first-order Markov chains over 4 tokens, given as logits per previous token) generate
// many 3-token sequences through VerifyDrafts; the joint distribution of the 64 outcomes must
// match the target chain's (computed here, independently of the sampler) by a chi-square test,
// and the same test must reject the drafter's chain (it has the power to see a wrong answer).
#include "runtime/speculative.h"

#include <gtest/gtest.h>

#include <cmath>

#include "runtime/ngram_drafter.h"

namespace g4 {
namespace {

constexpr int kV = 4;
constexpr int kLen = 3;
constexpr int kCells = kV * kV * kV;
constexpr int kSequences = 60000;

// logits[previous token][next token]
using Chain = std::array<std::array<float, kV>, kV>;
const Chain kTarget = {{{1.0f, 0.2f, -0.5f, 0.4f},
                        {-0.3f, 0.9f, 0.1f, 0.0f},
                        {0.5f, -0.2f, 0.8f, -0.6f},
                        {0.0f, 0.3f, -0.4f, 1.1f}}};
const Chain kDraft = {{{0.2f, 1.2f, -0.1f, -0.3f},
                       {0.6f, 0.1f, 0.4f, -0.8f},
                       {-0.5f, 0.7f, 0.0f, 0.9f},
                       {1.0f, -0.2f, 0.3f, 0.0f}}};

double Prob(const Chain& c, int prev, int next) {
  double sum = 0;
  for (float l : c[prev]) sum += std::exp(static_cast<double>(l));
  return std::exp(static_cast<double>(c[prev][next])) / sum;
}

int Cell(const std::vector<int>& t) { return (t[0] * kV + t[1]) * kV + t[2]; }

// Pearson's chi-square of observed counts against the chain's sequence probabilities from token 0.
double ChiSquare(const std::vector<int64_t>& counts, const Chain& c) {
  double chi = 0;
  for (int cell = 0; cell < kCells; ++cell) {
    const int a = cell / (kV * kV), b = cell / kV % kV, d = cell % kV;
    const double expected = kSequences * Prob(c, 0, a) * Prob(c, a, b) * Prob(c, b, d);
    chi += (counts[cell] - expected) * (counts[cell] - expected) / expected;
  }
  return chi;
}

// The chi-square quantile of `df` degrees of freedom at the normal quantile z (Wilson-Hilferty).
double ChiSquareQuantile(int df, double z) {
  const double k = 2.0 / (9.0 * df);
  return df * std::pow(1 - k + z * std::sqrt(k), 3);
}

enum class DraftKind { kSampled, kGreedy };

// Generates kSequences sequences of kLen tokens after token 0, drafting up to 2 tokens a pass.
std::vector<int64_t> SpeculativeCounts(DraftKind kind, uint64_t seed) {
  SamplingParams params;
  params.temperature = 1.0f;
  params.seed = seed;
  params.has_seed = true;
  Sampler target(params, 0.0f, kV);
  params.seed = seed + 1;
  Sampler drafter(params, 0.0f, kV);
  VerifyScratch scratch;
  scratch.q_dense.assign(kV, 0.0);
  std::vector<int64_t> counts(kCells, 0);
  std::vector<int> generated, none;
  Draft draft;
  std::vector<float> logits, row(kV);
  for (int s = 0; s < kSequences; ++s) {
    generated.clear();
    int last = 0;
    while (static_cast<int>(generated.size()) < kLen) {
      draft.Clear();
      int prev = last;
      for (int k = 0; k < 2; ++k) {
        row.assign(kDraft[prev].begin(), kDraft[prev].end());
        if (kind == DraftKind::kSampled) {
          draft.q.emplace_back();
          drafter.Distribution(row.data(), none, &draft.q.back());
          draft.tokens.push_back(drafter.Draw(draft.q.back()));
        } else {
          draft.tokens.push_back(static_cast<int>(
              std::max_element(kDraft[prev].begin(), kDraft[prev].end()) - kDraft[prev].begin()));
        }
        prev = draft.tokens.back();
      }
      // Target rows: after `last`, then after each drafted token.
      logits.clear();
      prev = last;
      for (size_t i = 0; i <= draft.tokens.size(); ++i) {
        logits.insert(logits.end(), kTarget[prev].begin(), kTarget[prev].end());
        if (i < draft.tokens.size()) prev = draft.tokens[i];
      }
      VerifyDrafts(target, logits.data(), kV, draft, generated, scratch);
      last = generated.back();
    }
    generated.resize(kLen);
    counts[Cell(generated)]++;
  }
  return counts;
}

// Alpha = 1e-4 (z = 3.72) with fixed seeds: deterministic, and a real bias of the size a wrong
// acceptance rule makes (the drafter's chain below) is far above it.
const double kCritical = ChiSquareQuantile(kCells - 1, 3.72);

TEST(SpeculativeSampling, OutputDistributionIsTheTargets) {
  for (DraftKind kind : {DraftKind::kSampled, DraftKind::kGreedy}) {
    const std::vector<int64_t> counts = SpeculativeCounts(kind, 17);
    const double chi = ChiSquare(counts, kTarget);
    std::printf("%s drafter: chi-square %.1f vs target chain (critical %.1f), %.1f vs drafter chain\n",
                kind == DraftKind::kSampled ? "sampling" : "greedy", chi, kCritical,
                ChiSquare(counts, kDraft));
    EXPECT_LT(chi, kCritical);
  }
}

// Power: sequences drawn from the drafter's chain alone (what accepting every draft gives) fail.
TEST(SpeculativeSampling, TheTestRejectsTheDraftersDistribution) {
  SamplingParams params;
  params.temperature = 1.0f;
  params.seed = 5;
  params.has_seed = true;
  Sampler sampler(params, 0.0f, kV);
  std::vector<int64_t> counts(kCells, 0);
  std::vector<int> t, none;
  std::vector<float> row;
  for (int s = 0; s < kSequences; ++s) {
    t.clear();
    int prev = 0;
    for (int k = 0; k < kLen; ++k) {
      row.assign(kDraft[prev].begin(), kDraft[prev].end());
      prev = sampler.Sample(row.data(), none);
      t.push_back(prev);
    }
    counts[Cell(t)]++;
  }
  EXPECT_GT(ChiSquare(counts, kTarget), 10 * kCritical);
  EXPECT_LT(ChiSquare(counts, kDraft), kCritical) << "the sampler itself draws its distribution";
}

TEST(SpeculativeGreedyVerify, KeepsTheAgreeingPrefixAndAddsTheTargetsToken) {
  SamplingParams greedy;
  Sampler sampler(greedy, 0.0f, kV);
  VerifyScratch scratch;
  // Rows' argmaxes: 2, 1, 3.
  std::vector<float> logits = {0, 0, 5, 0, 0, 5, 0, 0, 0, 0, 0, 5};
  Draft draft;
  draft.tokens = {2, 0};
  std::vector<int> generated;
  EXPECT_EQ(VerifyDrafts(sampler, std::vector<float>(logits).data(), kV, draft, generated, scratch), 2);
  EXPECT_EQ(generated, (std::vector<int>{2, 1}));  // d1 kept, d2 replaced by the target's 1
  draft.tokens = {2, 1};
  generated.clear();
  EXPECT_EQ(VerifyDrafts(sampler, std::vector<float>(logits).data(), kV, draft, generated, scratch), 3);
  EXPECT_EQ(generated, (std::vector<int>{2, 1, 3}));  // all kept plus the bonus token
}

TEST(NgramDrafter, CopiesWhatFollowedTheLongestLatestMatch) {
  NgramDrafter ngram(1, 3);
  Draft draft;
  auto propose = [&](std::vector<int> ctx, int max) {
    DraftRequest r;
    r.context = &ctx;
    r.max_tokens = max;
    EXPECT_TRUE(ngram.Propose(r, &draft).ok());
    return draft.tokens;
  };
  // Suffix [1 2 3] occurred at 0: what followed it.
  EXPECT_EQ(propose({1, 2, 3, 4, 5, 9, 1, 2, 3}, 2), (std::vector<int>{4, 5}));
  // The 3-gram [7 2 3] never occurred; the 2-gram [2 3] did, latest at 5 (followed by 8).
  EXPECT_EQ(propose({2, 3, 4, 0, 0, 2, 3, 8, 7, 2, 3}, 4), (std::vector<int>{8, 7, 2, 3}));
  // Only as far as the context goes.
  EXPECT_EQ(propose({6, 1, 6}, 5), (std::vector<int>{1, 6}));
  EXPECT_TRUE(propose({1, 2, 3}, 4).empty());
  EXPECT_TRUE(propose({5}, 4).empty());
  NgramDrafter longer(2, 3);  // n >= 2: a single-token match is not enough
  DraftRequest r;
  std::vector<int> ctx = {6, 1, 6};
  r.context = &ctx;
  r.max_tokens = 4;
  ASSERT_TRUE(longer.Propose(r, &draft).ok());
  EXPECT_TRUE(draft.tokens.empty());
}

}  // namespace
}  // namespace g4
