#include "model/architecture.h"

#include <nlohmann/json.hpp>

#include "io/pack.h"
#include "model/arch/gemma4.h"
#include "model/arch/gemma4_assistant.h"

namespace g4 {

const std::vector<Architecture>& Architectures() {
  static const std::vector<Architecture> kArchitectures = {
      {.name = "gemma4",
       .model_types = {"gemma4", "gemma4_unified", "gemma4_text", "gemma4_unified_text"},
       .parse_config = ParseGemma4Config,
       .build_plan = BuildGemma4Plan,
       .tensors = Gemma4Tensors},
  };
  return kArchitectures;
}

namespace {

std::string KnownModelTypes() {
  std::string s;
  for (const Architecture& a : Architectures())
    for (const std::string& t : a.model_types) s += (s.empty() ? "" : ", ") + t;
  return s;
}

}  // namespace

Result<const Architecture*> ArchitectureForModelType(const std::string& model_type) {
  for (const Architecture& a : Architectures())
    for (const std::string& t : a.model_types)
      if (t == model_type) return &a;
  return Status::Errorf("model_type \"", model_type, "\" is not supported (known: ",
                        KnownModelTypes(), ")");
}

Result<ModelConfig> ParseModelConfig(const std::string& config_json,
                                     const std::string& generation_config_json,
                                     const std::string& source) {
  const nlohmann::json outer = nlohmann::json::parse(config_json, nullptr, false);
  const auto it = outer.is_object() ? outer.find("model_type") : outer.end();
  // No readable model_type: the first architecture's parser says precisely what is wrong.
  if (!outer.is_object() || it == outer.end() || !it->is_string())
    return Architectures().front().parse_config(config_json, generation_config_json, source);
  if (IsAssistantModelType(it->get<std::string>()))
    return Status::Errorf(source, "/config.json: model_type \"", it->get<std::string>(),
                          "\" is an assistant drafter, not a model to run on its own: pass it "
                          "as --spec mtp --draft DIR next to its target model");
  auto arch = ArchitectureForModelType(it->get<std::string>());
  if (!arch.ok()) return Status::Errorf(source, "/config.json: ", arch.status().message());
  return (*arch)->parse_config(config_json, generation_config_json, source);
}

Result<ModelConfig> LoadModelConfig(const std::string& dir) {
  // DIR may be a packed artifact: its copies of the two files (io/pack.h).
  auto text = ReadModelTextFile(dir, "config.json");
  if (!text.ok()) {
    if (IsPackFile(dir)) return text.status();
    return Status::Errorf(dir, ": cannot read config.json (is this a model directory?)");
  }
  std::string gen;
  if (ModelHasFile(dir, "generation_config.json")) {
    G4_ASSIGN_OR_RETURN(gen, ReadModelTextFile(dir, "generation_config.json"));
  }
  return ParseModelConfig(*text, gen, dir);
}

Result<ModelPlan> PlanFromConfig(const ModelConfig& config) {
  G4_ASSIGN_OR_RETURN(const Architecture* arch, ArchitectureForModelType(config.model_type));
  G4_ASSIGN_OR_RETURN(ModelPlan plan, arch->build_plan(config));
  plan.architecture = arch->name;
  return plan;
}

Result<ModelPlan> LoadModelPlan(const std::string& dir) {
  G4_ASSIGN_OR_RETURN(ModelConfig config, LoadModelConfig(dir));
  return PlanFromConfig(config);
}

const TensorTable& TensorTableFor(const ModelPlan& plan) {
  for (const Architecture& a : Architectures())
    if (a.name == plan.architecture) return a.tensors();
  // Plans built by an architecture's builder directly (tests) carry its name too; an empty
  // name is the first (and today only) architecture.
  return Architectures().front().tensors();
}

}  // namespace g4
