// The fast engine against the independent float64 reference, on every tiny preset: teacher-forced
// logits, greedy generation past the sliding window, prefill chunking vs decode, sharded and
// per_layer_config copies, batching, and the pitfalls that must show (layer_scalar).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "model/forward.h"
#include "model/loader.h"
#include "model/random_prompt.h"
#include "reference/reference.h"
#include "runtime/generate.h"
#include "runtime/sampler.h"
#include "io/safetensors.h"
#include <unistd.h>
#include <cstdio>
#include <functional>
#include "testing/checkpoints.h"
#include "testing/compare.h"

namespace g4 {
namespace {

std::vector<std::vector<float>> EngineLogits(Model& model, const std::vector<int>& ids, int chunk) {
  KvCache cache(model.plan(), static_cast<int>(ids.size()), std::max(chunk, 1));
  Activations act;
  auto flat = Prefill(model, cache, ids, chunk, /*all_rows=*/true, act);
  EXPECT_TRUE(flat.ok()) << flat.status().message();
  const int V = model.plan().vocab;
  std::vector<std::vector<float>> out;
  if (!flat.ok()) return out;
  ApplySoftcapInPlace(flat->data(), static_cast<int>(flat->size()), static_cast<float>(model.plan().softcap));
  for (size_t r = 0; r < ids.size(); ++r) out.emplace_back(flat->begin() + r * V, flat->begin() + (r + 1) * V);
  return out;
}

class EngineVsReference : public ::testing::TestWithParam<std::string> {};

TEST_P(EngineVsReference, TeacherForcedLogitsAndGreedyTokens) {
  const std::string dir = TinyCheckpoint(GetParam());
  ASSERT_FALSE(dir.empty());
  auto ref = reference::ReferenceModel::Load(dir);
  ASSERT_TRUE(ref.ok()) << ref.status().message();
  auto model = LoadModel(dir);
  ASSERT_TRUE(model.ok()) << model.status().message();
  const ModelPlan& plan = (*model)->plan();
  int window = 0;
  for (const auto& l : plan.layers) window = std::max(window, l.window);
  const std::vector<int> prompt = RandomPromptIds(3 * window + 5, plan.vocab, 7);

  // Noise floor of this checkpoint: the reference in float vs in double.
  auto ref64 = (*ref)->Logits<double>(prompt);
  auto ref32 = (*ref)->Logits<float>(prompt);
  ASSERT_TRUE(ref64.ok() && ref32.ok());
  const double floor = MaxAbsDiff(*ref32, *ref64);
  const double tol = std::max(2e-3, 5 * floor);
  auto engine = EngineLogits(**model, prompt, 16);
  const double diff = MaxAbsDiff(engine, *ref64);
  std::printf("[%s] prompt %zu tokens, window %d: noise floor %.2e, engine vs float64 %.2e (tol %.1e)\n",
              GetParam().c_str(), prompt.size(), window, floor, diff, tol);
  EXPECT_LT(diff, tol);

  // Greedy generation: 32 tokens equal the reference token for token. Comparing argmaxes is only
  // meaningful where the reference's top-1/top-2 gap is far above the measured float error, so
  // the test takes the first prompt (deterministic seeds) whose 32-step trace is decisive.
  const int n_new = 32;
  const double margin = 8 * std::max(floor, diff);
  std::vector<int> expected, greedy_prompt;
  for (uint32_t seed = 100; seed < 110 && expected.empty(); ++seed) {
    const std::vector<int> p = RandomPromptIds(2 * window + 3, plan.vocab, seed);
    auto trace = (*ref)->GreedyTrace(p, n_new);
    ASSERT_TRUE(trace.ok()) << trace.status().message();
    double min_gap = 1e9;
    for (const auto& s : *trace) min_gap = std::min(min_gap, s.top1 - s.top2);
    std::printf("[%s] greedy trace seed %u: min top-1/top-2 gap %.2e (margin %.2e)\n", GetParam().c_str(),
                seed, min_gap, margin);
    if (min_gap <= margin) continue;
    for (const auto& s : *trace) expected.push_back(s.token);
    greedy_prompt = p;
  }
  ASSERT_EQ(expected.size(), static_cast<size_t>(n_new)) << "no decisive prompt among 10 seeds";
  KvCache cache(plan, static_cast<int>(greedy_prompt.size()) + n_new, 16);
  GenerateOptions options;
  options.max_new_tokens = n_new;
  options.ignore_eos = true;
  options.prefill_chunk = 16;
  auto result = Generate(**model, cache, greedy_prompt, options);
  ASSERT_TRUE(result.ok()) << result.status().message();
  EXPECT_EQ(result->tokens, expected);
}

TEST_P(EngineVsReference, BlockedAttentionOverManyKeyBlocksMatchesReference) {
  // A prompt three windows long prefilled in one call, with attention tiles far smaller than
  // the prompt: every row's keys span many key blocks (running max and sum across blocks) and the
  // rows go in many query blocks, on full and sliding (wrapped ring) layers alike.
  const std::string dir = TinyCheckpoint(GetParam());
  ASSERT_FALSE(dir.empty());
  auto ref = reference::ReferenceModel::Load(dir);
  ASSERT_TRUE(ref.ok()) << ref.status().message();
  auto model = LoadModel(dir);
  ASSERT_TRUE(model.ok()) << model.status().message();
  int window = 0;
  for (const auto& l : (*model)->plan().layers) window = std::max(window, l.window);
  const std::vector<int> prompt = RandomPromptIds(3 * window + 9, (*model)->plan().vocab, 5);
  auto ref64 = (*ref)->Logits<double>(prompt);
  ASSERT_TRUE(ref64.ok());
  // The floor of TeacherForcedLogitsAndGreedyTokens' tolerance (its measured float noise is
  // below it on every preset); the float reference is not rerun here to keep the test short.
  const double tol = 2e-3;
  const int whole = static_cast<int>(prompt.size());
  for (AttentionTiles tiles : {AttentionTiles{4, 5}, AttentionTiles{32, window / 2}}) {
    (*model)->set_attention_tiles(tiles);
    const double diff = MaxAbsDiff(EngineLogits(**model, prompt, whole), *ref64);
    std::printf("[%s] %d tokens in one chunk, tiles %dx%d: engine vs float64 %.2e (tol %.1e)\n",
                GetParam().c_str(), whole, tiles.query_rows, tiles.keys, diff, tol);
    EXPECT_LT(diff, tol) << "tiles " << tiles.query_rows << "x" << tiles.keys;
  }
  (*model)->set_attention_tiles({});
}

TEST_P(EngineVsReference, PrefillChunksEqualTokenByTokenDecode) {
  // Bit for bit: a row's logits must not depend on how many rows its pass had (the prefill chunk,
  // a speculative verify, one decode row), or greedy speculative decoding could leave the plain
  // ids at depth. Key chunks of 8 positions put many chunk edges inside the prompt, so the
  // attention's merge order is exercised on every row.
  const std::string dir = TinyCheckpoint(GetParam(), {.vocab = 512});
  auto model = LoadModel(dir);
  ASSERT_TRUE(model.ok()) << model.status().message();
  int window = 0;
  for (const auto& l : (*model)->plan().layers) window = std::max(window, l.window);
  const std::vector<int> prompt = RandomPromptIds(3 * window + 7, 512, 11);
  for (AttentionTiles tiles : {AttentionTiles{}, AttentionTiles{0, 8}}) {
    (*model)->set_attention_tiles(tiles);
    const auto whole = EngineLogits(**model, prompt, static_cast<int>(prompt.size()));
    for (int chunk : {1, 3, window - 1, window, window + 1}) {
      const auto chunked = EngineLogits(**model, prompt, chunk);
      EXPECT_EQ(MaxAbsDiff(chunked, whole), 0.0) << "chunk " << chunk << " keys " << tiles.keys;
    }
  }
  (*model)->set_attention_tiles({});
}

TEST_P(EngineVsReference, ShardedAndPerLayerConfigCopiesAgree) {
  const std::string base = TinyCheckpoint(GetParam(), {.vocab = 512});
  const std::string sharded = TinyCheckpoint(GetParam(), {.vocab = 512, .shards = 2});
  const std::string per_layer =
      TinyCheckpoint(GetParam(), {.vocab = 512, .config_form = SynthConfigForm::kPerLayer});
  const std::vector<int> prompt = RandomPromptIds(40, 512, 3);
  auto a = LoadModel(base), b = LoadModel(sharded), c = LoadModel(per_layer);
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  const auto la = EngineLogits(**a, prompt, 8);
  EXPECT_EQ(MaxAbsDiff(la, EngineLogits(**b, prompt, 8)), 0.0);
  EXPECT_EQ(MaxAbsDiff(la, EngineLogits(**c, prompt, 8)), 0.0);
  auto ref = reference::ReferenceModel::Load(per_layer);
  ASSERT_TRUE(ref.ok());
  auto r = (*ref)->Logits<double>(prompt);
  ASSERT_TRUE(r.ok());
  EXPECT_LT(MaxAbsDiff(la, *r), 2e-3);
}

TEST_P(EngineVsReference, BatchedRowsOfTwoSequencesEqualSeparateRuns) {
  const std::string dir = TinyCheckpoint(GetParam(), {.vocab = 512});
  auto model = LoadModel(dir);
  ASSERT_TRUE(model.ok());
  const ModelPlan& plan = (*model)->plan();
  const std::vector<int> p1 = RandomPromptIds(30, 512, 21), p2 = RandomPromptIds(19, 512, 22);
  const auto alone1 = EngineLogits(**model, p1, 8), alone2 = EngineLogits(**model, p2, 8);
  // Interleave: each step sends up to 4 rows of each sequence in one Forward call.
  KvCache c1(plan, 64, 8), c2(plan, 64, 8);
  Activations act;
  std::vector<std::vector<float>> got1, got2;
  size_t i1 = 0, i2 = 0;
  while (i1 < p1.size() || i2 < p2.size()) {
    std::vector<BatchRow> rows;
    std::vector<int> owner;
    for (int k = 0; k < 4 && i1 < p1.size(); ++k, ++i1) {
      rows.push_back({p1[i1], static_cast<int64_t>(i1), &c1, true});
      owner.push_back(1);
    }
    for (int k = 0; k < 3 && i2 < p2.size(); ++k, ++i2) {
      rows.push_back({p2[i2], static_cast<int64_t>(i2), &c2, true});
      owner.push_back(2);
    }
    std::vector<float> logits(rows.size() * plan.vocab);
    ASSERT_TRUE((*model)->Forward(rows, act, logits.data()).ok());
    ApplySoftcapInPlace(logits.data(), static_cast<int>(logits.size()), static_cast<float>(plan.softcap));
    for (size_t r = 0; r < rows.size(); ++r)
      (owner[r] == 1 ? got1 : got2).emplace_back(logits.begin() + r * plan.vocab, logits.begin() + (r + 1) * plan.vocab);
  }
  EXPECT_LT(MaxAbsDiff(got1, alone1), 1e-5);
  EXPECT_LT(MaxAbsDiff(got2, alone2), 1e-5);
}

TEST_P(EngineVsReference, LayerScalarMatters) {
  const std::string dir = TinyCheckpoint(GetParam(), {.vocab = 512});
  auto model = LoadModel(dir);
  ASSERT_TRUE(model.ok());
  const std::vector<int> prompt = RandomPromptIds(12, 512, 5);
  const auto with = EngineLogits(**model, prompt, 4);
  (*model)->set_skip_layer_scalar(true);
  const auto without = EngineLogits(**model, prompt, 4);
  EXPECT_GT(MaxAbsDiff(with, without), 0.5);
}

INSTANTIATE_TEST_SUITE_P(Presets, EngineVsReference, ::testing::Values("e2b", "e4b", "12b"));

// Broken checkpoints: a precise error naming the tensor and expected vs found, never a crash.
TEST(EngineLoad, BrokenCheckpointsGiveNamedErrors) {
  const std::string dir = TinyCheckpoint("e2b", {.vocab = 512});
  const std::string scalar = "model.language_model.layers.3.layer_scalar";
  const std::string q = "model.language_model.layers.2.self_attn.q_proj.weight";
  {
    const std::string d = TestTempDir("no_layer_scalar");
    ASSERT_TRUE(RewriteCheckpoint(dir, d, [&](TensorToWrite& t) { return t.name != scalar; }).ok());
    auto m = LoadModel(d);
    ASSERT_FALSE(m.ok());
    EXPECT_NE(m.status().message().find("missing tensor " + scalar), std::string::npos) << m.status().message();
  }
  {
    const std::string d = TestTempDir("wrong_shape");
    ASSERT_TRUE(RewriteCheckpoint(dir, d, [&](TensorToWrite& t) {
                  if (t.name == q) std::swap(t.shape[0], t.shape[1]);
                  return true;
                }).ok());
    auto m = LoadModel(d);
    ASSERT_FALSE(m.ok());
    EXPECT_NE(m.status().message().find(q), std::string::npos) << m.status().message();
    EXPECT_NE(m.status().message().find("expected"), std::string::npos) << m.status().message();
  }
  {
    const std::string d = TestTempDir("truncated");
    ASSERT_TRUE(CopyCheckpoint(dir, d).ok());
    ASSERT_EQ(::truncate((d + "/model.safetensors").c_str(), 100000), 0);
    auto m = LoadModel(d);
    ASSERT_FALSE(m.ok());
    EXPECT_NE(m.status().message().find("truncated"), std::string::npos) << m.status().message();
  }
  {
    auto m = LoadModel(TestTempDir("empty"));
    ASSERT_FALSE(m.ok());
    EXPECT_NE(m.status().message().find("config.json"), std::string::npos);
  }
}

// Shared layers never read their own stored K/V: perturbing them changes nothing.
TEST(EngineLoad, SharedLayersIgnoreTheirStoredKv) {
  const std::string dir = TinyCheckpoint("e2b", {.vocab = 512});
  auto model = LoadModel(dir);
  ASSERT_TRUE(model.ok());
  const ModelPlan& plan = (*model)->plan();
  ASSERT_LT(plan.first_kv_shared, plan.n_layers());
  const std::string d = TestTempDir("perturbed_shared_kv");
  ASSERT_TRUE(CopyCheckpoint(dir, d, [&](const std::string& name, std::vector<float>& v) {
                for (int i = plan.first_kv_shared; i < plan.n_layers(); ++i)
                  if (name.find("layers." + std::to_string(i) + ".self_attn.k_proj") != std::string::npos ||
                      name.find("layers." + std::to_string(i) + ".self_attn.v_proj") != std::string::npos) {
                    for (auto& x : v) x = -x * 3;
                    return true;
                  }
                return false;
              }).ok());
  auto perturbed = LoadModel(d);
  ASSERT_TRUE(perturbed.ok());
  const std::vector<int> prompt = RandomPromptIds(20, 512, 9);
  EXPECT_EQ(MaxAbsDiff(EngineLogits(**model, prompt, 5), EngineLogits(**perturbed, prompt, 5)), 0.0);
}

}  // namespace
}  // namespace g4

