// The layer plan of the real E2B / E4B / 12B configs, row by row against
// shared/docs/gemma4-architecture.md §1.2, §4 and §7.
#include "model/plan.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "model/arch/gemma4.h"
#include "model/weights.h"

namespace g4 {
namespace {

using json = nlohmann::json;

json RopeParams() {
  return {{"sliding_attention", {{"rope_type", "default"}, {"rope_theta", 10000.0}}},
          {"full_attention",
           {{"rope_type", "proportional"}, {"partial_rotary_factor", 0.25}, {"rope_theta", 1000000.0}}}};
}

json Types(int layers, int period) {
  json t = json::array();
  for (int i = 0; i < layers; ++i) t.push_back((i + 1) % period == 0 ? "full_attention" : "sliding_attention");
  return t;
}

// Published text_config values (spec §1.1).
json E2BText() {
  return {{"model_type", "gemma4_text"}, {"vocab_size", 262144}, {"hidden_size", 1536},
          {"intermediate_size", 6144}, {"use_double_wide_mlp", true}, {"num_hidden_layers", 35},
          {"num_attention_heads", 8}, {"num_key_value_heads", 1}, {"num_global_key_value_heads", nullptr},
          {"head_dim", 256}, {"global_head_dim", 512}, {"attention_k_eq_v", false},
          {"layer_types", Types(35, 5)}, {"sliding_window", 512}, {"num_kv_shared_layers", 20},
          {"hidden_size_per_layer_input", 256}, {"vocab_size_per_layer_input", 262144},
          {"final_logit_softcapping", 30.0}, {"rms_norm_eps", 1e-6},
          {"hidden_activation", "gelu_pytorch_tanh"}, {"max_position_embeddings", 131072},
          {"tie_word_embeddings", true}, {"rope_parameters", RopeParams()}};
}
json E4BText() {
  json t = E2BText();
  t["hidden_size"] = 2560;
  t["intermediate_size"] = 10240;
  t["use_double_wide_mlp"] = false;
  t["num_hidden_layers"] = 42;
  t["num_key_value_heads"] = 2;
  t["layer_types"] = Types(42, 6);
  t["num_kv_shared_layers"] = 18;
  return t;
}
json B12Text() {
  json t = E2BText();
  t["model_type"] = "gemma4_unified_text";
  t["hidden_size"] = 3840;
  t["intermediate_size"] = 15360;
  t["use_double_wide_mlp"] = false;
  t["num_hidden_layers"] = 48;
  t["num_attention_heads"] = 16;
  t["num_key_value_heads"] = 8;
  t["num_global_key_value_heads"] = 1;
  t["attention_k_eq_v"] = true;
  t["layer_types"] = Types(48, 6);
  t["sliding_window"] = 1024;
  t["num_kv_shared_layers"] = 0;
  t["hidden_size_per_layer_input"] = 0;
  t["max_position_embeddings"] = 262144;
  return t;
}
json Outer(const json& text, const std::string& type = "gemma4") {
  return {{"model_type", type}, {"text_config", text}, {"eos_token_id", {1, 106}}};
}

ModelPlan Plan(const json& config, const std::string& gen = "") {
  auto cfg = ParseGemma4Config(config.dump(), gen, "test");
  EXPECT_TRUE(cfg.ok()) << cfg.status().message();
  auto plan = BuildGemma4Plan(*cfg);
  EXPECT_TRUE(plan.ok()) << plan.status().message();
  return *plan;
}

TEST(Gemma4Plan, E2BLayersAndKvSources) {
  ModelPlan p = Plan(Outer(E2BText()), R"({"eos_token_id": [1, 106, 50]})");
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
  ModelPlan p = Plan(Outer(E4BText()));
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
  ModelPlan p = Plan(Outer(B12Text(), "gemma4_unified"));
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
  json flat = Outer(B12Text(), "gemma4_unified");
  json b = flat;
  json& t = b["text_config"];
  t.erase("global_head_dim");
  t.erase("num_global_key_value_heads");
  t["per_layer_config"] = json::object();
  for (int i = 5; i < 48; i += 6) t["per_layer_config"][std::to_string(i)] = {{"head_dim", 512}, {"num_key_value_heads", 1}};
  ModelPlan a = Plan(flat), c = Plan(b);
  ASSERT_EQ(a.n_layers(), c.n_layers());
  for (int i = 0; i < a.n_layers(); ++i) {
    EXPECT_EQ(a.layers[i].head_dim, c.layers[i].head_dim) << i;
    EXPECT_EQ(a.layers[i].n_heads_kv, c.layers[i].n_heads_kv) << i;
  }
}

TEST(Gemma4Plan, TextOnlyExportAndDefaultLayerTypes) {
  json t = E4BText();
  t["model_type"] = "gemma4_text";
  t.erase("layer_types");  // HF default: 5:1 with the last layer forced full
  t["num_hidden_layers"] = 8;
  t["num_kv_shared_layers"] = 0;
  ModelPlan p = Plan(t);
  std::vector<bool> full;
  for (const auto& l : p.layers) full.push_back(!l.is_sliding());
  EXPECT_EQ(full, (std::vector<bool>{false, false, false, false, false, true, false, true}));
}

TEST(Gemma4Plan, SlidingMaskAndRopeFacts) {
  ModelPlan p = Plan(Outer(E2BText()));
  // Proportional RoPE on 512-dim heads: exactly pairs (j, j+256) for j < 64 rotate.
  EXPECT_EQ(p.layers[4].rope_pairs, 64);
  EXPECT_EQ(p.layers[4].head_dim / 2, 256);
}

TEST(Gemma4Config, ErrorsNameTheField) {
  json moe = Outer(E4BText());
  moe["text_config"]["enable_moe_block"] = true;
  auto r = ParseGemma4Config(moe.dump(), "", "m");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("enable_moe_block"), std::string::npos);

  json unknown = Outer(E4BText(), "llama");
  r = ParseGemma4Config(unknown.dump(), "", "m");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("model_type \"llama\""), std::string::npos);

  json missing = Outer(E4BText());
  missing["text_config"].erase("hidden_size");
  r = ParseGemma4Config(missing.dump(), "", "m");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("hidden_size"), std::string::npos);

  json bad_types = Outer(E4BText());
  bad_types["text_config"]["layer_types"][3] = "local";
  r = ParseGemma4Config(bad_types.dump(), "", "m");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("layer_types"), std::string::npos);

  r = ParseGemma4Config("{not json", "", "m");
  EXPECT_FALSE(r.ok());

  json bad_heads = Outer(E4BText());
  bad_heads["text_config"]["num_key_value_heads"] = 3;
  auto cfg = ParseGemma4Config(bad_heads.dump(), "", "m");
  ASSERT_TRUE(cfg.ok());
  auto plan = BuildGemma4Plan(*cfg);
  ASSERT_FALSE(plan.ok());
  EXPECT_NE(plan.status().message().find("KV heads"), std::string::npos);
}

}  // namespace
}  // namespace g4
