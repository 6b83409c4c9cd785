// The sampler's logit processors against the formulas written out by hand (OpenAI's presence and
// frequency penalties, the CTRL / Hugging Face repetition penalty: divide a positive logit,
// multiply a negative one, once per distinct id in the history).
#include "runtime/sampler.h"

#include <gtest/gtest.h>

#include <vector>

namespace g4 {
namespace {

TEST(SamplerPenalties, MatchTheFormulasAndForgetEachCallsHistory) {
  SamplingParams params;  // greedy: the distribution is the processed logits at temperature 1
  params.repetition_penalty = 1.3f;
  params.presence_penalty = 0.5f;
  params.frequency_penalty = 0.25f;
  params.logit_bias = {{6, 0.75f}};
  const std::vector<float> raw = {0.5f, 1.0f, -0.5f, 2.0f, 0.0f, -1.0f, 0.25f, 1.5f};
  std::vector<float> expected = raw;
  expected[3] = 2.0f / 1.3f - (0.5f + 0.25f * 2);   // seen twice, positive
  expected[5] = -1.0f * 1.3f - (0.5f + 0.25f * 1);  // seen once, negative
  expected[6] += 0.75f;
  const std::vector<int> history = {3, 5, 3, 99, -1};  // ids outside the vocabulary are ignored

  Sampler sampler(params, /*softcap=*/0.0f, static_cast<int>(raw.size()));
  for (int call = 0; call < 3; ++call) {  // the counts must not leak from one call to the next
    std::vector<float> logits = raw;
    sampler.Sample(logits.data(), history);
    for (size_t i = 1; i < raw.size(); ++i)
      EXPECT_NEAR(sampler.LogProb(static_cast<int>(i)) - sampler.LogProb(0), expected[i] - expected[0],
                  1e-5)
          << "call " << call << ", id " << i;
  }
  std::vector<float> logits = raw;  // an empty history: only the bias applies
  sampler.Sample(logits.data(), {});
  EXPECT_NEAR(sampler.LogProb(3) - sampler.LogProb(0), raw[3] - raw[0], 1e-5);
  EXPECT_NEAR(sampler.LogProb(6) - sampler.LogProb(0), raw[6] + 0.75f - raw[0], 1e-5);
}

}  // namespace
}  // namespace g4
