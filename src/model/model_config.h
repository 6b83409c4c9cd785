// Typed model configuration, read from a checkpoint's config.json (+ generation_config.json).
// Field names keep their Hugging Face spelling. Only arch/ files fill this in.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace g4 {

struct RopeParameters {
  std::string rope_type = "default";  // "default" or "proportional"
  double rope_theta = 10000.0;
  double partial_rotary_factor = 1.0;
  double factor = 1.0;
};

// Per-layer override from the newer `per_layer_config` config form (transformers >= 5.15).
struct PerLayerOverride {
  std::optional<int> head_dim;
  std::optional<int> num_key_value_heads;
};

struct GenerationDefaults {
  bool do_sample = false;
  double temperature = 1.0;
  int top_k = 0;
  double top_p = 1.0;
};

struct ModelConfig {
  std::string source;           // directory or file it came from, for messages
  std::string model_type;       // outer: gemma4, gemma4_unified, gemma4_text, ...
  std::string text_model_type;  // gemma4_text, gemma4_unified_text
  std::vector<std::string> architectures;

  int vocab_size = 0;
  int hidden_size = 0;
  int intermediate_size = 0;
  int num_hidden_layers = 0;
  int num_attention_heads = 0;
  int num_key_value_heads = 0;
  int head_dim = 0;
  int global_head_dim = 512;
  std::optional<int> num_global_key_value_heads;
  bool attention_k_eq_v = false;
  bool use_double_wide_mlp = false;
  std::vector<std::string> layer_types;  // "sliding_attention" / "full_attention", one per layer
  int sliding_window = 0;
  int num_kv_shared_layers = 0;
  int hidden_size_per_layer_input = 0;
  int vocab_size_per_layer_input = 0;
  double final_logit_softcapping = 0.0;  // 0 = none
  double rms_norm_eps = 1e-6;
  std::string hidden_activation = "gelu_pytorch_tanh";
  int max_position_embeddings = 0;
  bool tie_word_embeddings = true;
  std::map<std::string, RopeParameters> rope_parameters;  // by layer type
  std::map<int, PerLayerOverride> per_layer_config;
  std::string dtype;  // "bfloat16", ...

  int bos_token_id = 2;
  int pad_token_id = 0;
  std::vector<int> eos_token_ids;    // union of config.json and generation_config.json
  std::vector<int> suppress_tokens;  // generation_config.json (12B: 258882, 258883)
  GenerationDefaults generation;
};

}  // namespace g4
