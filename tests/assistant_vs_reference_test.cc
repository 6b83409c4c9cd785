// The engine's assistant (MTP) draft step against the independent float64 reference
// (reference/assistant.h) on every tiny preset: a prompt past the sliding window is prefilled into
// each side's own target, then three chained draft steps (the same tokens fed to both) must give
// the same logits and recurrent hidden within the measured float32-vs-float64 noise.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "model/assistant.h"
#include "model/loader.h"
#include "model/random_prompt.h"
#include "model/synth_assistant.h"
#include "reference/assistant.h"
#include "reference/reference.h"
#include "testing/checkpoints.h"
#include "testing/compare.h"

namespace g4 {
namespace {

double MaxDiff(const std::vector<float>& a, const std::vector<double>& b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::fabs(a[i] - b[i]));
  return m;
}

// The synthetic assistant of `preset`, edited by `edit` when given (testing/checkpoints.h).
void CompareDraftStepsWithTheReference(const std::string& preset, const TensorEdit& edit) {
  const SynthOptions options{.vocab = 512};
  const std::string target_dir = TinyCheckpoint(preset, options);
  auto spec = SynthAssistantPreset(preset + "-assistant", "tiny");
  ASSERT_TRUE(spec.ok());
  const std::string written = TestTempDir(preset + "-assistant");
  ASSERT_TRUE(WriteSynthAssistant(*spec, options, written).ok());
  const std::string dir = edit ? TestTempDir(preset + "-assistant-edited") : written;
  if (edit) {
    ASSERT_TRUE(CopyCheckpoint(written, dir, edit).ok());
  }

  auto model = LoadModel(target_dir, {.threads = 2});
  ASSERT_TRUE(model.ok()) << model.status().message();
  Model& target = **model;
  auto assistant = Assistant::Load(dir, target);
  ASSERT_TRUE(assistant.ok()) << assistant.status().message();
  auto ref_target = reference::ReferenceModel::Load(target_dir, {.threads = 2});
  ASSERT_TRUE(ref_target.ok()) << ref_target.status().message();
  auto ref = reference::ReferenceAssistant::Load(dir, **ref_target);
  ASSERT_TRUE(ref.ok()) << ref.status().message();
  const AssistantPlan& ap = (*assistant)->plan();
  for (size_t l = 0; l < ap.layers.size(); ++l)
    EXPECT_EQ(ap.layers[l].kv_source, (*ref)->source_layers()[l]) << l;

  int window = 0;
  for (const LayerPlan& l : target.plan().layers) window = std::max(window, l.window);
  const std::vector<int> prompt = RandomPromptIds(2 * window + 3, target.plan().vocab, 11);
  const int p = static_cast<int>(prompt.size());

  // Engine target: prefill; its last row's final-normed hidden feeds the assistant.
  KvCache cache(target.plan(), 64, p);
  std::vector<BatchRow> rows;
  for (int i = 0; i < p; ++i) rows.push_back({prompt[i], i, &cache, i + 1 == p});
  Activations act;
  std::vector<float> tl(target.plan().vocab);
  ASSERT_TRUE(target.Forward(rows, act, tl.data()).ok());
  std::vector<float> h(act.logits_in.begin(), act.logits_in.begin() + target.plan().hidden);
  int token = static_cast<int>(std::max_element(tl.begin(), tl.end()) - tl.begin());

  // Reference target: its own K/V and hidden, captured through its hooks.
  reference::TargetState state;
  const reference::ReferenceHooks hooks = state.Capture();
  auto ref64 = (*ref_target)->Logits<double>(prompt, &hooks);
  auto ref32 = (*ref_target)->Logits<float>(prompt);
  ASSERT_TRUE(ref64.ok() && ref32.ok());
  const double target_floor = MaxAbsDiff(*ref32, *ref64);
  std::vector<double> rh = state.hidden.at(p - 1), rh32 = rh;

  double worst = 0, worst_h = 0, floor = target_floor;
  std::vector<float> logits(ap.vocab), h_next(ap.backbone_hidden);
  for (int step = 0; step < 3; ++step) {
    ASSERT_TRUE((*assistant)->Step(cache, token, p, h.data(), logits.data(), h_next.data()).ok());
    std::vector<double> rh_next, rh32_next;
    auto r64 = (*ref)->Step<double>(state, token, p, rh, &rh_next);
    auto r32 = (*ref)->Step<float>(state, token, p, rh32, &rh32_next);
    ASSERT_TRUE(r64.ok() && r32.ok()) << r64.status().message();
    floor = std::max(floor, MaxAbsDiff(std::vector<std::vector<double>>{*r32},
                                       std::vector<std::vector<double>>{*r64}));
    worst = std::max(worst, MaxDiff(logits, *r64));
    worst_h = std::max(worst_h, MaxDiff(h_next, rh_next));
    // The same next token on both sides (the argmax of the engine's step), and each side's own
    // recurrent hidden.
    token = static_cast<int>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    EXPECT_EQ(token, std::max_element(r64->begin(), r64->end()) - r64->begin()) << step;
    h = h_next;
    rh = rh_next;
    rh32 = rh32_next;
  }
  const double tol = std::max(2e-3, 5 * floor);
  std::printf("[%s-assistant%s] prompt %d (window %d): noise floor %.2e, engine vs float64 logits "
              "%.2e, h_next %.2e (tol %.1e)\n",
              preset.c_str(), edit ? ", edited" : "", p, window, floor, worst, worst_h, tol);
  EXPECT_LT(worst, tol);
  EXPECT_LT(worst_h, tol);
}

class AssistantVsReference : public ::testing::TestWithParam<std::string> {};

TEST_P(AssistantVsReference, DraftStepsMatchTheFloat64Reference) {
  CompareDraftStepsWithTheReference(GetParam(), nullptr);
}

// Centroids 1, 2 and 3 made equal: the top 2 of 4 clusters ({0, 1} or {1, 2}) cut through a
// three-way tie, which both sides must break by the lower cluster index.
TEST(AssistantVsReferenceTies, TiedCentroidsPickTheLowerClusters) {
  CompareDraftStepsWithTheReference("e2b", [](const std::string& name, std::vector<float>& v) {
    if (name != "masked_embedding.centroids.weight") return false;
    const size_t cols = v.size() / 4;  // 512 ids in 4 clusters of 128, top 2
    std::copy_n(v.begin() + cols, cols, v.begin() + 2 * cols);
    std::copy_n(v.begin() + cols, cols, v.begin() + 3 * cols);
    return true;
  });
}

INSTANTIATE_TEST_SUITE_P(Presets, AssistantVsReference, ::testing::Values("e2b", "e4b", "12b"));

}  // namespace
}  // namespace g4
