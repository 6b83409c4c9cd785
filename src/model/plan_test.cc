// The layer plan of the real E2B / E4B / 12B configs, row by row against
// docs/gemma4.md §1.2, §4 and §7.
#include "model/plan.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "model/arch/gemma4.h"
#include "model/weights.h"
#include "testing/real_configs.h"

namespace g4 {
namespace {

using json = nlohmann::json;

TEST(Gemma4Plan, E2BLayersAndKvSources) {
  ModelPlan p = PlanOfConfig(OuterConfig(E2BTextConfig()), R"({"eos_token_id": [1, 106, 50]})");
  ASSERT_EQ(p.n_layers(), 35);
  EXPECT_EQ(p.first_kv_shared, 15);
  EXPECT_EQ(p.kv_owners.size(), 15u);
  for (const LayerPlan& l : p.layers) {
    SCOPED_TRACE(l.index);
    const bool full = l.index % 5 == 4;  // E2B is 4:1, not 5:1
    EXPECT_EQ(l.is_sliding(), !full);
    EXPECT_EQ(l.head_dim, full ? 512 : 256);
    EXPECT_EQ(l.n_heads_q, 8);
    EXPECT_EQ(l.n_heads_kv, 1);
    EXPECT_EQ(l.window, full ? 0 : 512);
    EXPECT_FALSE(l.k_eq_v);
    EXPECT_EQ(l.mlp_width, l.index >= 15 ? 12288 : 6144);  // double-wide on shared layers
    EXPECT_EQ(l.kv_source, l.index < 15 ? l.index : (full ? 14 : 13));
    EXPECT_EQ(l.rope_pairs, full ? 64 : 128);
    EXPECT_EQ(l.rope_theta, full ? 1e6 : 1e4);
    EXPECT_EQ(l.ple_offset, l.index * 256);
  }
  EXPECT_EQ(p.config.eos_token_ids, (std::vector<int>{1, 106, 50}));
  EXPECT_EQ(CountParameters(p).total, 4647449891LL);
  EXPECT_EQ(CountParameters(p).effective, 2298639651LL);
}

TEST(Gemma4Plan, E4BLayersAndKvSources) {
  ModelPlan p = PlanOfConfig(OuterConfig(E4BTextConfig()));
  ASSERT_EQ(p.n_layers(), 42);
  EXPECT_EQ(p.first_kv_shared, 24);
  for (const LayerPlan& l : p.layers) {
    SCOPED_TRACE(l.index);
    const bool full = l.index % 6 == 5;
    EXPECT_EQ(l.head_dim, full ? 512 : 256);
    EXPECT_EQ(l.n_heads_kv, 2);
    EXPECT_EQ(l.mlp_width, 10240);
    EXPECT_EQ(l.kv_source, l.index < 24 ? l.index : (full ? 23 : 22));
  }
  EXPECT_EQ(CountParameters(p).total, 7518069034LL);
}

TEST(Gemma4Plan, B12GlobalLayersSingleKvHeadKEqV) {
  ModelPlan p = PlanOfConfig(OuterConfig(B12TextConfig(), "gemma4_unified"));
  ASSERT_EQ(p.n_layers(), 48);
  EXPECT_EQ(p.kv_owners.size(), 48u);
  for (const LayerPlan& l : p.layers) {
    SCOPED_TRACE(l.index);
    const bool full = l.index % 6 == 5;
    EXPECT_EQ(l.head_dim, full ? 512 : 256);
    EXPECT_EQ(l.n_heads_q, 16);
    EXPECT_EQ(l.n_heads_kv, full ? 1 : 8);
    EXPECT_EQ(l.k_eq_v, full);
    EXPECT_EQ(l.window, full ? 0 : 1024);
    EXPECT_TRUE(l.owns_kv());
    EXPECT_EQ(l.ple_offset, -1);
  }
  EXPECT_EQ(CountParameters(p).total, 11907350320LL);
}

TEST(Gemma4Plan, PerLayerConfigFormMatchesFlatForm) {
  json flat = OuterConfig(B12TextConfig(), "gemma4_unified");
  json b = flat;
  json& t = b["text_config"];
  t.erase("global_head_dim");
  t.erase("num_global_key_value_heads");
  t["per_layer_config"] = json::object();
  for (int i = 5; i < 48; i += 6)
    t["per_layer_config"][std::to_string(i)] = {{"head_dim", 512}, {"num_key_value_heads", 1}};
  ModelPlan a = PlanOfConfig(flat), c = PlanOfConfig(b);
  ASSERT_EQ(a.n_layers(), c.n_layers());
  for (int i = 0; i < a.n_layers(); ++i) {
    EXPECT_EQ(a.layers[i].head_dim, c.layers[i].head_dim) << i;
    EXPECT_EQ(a.layers[i].n_heads_kv, c.layers[i].n_heads_kv) << i;
  }
}

TEST(Gemma4Plan, TextOnlyExportAndDefaultLayerTypes) {
  json t = E4BTextConfig();
  t["model_type"] = "gemma4_text";
  t.erase("layer_types");  // HF default: 5:1 with the last layer forced full
  t["num_hidden_layers"] = 8;
  t["num_kv_shared_layers"] = 0;
  ModelPlan p = PlanOfConfig(t);
  std::vector<bool> full;
  for (const auto& l : p.layers) full.push_back(!l.is_sliding());
  EXPECT_EQ(full, (std::vector<bool>{false, false, false, false, false, true, false, true}));
}

TEST(Gemma4Plan, SlidingMaskAndRopeFacts) {
  ModelPlan p = PlanOfConfig(OuterConfig(E2BTextConfig()));
  // Proportional RoPE on 512-dim heads: exactly pairs (j, j+256) for j < 64 rotate.
  EXPECT_EQ(p.layers[4].rope_pairs, 64);
  EXPECT_EQ(p.layers[4].head_dim / 2, 256);
}

TEST(Gemma4Config, ErrorsNameTheField) {
  json moe = OuterConfig(E4BTextConfig());
  moe["text_config"]["enable_moe_block"] = true;
  auto r = ParseGemma4Config(moe.dump(), "", "m");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("enable_moe_block"), std::string::npos);

  json unknown = OuterConfig(E4BTextConfig(), "llama");
  r = ParseGemma4Config(unknown.dump(), "", "m");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("model_type \"llama\""), std::string::npos);

  json missing = OuterConfig(E4BTextConfig());
  missing["text_config"].erase("hidden_size");
  r = ParseGemma4Config(missing.dump(), "", "m");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("hidden_size"), std::string::npos);

  json bad_types = OuterConfig(E4BTextConfig());
  bad_types["text_config"]["layer_types"][3] = "local";
  r = ParseGemma4Config(bad_types.dump(), "", "m");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("layer_types"), std::string::npos);

  r = ParseGemma4Config("{not json", "", "m");
  EXPECT_FALSE(r.ok());

  json bad_heads = OuterConfig(E4BTextConfig());
  bad_heads["text_config"]["num_key_value_heads"] = 3;
  auto cfg = ParseGemma4Config(bad_heads.dump(), "", "m");
  ASSERT_TRUE(cfg.ok());
  auto plan = BuildGemma4Plan(*cfg);
  ASSERT_FALSE(plan.ok());
  EXPECT_NE(plan.status().message().find("KV heads"), std::string::npos);
}

}  // namespace
}  // namespace g4
