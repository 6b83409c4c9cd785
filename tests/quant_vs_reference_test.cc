// Every weight format against the float64 reference on the tiny presets: teacher-forced top-1
// agreement and mean KL(reference || engine) of the softcapped next-token distributions.
// The bounds are the documented quality contract of --quant (docs/models.md, measured quality).
// Tiny random models are far more sensitive than trained ones: a q8 round trip of the weights
// alone (fp32 activations) already costs KL ~1e-2 on tiny E2B, so the bounds here are set from
// measurement with ~2x margin; they catch a broken kernel or layout (KL ~ log(vocab)), not drift.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "model/forward.h"
#include "model/loader.h"
#include "model/random_prompt.h"
#include "reference/reference.h"
#include "runtime/generate.h"
#include "runtime/sampler.h"
#include "testing/checkpoints.h"

namespace g4 {
namespace {

struct Agreement {
  double top1 = 0;     // fraction of positions with the same argmax
  double mean_kl = 0;  // nats
};

// Distribution of softcapped logits, in double.
std::vector<double> LogSoftmax(const float* logits, int n) {
  double m = -INFINITY;
  for (int i = 0; i < n; ++i) m = std::max(m, static_cast<double>(logits[i]));
  double s = 0;
  for (int i = 0; i < n; ++i) s += std::exp(logits[i] - m);
  std::vector<double> out(n);
  const double lse = m + std::log(s);
  for (int i = 0; i < n; ++i) out[i] = logits[i] - lse;
  return out;
}

Agreement Compare(const std::vector<std::vector<double>>& ref, const std::vector<float>& engine, int vocab) {
  Agreement a;
  for (size_t r = 0; r < ref.size(); ++r) {
    std::vector<float> rf(ref[r].begin(), ref[r].end());
    const auto lp = LogSoftmax(rf.data(), vocab);
    const auto lq = LogSoftmax(engine.data() + r * vocab, vocab);
    double kl = 0;
    for (int i = 0; i < vocab; ++i) kl += std::exp(lp[i]) * (lp[i] - lq[i]);
    a.mean_kl += kl;
    const auto ref_top = std::max_element(ref[r].begin(), ref[r].end()) - ref[r].begin();
    const auto eng_top = std::max_element(engine.begin() + r * vocab, engine.begin() + (r + 1) * vocab) -
                         (engine.begin() + r * vocab);
    a.top1 += ref_top == eng_top;
  }
  a.top1 /= ref.size();
  a.mean_kl /= ref.size();
  return a;
}

struct Bounds {
  const char* quant;
  double min_top1;
  double max_kl;
};

class QuantVsReference : public ::testing::TestWithParam<std::string> {};

TEST_P(QuantVsReference, TopOneAgreementAndKl) {
  const std::string dir = TinyCheckpoint(GetParam());
  ASSERT_FALSE(dir.empty());
  auto ref = reference::ReferenceModel::Load(dir);
  ASSERT_TRUE(ref.ok()) << ref.status().message();
  const int vocab = (*ref)->config().vocab;
  const std::vector<int> ids = RandomPromptIds(48, vocab, 11);
  auto ref64 = (*ref)->Logits<double>(ids);
  ASSERT_TRUE(ref64.ok()) << ref64.status().message();

  std::vector<double> kls;
  for (const Bounds& b : {Bounds{"bf16", 1.0, 1e-6}, Bounds{"q8", 0.65, 0.12}, Bounds{"q4", 0.05, 3.0}}) {
    ModelOptions options;
    options.threads = 2;
    ASSERT_TRUE(ParseWeightType(b.quant, &options.load.quant));
    auto model = LoadModel(dir, options);
    ASSERT_TRUE(model.ok()) << model.status().message();
    KvCache cache((*model)->plan(), static_cast<int>(ids.size()), 16);
    Activations act;
    auto logits = Prefill(**model, cache, ids, 16, /*all_rows=*/true, act);
    ASSERT_TRUE(logits.ok()) << logits.status().message();
    ApplySoftcapInPlace(logits->data(), static_cast<int>(logits->size()), static_cast<float>((*model)->plan().softcap));
    const Agreement a = Compare(*ref64, *logits, vocab);
    std::printf("[%s %s] %zu positions: top-1 agreement %.3f, mean KL %.2e nats (bounds >= %.2f, <= %.0e)\n",
                GetParam().c_str(), b.quant, ids.size(), a.top1, a.mean_kl, b.min_top1, b.max_kl);
    EXPECT_GE(a.top1, b.min_top1) << b.quant;
    EXPECT_LE(a.mean_kl, b.max_kl) << b.quant;
    kls.push_back(a.mean_kl);
  }
  // More bits, closer to the reference.
  EXPECT_LT(kls[0], kls[1]);
  EXPECT_LT(kls[1], kls[2]);
}

INSTANTIATE_TEST_SUITE_P(Presets, QuantVsReference, ::testing::Values("e2b", "e4b", "12b"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace g4