namespace g4 {
namespace {

// Malformed batches are refused before any cache is written, whatever the order of the rows.
TEST(EngineForward, RefusesMalformedBatchesAndLeavesCachesUntouched) {
  auto model = LoadModel(TinyCheckpoint("e2b", {.vocab = 512}));
  ASSERT_TRUE(model.ok()) << model.status().message();
  const ModelPlan& plan = (*model)->plan();
  KvCache a(plan, 16, 4), b(plan, 16, 4);
  Activations act;
  std::vector<float> logits(static_cast<size_t>(8) * plan.vocab);
  auto refuse = [&](const std::vector<BatchRow>& rows, const std::string& why) {
    Status st = (*model)->Forward(rows, act, logits.data());
    EXPECT_FALSE(st.ok()) << why;
    EXPECT_NE(st.message().find(why), std::string::npos) << st.message();
    EXPECT_EQ(a.n_past(), 0);
    EXPECT_EQ(b.n_past(), 0);
  };
  refuse({{2, 1, &a, true}}, "but its cache expects 0");
  refuse({{2, 0, &a, false}, {3, 2, &a, true}}, "but its cache expects 1");
  refuse({{2, 0, &a, false}, {2, 0, &b, false}, {3, 1, &a, true}}, "rows must be consecutive");
  refuse({{2, 0, &a, false}, {3, 1, &a, false}, {4, 2, &a, false}, {5, 3, &a, false}, {6, 4, &a, true}},
         "more than 4 rows");
  refuse({{plan.vocab, 0, &a, true}}, "outside the vocabulary");
  refuse({{2, 0, nullptr, true}}, "has no KV cache");

  // The same rows, well formed: two sequences side by side, then one decode row each.
  ASSERT_TRUE((*model)->Forward({{2, 0, &a, false}, {3, 1, &a, true}, {2, 0, &b, true}}, act, logits.data()).ok());
  EXPECT_EQ(a.n_past(), 2);
  EXPECT_EQ(b.n_past(), 1);
  ASSERT_TRUE((*model)->Forward({{4, 1, &b, true}, {4, 2, &a, true}}, act, logits.data()).ok());
  EXPECT_EQ(a.n_past(), 3);
  EXPECT_EQ(b.n_past(), 2);
}

}  // namespace
}  // namespace g4
