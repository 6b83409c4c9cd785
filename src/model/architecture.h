// The registry of model architectures g4 runs, keyed by config.json's `model_type`. Each entry
// is the whole model-specific surface: its config parser, its layer-plan builder and its tensor
// table (model/tensor_table.h). Everything else (binding, packing, doctor, parameter counts,
// the forward pass) reads the plan and the table, never the architecture's name.
//
// Adding a model variant = one table (model/arch/<name>_tensors.cc), one plan builder and one
// entry in Architectures() (architecture.cc).
#pragma once

#include <string>
#include <vector>

#include "base/status.h"
#include "model/model_config.h"
#include "model/plan.h"
#include "model/tensor_table.h"

namespace g4 {

struct Architecture {
  std::string name;                      // "gemma4": ModelPlan::architecture
  std::vector<std::string> model_types;  // the config.json model_type values it reads
  // config.json text (+ generation_config.json text, may be empty); `source` names the origin
  // in error messages.
  Result<ModelConfig> (*parse_config)(const std::string& config_json,
                                      const std::string& generation_config_json,
                                      const std::string& source);
  Result<ModelPlan> (*build_plan)(const ModelConfig& config);
  const TensorTable& (*tensors)();
};

const std::vector<Architecture>& Architectures();

// The architecture that reads `model_type`; an error listing the known ones otherwise.
Result<const Architecture*> ArchitectureForModelType(const std::string& model_type);

// Parses config.json text with the parser of the architecture its model_type names.
Result<ModelConfig> ParseModelConfig(const std::string& config_json,
                                     const std::string& generation_config_json,
                                     const std::string& source);

// Reads DIR/config.json and, if present, DIR/generation_config.json (DIR may be a packed
// artifact: its copies of the two files).
Result<ModelConfig> LoadModelConfig(const std::string& dir);

// The layer plan of a parsed config, built by its architecture (plan.architecture is set).
Result<ModelPlan> PlanFromConfig(const ModelConfig& config);

// LoadModelConfig + PlanFromConfig: the plan of checkpoint directory or artifact DIR.
Result<ModelPlan> LoadModelPlan(const std::string& dir);

// The tensor table of the plan's architecture.
const TensorTable& TensorTableFor(const ModelPlan& plan);

}  // namespace g4
