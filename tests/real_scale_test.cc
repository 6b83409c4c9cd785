// The engine against the float64 reference at the shapes only real models have: head dims 256
// (sliding) and 512 (full), sliding windows of 512 and 1024, E2B's 4:1 pattern with KV sharing and
// PLE, the 12B's K=V global layer, a real-width (hidden 1536) stack, f16 and f32 checkpoints.
// Hidden sizes and layer counts are small so the float64 reference runs in seconds.
//
// Each case: a prompt 2-3 windows long, prefilled in chunks that straddle the window boundaries,
// then greedy decoding on 2 threads, so each decode row's attention over > 1000 visible keys on
// the full layers is split into position chunks while the sliding rings wrap. The engine's logits
// for every prompt row and every decode step are compared with the reference's teacher-forced
// logits over the same tokens, against the float32 noise floor (the reference in float vs double
// on the same tokens); each greedy token must be the reference's argmax wherever the reference's
// top-1/top-2 gap is above the measured error.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "model/forward.h"
#include "model/loader.h"
#include "model/random_prompt.h"
#include "model/synth.h"
#include "reference/reference.h"
#include "runtime/generate.h"
#include "runtime/sampler.h"
#include "testing/checkpoints.h"
#include "testing/compare.h"

namespace g4 {
namespace {

struct RealScaleCase {
  const char* name;
  SynthSpec spec;
  DType dtype = DType::kBF16;
  int prompt = 0;  // tokens
  int chunk = 0;   // prefill rows per call
  int decode = 0;  // greedy steps
};

constexpr int kVocab = 512;

SynthSpec E2BLike() {
  // E2B's real attention shapes: 4 sliding (head 256, window 512) + 1 full (head 512), MQA; the
  // last two layers read the K/V of layers 3 (sliding) and 4 (full); PLE; double-wide shared MLPs.
  SynthSpec s;
  s.preset = "e2b";
  s.scale = "tiny";
  s.hidden = 64;
  s.intermediate = 128;
  s.layers = 7;
  s.heads = 2;
  s.kv_heads = 1;
  s.head_dim = 256;
  s.global_head_dim = 512;
  s.double_wide = true;
  s.window = 512;
  s.kv_shared = 2;
  s.ple_dim = 16;
  s.max_position = 131072;
  s.layer_types = {"sliding_attention", "sliding_attention", "sliding_attention", "sliding_attention",
                   "full_attention",    "sliding_attention", "full_attention"};
  return s;
}

SynthSpec B12Like() {
  // The 12B's: window 1024, 2 query heads per KV head on sliding layers, one global KV head with
  // K=V (no v_proj) on the full layer, no PLE, no sharing. Two sliding layers before the full one
  // (the real 5:1 pattern is E2B's 4:1 above, in kind): the reference's cost is per layer.
  SynthSpec s;
  s.preset = "12b";
  s.scale = "tiny";
  s.unified = true;
  s.hidden = 64;
  s.intermediate = 128;
  s.layers = 3;
  s.heads = 4;
  s.kv_heads = 2;
  s.head_dim = 256;
  s.global_head_dim = 512;
  s.global_kv_heads = 1;
  s.k_eq_v = true;
  s.window = 1024;
  s.max_position = 262144;
  s.layer_types = {"sliding_attention", "sliding_attention", "full_attention"};
  return s;
}

SynthSpec RealWidth() {
  // E2B's real hidden width (1536, 8 query heads of 256 / 512) in a 2-layer stack; window 64 so a
  // short prompt still crosses it (the reference's cost grows with width x tokens).
  SynthSpec s = E2BLike();
  s.hidden = 1536;
  s.intermediate = 1536;
  s.layers = 2;
  s.heads = 8;
  s.window = 64;
  s.kv_shared = 0;
  s.double_wide = false;
  s.ple_dim = 32;
  s.layer_types = {"sliding_attention", "full_attention"};
  return s;
}

std::vector<RealScaleCase> Cases() {
  return {
      {"e2b_shapes_bf16", E2BLike(), DType::kBF16, 1100, 200, 8},
      {"e2b_shapes_f16", E2BLike(), DType::kF16, 600, 64, 4},
      {"e2b_shapes_f32", E2BLike(), DType::kF32, 600, 64, 4},
      {"12b_shapes_bf16", B12Like(), DType::kBF16, 2080, 384, 4},
      {"hidden_1536", RealWidth(), DType::kBF16, 150, 48, 6},
  };
}

class RealScale : public ::testing::TestWithParam<RealScaleCase> {};

TEST_P(RealScale, PrefillAndSplitDecodeMatchTheReference) {
  const RealScaleCase& c = GetParam();
  const std::string dir = TestTempDir(c.name);
  SynthOptions options{.seed = 3, .vocab = kVocab, .dtype = c.dtype, .tokenizer = TestTokenizerPath()};
  ASSERT_TRUE(WriteSynthCheckpoint(c.spec, options, dir).ok());
  auto model = LoadModel(dir, ModelOptions{.threads = 2});
  ASSERT_TRUE(model.ok()) << model.status().message();
  auto ref = reference::ReferenceModel::Load(dir, {.threads = 2});
  ASSERT_TRUE(ref.ok()) << ref.status().message();
  const ModelPlan& plan = (*model)->plan();

  // Engine: chunked prefill (every row's logits), then greedy decode one row at a time.
  std::vector<int> seq = RandomPromptIds(c.prompt, kVocab, 17);
  KvCache cache(plan, c.prompt + c.decode, c.chunk);
  Activations act;
  auto prefill = Prefill(**model, cache, seq, c.chunk, /*all_rows=*/true, act);
  ASSERT_TRUE(prefill.ok()) << prefill.status().message();
  std::vector<std::vector<float>> engine;
  for (int r = 0; r < c.prompt; ++r) engine.emplace_back(prefill->begin() + r * kVocab, prefill->begin() + (r + 1) * kVocab);
  std::vector<float> row(kVocab);
  for (int step = 0; step < c.decode; ++step) {
    const std::vector<float>& last = engine.back();
    seq.push_back(static_cast<int>(std::max_element(last.begin(), last.end()) - last.begin()));
    if (step + 1 == c.decode) break;  // the last token's logits are not needed
    ASSERT_TRUE((*model)->Forward({BatchRow{seq.back(), cache.n_past(), &cache, true}}, act, row.data()).ok());
    engine.push_back(row);
  }
  for (auto& r : engine) ApplySoftcapInPlace(r.data(), kVocab, static_cast<float>(plan.softcap));

  // Reference: teacher-forced over the same tokens (the last generated one is only predicted).
  const std::vector<int> scored(seq.begin(), seq.end() - 1);
  auto ref64 = (*ref)->Logits<double>(scored, nullptr, 256);
  auto ref32 = (*ref)->Logits<float>(scored, nullptr, 256);
  ASSERT_TRUE(ref64.ok() && ref32.ok());
  const double floor = MaxAbsDiff(*ref32, *ref64);
  const double diff = MaxAbsDiff(engine, *ref64);
  int window_max = 0, kv_capacity_min = 1 << 30;
  for (const auto& l : plan.layers) window_max = std::max(window_max, l.window);
  for (int s = 0; s < static_cast<int>(plan.layers.size()); ++s)
    if (plan.layers[s].window > 0) kv_capacity_min = std::min(kv_capacity_min, plan.layers[s].window + c.chunk - 1);
  std::printf("[%s] prompt %d (window %d, chunk %d) + %d decode steps: noise floor %.2e, engine vs float64 %.2e\n",
              c.name, c.prompt, window_max, c.chunk, c.decode, floor, diff);
  ASSERT_GT(static_cast<int>(seq.size()), kv_capacity_min) << "the sliding ring must wrap";
  EXPECT_LT(diff, std::max(2e-3, 5 * floor)) << c.name;

  // Greedy: the engine's tokens are the reference's argmax wherever its top-2 gap is decisive.
  const double margin = 8 * std::max(floor, diff);
  for (int step = 0; step < c.decode; ++step) {
    const std::vector<double>& r = (*ref64)[c.prompt - 1 + step];
    std::vector<double> sorted = r;
    std::partial_sort(sorted.begin(), sorted.begin() + 2, sorted.end(), std::greater<double>());
    if (sorted[0] - sorted[1] <= margin) continue;
    EXPECT_EQ(seq[c.prompt + step], std::max_element(r.begin(), r.end()) - r.begin()) << c.name << " step " << step;
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, RealScale, ::testing::ValuesIn(Cases()),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace g4
