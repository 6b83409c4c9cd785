#include "model/pack_layout.h"

#include "base/mapped_file.h"

namespace g4 {

const std::vector<std::string>& PackedCheckpointFiles() {
  static const std::vector<std::string> kFiles = {"config.json", "generation_config.json",
                                                  "tokenizer.json", "tokenizer_config.json",
                                                  "chat_template.jinja"};
  return kFiles;
}

Status AddCheckpointFiles(PackWriter& writer, const std::string& dir, int* sections) {
  for (const std::string& name : PackedCheckpointFiles()) {
    if (!FileExists(dir + "/" + name)) continue;
    G4_ASSIGN_OR_RETURN(std::string text, ReadFileToString(dir + "/" + name));
    G4_RETURN_IF_ERROR(writer.AddText("file/" + name, text));
    ++*sections;
  }
  return OkStatus();
}

std::string RankPrefix(int rank) { return "rank" + std::to_string(rank) + "/"; }

const char* LmHeadName(LmHeadPlacement p) {
  return p == LmHeadPlacement::kRank0 ? "rank0" : "split";
}

nlohmann::json PlanToJson(const ModelPlan& plan) {
  nlohmann::json layers = nlohmann::json::array();
  for (const LayerPlan& l : plan.layers) {
    // Append new LayerPlan fields here (a changed plan must show in the artifact's plan check).
    layers.push_back({{"index", l.index},
                      {"kind", l.is_sliding() ? "sliding" : "full"},
                      {"head_dim", l.head_dim},
                      {"n_heads_q", l.n_heads_q},
                      {"n_heads_kv", l.n_heads_kv},
                      {"group_size", l.group_size},
                      {"q_head_offset", l.q_head_offset},
                      {"kv_head_offset", l.kv_head_offset},
                      {"window", l.window},
                      {"kv_source", l.kv_source},
                      {"kv_slot", l.kv_slot},
                      {"k_eq_v", l.k_eq_v},
                      {"rope_theta", l.rope_theta},
                      {"rope_pairs", l.rope_pairs},
                      {"mlp_width", l.mlp_width},
                      {"ple_offset", l.ple_offset}});
    // A rank's share (only then, so that --tp 1 plans read as they always did).
    if (plan.tp_size > 1) layers.back()["mlp_offset"] = l.mlp_offset;
  }
  nlohmann::json j = {{"hidden", plan.hidden},       {"vocab", plan.vocab},
                      {"ple_dim", plan.ple_dim},     {"first_kv_shared", plan.first_kv_shared},
                      {"softcap", plan.softcap},     {"rms_norm_eps", plan.rms_norm_eps},
                      {"kv_owners", plan.kv_owners}, {"layers", layers}};
  if (plan.tp_size > 1) {
    j["tp_rank"] = plan.tp_rank;
    j["tp_size"] = plan.tp_size;
    j["lm_head"] = LmHeadName(plan.lm_head);
    j["lm_head_rows"] = {plan.lm_head_begin(), plan.lm_head_end()};
  }
  return j;
}

}  // namespace g4
