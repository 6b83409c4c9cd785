// Gemma-4 text decoder (E2B, E4B, 12B and text-only exports): config fields, the layer plan and
// tensor names. Registered in model/architecture.cc. The only place besides tokenizer/chat_gemma4 that knows the model family.
// Spec: docs/gemma4.md (§1 config, §2 tensors, §4 KV sharing).
#pragma once

#include <string>

#include "base/status.h"
#include "model/model_config.h"
#include "model/plan.h"

namespace g4 {

// Parses config.json text (and generation_config.json text, may be empty). `source` names the
// origin in error messages. Accepts model_type gemma4 / gemma4_unified (with text_config) and
// the text-only gemma4_text / gemma4_unified_text, both the flat and the per_layer_config form.
Result<ModelConfig> ParseGemma4Config(const std::string& config_json,
                                      const std::string& generation_config_json,
                                      const std::string& source);

// Derives the per-layer plan: geometry, KV sources (HF rule: last non-shared layer of the same
// type), windows, RoPE, MLP widths. Errors name the offending field.
Result<ModelPlan> BuildGemma4Plan(const ModelConfig& config);

struct TensorTable;
// Every tensor of the text decoder (model/tensor_table.h; arch/gemma4_tensors.cc).
const TensorTable& Gemma4Tensors();

// Tensor names, relative to the text-model prefix ("model.language_model." or "model.").
std::string LayerTensorName(int layer, const char* suffix);  // "layers.3.self_attn.q_proj.weight"

}  // namespace g4
