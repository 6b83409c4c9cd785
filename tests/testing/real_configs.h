// The published Gemma-4 text configs (docs/gemma4.md §1.1) as JSON, for tests
// that check plans built from the real shapes without a checkpoint: the layer plan, the rank plan.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "model/plan.h"

namespace g4 {

// `layers` layer types, every `period`-th one full attention, the rest sliding.
nlohmann::json RealLayerTypes(int layers, int period);

// text_config of E2B, E4B and the 12B.
nlohmann::json E2BTextConfig();
nlohmann::json E4BTextConfig();
nlohmann::json B12TextConfig();

// A config.json around `text` with model_type `type` (gemma4 or gemma4_unified).
nlohmann::json OuterConfig(const nlohmann::json& text, const std::string& type = "gemma4");

// The layer plan of a config.json (+ optional generation_config.json); parse or build errors are
// test failures.
ModelPlan PlanOfConfig(const nlohmann::json& config, const std::string& generation_config = "");

}  // namespace g4
