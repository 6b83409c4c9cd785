#include "testing/real_configs.h"

#include <gtest/gtest.h>

#include "model/arch/gemma4.h"
#include "model/architecture.h"

namespace g4 {

using json = nlohmann::json;

json RealLayerTypes(int layers, int period) {
  json t = json::array();
  for (int i = 0; i < layers; ++i)
    t.push_back((i + 1) % period == 0 ? "full_attention" : "sliding_attention");
  return t;
}

json E2BTextConfig() {
  json rope = {{"sliding_attention", {{"rope_type", "default"}, {"rope_theta", 10000.0}}},
               {"full_attention",
                {{"rope_type", "proportional"},
                 {"partial_rotary_factor", 0.25},
                 {"rope_theta", 1000000.0}}}};
  return {{"model_type", "gemma4_text"},
          {"vocab_size", 262144},
          {"hidden_size", 1536},
          {"intermediate_size", 6144},
          {"use_double_wide_mlp", true},
          {"num_hidden_layers", 35},
          {"num_attention_heads", 8},
          {"num_key_value_heads", 1},
          {"num_global_key_value_heads", nullptr},
          {"head_dim", 256},
          {"global_head_dim", 512},
          {"attention_k_eq_v", false},
          {"layer_types", RealLayerTypes(35, 5)},
          {"sliding_window", 512},
          {"num_kv_shared_layers", 20},
          {"hidden_size_per_layer_input", 256},
          {"vocab_size_per_layer_input", 262144},
          {"final_logit_softcapping", 30.0},
          {"rms_norm_eps", 1e-6},
          {"hidden_activation", "gelu_pytorch_tanh"},
          {"max_position_embeddings", 131072},
          {"tie_word_embeddings", true},
          {"rope_parameters", rope}};
}

json E4BTextConfig() {
  json t = E2BTextConfig();
  t["hidden_size"] = 2560;
  t["intermediate_size"] = 10240;
  t["use_double_wide_mlp"] = false;
  t["num_hidden_layers"] = 42;
  t["num_key_value_heads"] = 2;
  t["layer_types"] = RealLayerTypes(42, 6);
  t["num_kv_shared_layers"] = 18;
  return t;
}

json B12TextConfig() {
  json t = E2BTextConfig();
  t["model_type"] = "gemma4_unified_text";
  t["hidden_size"] = 3840;
  t["intermediate_size"] = 15360;
  t["use_double_wide_mlp"] = false;
  t["num_hidden_layers"] = 48;
  t["num_attention_heads"] = 16;
  t["num_key_value_heads"] = 8;
  t["num_global_key_value_heads"] = 1;
  t["attention_k_eq_v"] = true;
  t["layer_types"] = RealLayerTypes(48, 6);
  t["sliding_window"] = 1024;
  t["num_kv_shared_layers"] = 0;
  t["hidden_size_per_layer_input"] = 0;
  t["max_position_embeddings"] = 262144;
  return t;
}

json OuterConfig(const json& text, const std::string& type) {
  return {{"model_type", type}, {"text_config", text}, {"eos_token_id", {1, 106}}};
}

ModelPlan PlanOfConfig(const json& config, const std::string& generation_config) {
  auto cfg = ParseGemma4Config(config.dump(), generation_config, "test");
  EXPECT_TRUE(cfg.ok()) << cfg.status().message();
  if (!cfg.ok()) return {};
  auto plan = PlanFromConfig(*cfg);
  EXPECT_TRUE(plan.ok()) << plan.status().message();
  return plan.ok() ? *plan : ModelPlan{};
}

}  // namespace g4
