// g4 synth output: real layout, loadable, deterministic; shards and config forms are the same
// model; each tiny preset is well-conditioned (float32-vs-float64 noise floor) and decisive
// (greedy top-1/top-2 gaps well above that floor), as the engine-vs-reference tests assume.
#include "model/synth.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>

#include "io/safetensors.h"
#include "model/arch/gemma4.h"
#include "model/architecture.h"
#include "reference/reference.h"
#include "testing/checkpoints.h"
#include "testing/compare.h"

namespace g4 {
namespace {

TEST(Synth, FullPresetsHaveTheRealParameterCounts) {
  // Spec §7: total text parameters (stored), shared layers' K/V included.
  const std::pair<const char*, int64_t> expected[] = {
      {"e2b", 4647449891LL}, {"e4b", 7518069034LL}, {"12b", 11907350320LL}};
  for (const auto& [preset, count] : expected) {
    auto spec = SynthPreset(preset, "full");
    ASSERT_TRUE(spec.ok());
    int64_t total = 0;
    for (const SynthTensor& t : SynthTensors(*spec, SynthOptions{}))
      if (t.name.rfind("model.language_model.", 0) == 0) total += t.numel();
    EXPECT_EQ(total, count) << preset;
  }
}

TEST(Synth, TinyPresetsLoadThroughTensorStoreWithTheRealLayout) {
  for (const char* preset : {"e2b", "e4b", "12b"}) {
    SCOPED_TRACE(preset);
    const std::string dir = TinyCheckpoint(preset, {.vocab = 512});
    auto store = TensorStore::OpenDir(dir);
    ASSERT_TRUE(store.ok()) << store.status().message();
    auto cfg = LoadModelConfig(dir);
    ASSERT_TRUE(cfg.ok()) << cfg.status().message();
    auto plan = PlanFromConfig(*cfg);
    ASSERT_TRUE(plan.ok()) << plan.status().message();
    EXPECT_EQ(cfg->eos_token_ids, (std::vector<int>{1, 106, 50}));
    const std::string p = "model.language_model.";
    EXPECT_EQ((*store)->Find("lm_head.weight"), nullptr);  // tied
    EXPECT_NE((*store)->Find("model.vision_tower.patch_embedder.input_proj.weight"), nullptr);
    EXPECT_NE((*store)->Find("model.audio_tower.layers.0.self_attn.q_proj.linear.weight"), nullptr);
    int full = 0, shared = 0;
    for (const LayerPlan& l : plan->layers) {
      const std::string lp = p + "layers." + std::to_string(l.index) + ".";
      const TensorView* s = (*store)->Find(lp + "layer_scalar");
      ASSERT_NE(s, nullptr);
      EXPECT_EQ(s->dtype, DType::kBF16);
      EXPECT_EQ(s->shape, std::vector<int64_t>{1});
      EXPECT_GE(s->ValueAt(0), 0.39);
      EXPECT_LE(s->ValueAt(0), 0.91);
      // Shared layers keep their (unused) K tensors; K=V layers have no v_proj.
      EXPECT_NE((*store)->Find(lp + "self_attn.k_proj.weight"), nullptr);
      EXPECT_NE((*store)->Find(lp + "self_attn.k_norm.weight"), nullptr);
      EXPECT_EQ((*store)->Find(lp + "self_attn.v_proj.weight") == nullptr, l.k_eq_v);
      const TensorView* up = (*store)->Find(lp + "mlp.up_proj.weight");
      ASSERT_NE(up, nullptr);
      EXPECT_EQ(up->shape[0], l.mlp_width);
      full += !l.is_sliding();
      shared += !l.owns_kv();
      if (l.window) {
        EXPECT_LE(l.window, 16);
      }
    }
    EXPECT_GE(full, 2);
    if (std::string(preset) != "12b") {
      EXPECT_GE(shared, 4);
      EXPECT_GE(plan->ple_dim, 8);
      EXPECT_NE((*store)->Find(p + "embed_tokens_per_layer.weight"), nullptr);
    } else {
      EXPECT_EQ(shared, 0);
      EXPECT_EQ(cfg->suppress_tokens, std::vector<int>{});  // cut off by --vocab 512
    }
  }
}

TEST(Synth, SameSeedSameBytesOtherSeedOtherBytes) {
  auto spec = SynthPreset("e2b", "tiny");
  ASSERT_TRUE(spec.ok());
  const auto tensors = SynthTensors(*spec, SynthOptions{});
  for (const auto& t : tensors) {
    EXPECT_EQ(SynthValue(t, 1, 5), SynthValue(t, 1, 5));
    if (t.numel() > 1) {
      EXPECT_NE(SynthValue(t, 1, 5), SynthValue(t, 2, 5)) << t.name;
    }
  }
}

// Flat single file, a 2-shard copy and the per_layer_config form are one model.
TEST(Synth, ShardsAndPerLayerConfigGiveIdenticalReferenceLogits) {
  for (const char* preset : {"e2b", "e4b", "12b"}) {
    SCOPED_TRACE(preset);
    // A 4,096-token vocabulary keeps this fast; the layout under test does not depend on it.
    SynthOptions flat, sharded, per_layer;
    flat.vocab = sharded.vocab = per_layer.vocab = 4096;
    sharded.shards = 2;
    per_layer.config_form = SynthConfigForm::kPerLayer;
    const auto ids = LcgPrompt(20, 4096, 11);
    std::vector<std::vector<double>> first;
    for (const SynthOptions& o : {flat, sharded, per_layer}) {
      const std::string dir = TinyCheckpoint(preset, o);
      if (o.shards == 2) {
        auto store = TensorStore::OpenDir(dir);
        ASSERT_TRUE(store.ok());
        EXPECT_EQ((*store)->files().size(), 2u);
      }
      auto model = reference::ReferenceModel::Load(dir);
      ASSERT_TRUE(model.ok()) << model.status().message();
      auto logits = (*model)->Logits<double>(ids);
      ASSERT_TRUE(logits.ok()) << logits.status().message();
      if (first.empty()) {
        first = *logits;
      } else {
        EXPECT_EQ(MaxAbsDiff(first, *logits), 0.0);
      }
    }
  }
}

// The numbers every engine-vs-reference test leans on, with the real vocabulary. Printed for the
// record: a float32 engine must be allowed a few times the noise floor, and greedy tokens are
// comparable only because every top-1/top-2 gap is far above it.
class SynthConditioning : public ::testing::TestWithParam<const char*> {};

TEST_P(SynthConditioning, TinyPresetIsWellConditionedAndDecisive) {
  const char* preset = GetParam();
  const std::string dir = TinyCheckpoint(preset);
  auto model = reference::ReferenceModel::Load(dir);
  ASSERT_TRUE(model.ok()) << model.status().message();
  const auto ids = LcgPrompt(40, 262144, 11);
  auto f64 = (*model)->Logits<double>(ids);
  auto f32 = (*model)->Logits<float>(ids);
  ASSERT_TRUE(f64.ok() && f32.ok());
  const double floor = MaxAbsDiff(*f64, *f32);
  double sd = 0, mean = 0;
  for (double v : f64->back()) mean += v / f64->back().size();
  for (double v : f64->back()) sd += (v - mean) * (v - mean) / f64->back().size();
  sd = std::sqrt(sd);

  // Greedy from a prompt longer than every window.
  int window = 0;
  for (const auto& l : (*model)->layers()) window = std::max(window, l.window);
  const auto prompt = LcgPrompt(window + 4, 262144, 23);
  auto trace = (*model)->GreedyTrace(prompt, 32);
  ASSERT_TRUE(trace.ok());
  double min_gap = 1e9;
  for (const auto& s : *trace) min_gap = std::min(min_gap, s.top1 - s.top2);
  std::printf(
      "[synth %s] noise floor f32-vs-f64 %.3g (40 tokens), logit sd %.2f, "
      "min greedy gap %.3g over 32 tokens (prompt %zu > window %d)\n",
      preset, floor, sd, min_gap, prompt.size(), window);
  EXPECT_LT(floor, 2e-4);
  EXPECT_GT(min_gap, 20 * floor);
  EXPECT_GT(min_gap, 5e-3);
}

INSTANTIATE_TEST_SUITE_P(Tiny, SynthConditioning, ::testing::Values("e2b", "e4b", "12b"));

}  // namespace
}  // namespace g4
