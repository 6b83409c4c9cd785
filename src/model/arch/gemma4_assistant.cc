#include "model/arch/gemma4_assistant.h"

#include <nlohmann/json.hpp>

#include "io/pack.h"
#include "model/arch/gemma4.h"

namespace g4 {

using json = nlohmann::json;

bool IsAssistantModelType(const std::string& model_type) {
  return model_type == "gemma4_assistant" || model_type == "gemma4_unified_assistant";
}

Result<AssistantConfig> ParseAssistantConfig(const std::string& config_json,
                                             const std::string& source) {
  const std::string where = source + "/config.json";
  const json outer = json::parse(config_json, nullptr, false);
  if (outer.is_discarded() || !outer.is_object())
    return Status::Errorf(where, ": not a JSON object");
  AssistantConfig c;
  c.source = source;
  if (!outer.contains("model_type") || !outer["model_type"].is_string() ||
      !IsAssistantModelType(outer["model_type"].get<std::string>()))
    return Status::Errorf(where, ": model_type must be gemma4_assistant or "
                                 "gemma4_unified_assistant (an assistant drafter checkpoint)");
  c.model_type = outer["model_type"].get<std::string>();
  auto get_int = [&](const char* key, int* out, bool required) -> Status {
    if (!outer.contains(key) || outer[key].is_null())
      return required ? Status::Errorf(where, ": missing required field \"", key, "\"")
                      : OkStatus();
    if (!outer[key].is_number_integer() || outer[key].get<int64_t>() <= 0 ||
        outer[key].get<int64_t>() > (int64_t{1} << 30))
      return Status::Errorf(where, ": field \"", key, "\" must be a positive integer, got ",
                            outer[key].dump());
    *out = outer[key].get<int>();
    return OkStatus();
  };
  G4_RETURN_IF_ERROR(get_int("backbone_hidden_size", &c.backbone_hidden, true));
  G4_RETURN_IF_ERROR(get_int("num_centroids", &c.num_centroids, false));
  G4_RETURN_IF_ERROR(get_int("centroid_intermediate_top_k", &c.centroid_top_k, false));
  if (outer.contains("use_ordered_embeddings") && !outer["use_ordered_embeddings"].is_null()) {
    if (!outer["use_ordered_embeddings"].is_boolean())
      return Status::Errorf(where, ": field \"use_ordered_embeddings\" must be true/false");
    c.use_ordered_embeddings = outer["use_ordered_embeddings"].get<bool>();
  }
  if (!outer.contains("text_config") || !outer["text_config"].is_object())
    return Status::Errorf(where, ": an assistant config needs an object \"text_config\"");
  // The inner config is an ordinary Gemma-4 text config: its parser reads it.
  json text = outer["text_config"];
  const std::string text_type = c.model_type == "gemma4_assistant" ? "gemma4_text"
                                                                   : "gemma4_unified_text";
  if (!text.contains("model_type")) text["model_type"] = text_type;
  G4_ASSIGN_OR_RETURN(c.text, ParseGemma4Config(text.dump(), "", source + "/config.json text_config:"));
  c.text.source = source;
  if (c.text.hidden_size_per_layer_input > 0)
    return Status::Errorf(where, ": text_config.hidden_size_per_layer_input must be 0 (an "
                                 "assistant has no per-layer embeddings)");
  if (c.text.use_double_wide_mlp)
    return Status::Errorf(where, ": text_config.use_double_wide_mlp is not supported on an "
                                 "assistant");
  {
    // The inner decoder's geometry must build (positive widths, heads dividing, windows).
    ModelConfig unshared = c.text;
    unshared.num_kv_shared_layers = 0;
    G4_RETURN_IF_ERROR(BuildGemma4Plan(unshared).status());
  }
  if (c.use_ordered_embeddings) {
    const int V = c.text.vocab_size;
    if (c.num_centroids > V || V % c.num_centroids != 0)
      return Status::Errorf(where, ": num_centroids = ", c.num_centroids,
                            " must divide vocab_size = ", V);
    if (c.centroid_top_k > c.num_centroids)
      return Status::Errorf(where, ": centroid_intermediate_top_k = ", c.centroid_top_k,
                            " exceeds num_centroids = ", c.num_centroids);
  }
  return c;
}

Result<AssistantConfig> LoadAssistantConfig(const std::string& dir) {
  auto text = ReadModelTextFile(dir, "config.json");
  if (!text.ok()) return Status::Errorf(dir, ": cannot read config.json (is this a model directory?)");
  return ParseAssistantConfig(*text, dir);
}

bool IsAssistantCheckpoint(const std::string& model) {
  auto text = ReadModelTextFile(model, "config.json");
  if (!text.ok()) return false;
  const json outer = json::parse(*text, nullptr, false);
  if (!outer.is_object() || !outer.contains("model_type") || !outer["model_type"].is_string())
    return false;
  return IsAssistantModelType(outer["model_type"].get<std::string>());
}

Result<AssistantPlan> BuildAssistantPlan(const AssistantConfig& config, const ModelPlan& target) {
  const std::string where = config.source + "/config.json";
  // Geometry, RoPE and widths as for any Gemma-4 layer; every assistant layer is "KV-shared"
  // (num_kv_shared_layers == num_hidden_layers) with the target as its source, so the plan is
  // built unshared and the sources are set below.
  ModelConfig text = config.text;
  text.num_kv_shared_layers = 0;
  G4_ASSIGN_OR_RETURN(ModelPlan own, BuildGemma4Plan(text));
  AssistantPlan p;
  p.config = config;
  p.hidden = own.hidden;
  p.backbone_hidden = config.backbone_hidden;
  p.vocab = own.vocab;
  p.rms_norm_eps = own.rms_norm_eps;
  p.mlp_width = config.text.intermediate_size;
  if (config.backbone_hidden != target.hidden)
    return Status::Errorf(where, ": backbone_hidden_size = ", config.backbone_hidden,
                          " but the target's hidden size is ", target.hidden,
                          " (this assistant was trained for another model)");
  if (own.vocab != target.vocab)
    return Status::Errorf(where, ": vocab_size = ", own.vocab, " but the target's is ",
                          target.vocab);
  for (LayerPlan lp : own.layers) {
    // HF store_full_length_kv: the last KV-owner layer of the same attention type.
    int src = -1;
    for (int j = target.n_layers() - 1; j >= 0 && src < 0; --j)
      if (target.layers[j].owns_kv() && target.layers[j].kind == lp.kind) src = j;
    const char* type = lp.is_sliding() ? "sliding" : "full";
    if (src < 0)
      return Status::Errorf(where, ": layer ", lp.index, " (", type,
                            ") has no target layer of its type to read K/V from");
    const LayerPlan& t = target.layers[src];
    // A tensor-parallel rank's plan holds a share of the query heads and, where they divide,
    // of the KV heads; the group size is the whole model's.
    const int target_kv = t.n_heads_q * target.tp_size / t.group_size;
    if (t.head_dim != lp.head_dim || target_kv != lp.n_heads_kv || t.window != lp.window)
      return Status::Errorf(where, ": layer ", lp.index, " (", type, ") expects K/V of ",
                            lp.n_heads_kv, " heads x ", lp.head_dim, " (window ", lp.window,
                            ") but target layer ", src, " has ", target_kv, " x ", t.head_dim,
                            " (window ", t.window, ")");
    lp.kv_source = src;
    lp.kv_slot = t.kv_slot;
    // The KV heads this rank's cache holds (all of them unless split over the ranks).
    lp.n_heads_kv = t.n_heads_kv;
    lp.kv_head_offset = t.kv_head_offset;
    p.layers.push_back(lp);
  }
  return p;
}

std::vector<AssistantTensor> AssistantTensors(const AssistantConfig& config) {
  using K = AssistantTensorKind;
  const ModelConfig& t = config.text;
  const int64_t Ha = t.hidden_size, Hb = config.backbone_hidden, V = t.vocab_size;
  const int64_t I = t.intermediate_size;
  std::vector<AssistantTensor> out = {
      {"model.embed_tokens.weight", K::kMatrix, {V, Ha}, -1, !config.use_ordered_embeddings},
      {"model.norm.weight", K::kVector, {Ha}},
      {"pre_projection.weight", K::kMatrix, {Ha, 2 * Hb}, -1, true},
      {"post_projection.weight", K::kMatrix, {Hb, Ha}, -1, true},
  };
  if (config.use_ordered_embeddings) {
    out.push_back({"masked_embedding.centroids.weight", K::kMatrix, {config.num_centroids, Ha}});
    out.push_back({"masked_embedding.token_ordering", K::kOrdering, {V}});
  }
  ModelConfig unshared = t;
  unshared.num_kv_shared_layers = 0;
  auto own = BuildGemma4Plan(unshared);
  if (!own.ok()) return out;  // a config that parsed has a plan; nothing more to list otherwise
  for (const LayerPlan& lp : own->layers) {
    const int i = lp.index;
    const std::string l = "model.layers." + std::to_string(i) + ".";
    for (const char* norm : {"input_layernorm", "post_attention_layernorm",
                             "pre_feedforward_layernorm", "post_feedforward_layernorm"})
      out.push_back({l + norm + ".weight", K::kVector, {Ha}, i});
    out.push_back({l + "layer_scalar", K::kScalar, {1}, i});
    out.push_back({l + "self_attn.q_proj.weight", K::kMatrix, {lp.q_dim(), Ha}, i, true});
    out.push_back({l + "self_attn.q_norm.weight", K::kVector, {lp.head_dim}, i});
    out.push_back({l + "self_attn.o_proj.weight", K::kMatrix, {Ha, lp.q_dim()}, i, true});
    out.push_back({l + "mlp.gate_proj.weight", K::kMatrix, {I, Ha}, i, true});
    out.push_back({l + "mlp.up_proj.weight", K::kMatrix, {I, Ha}, i, true});
    out.push_back({l + "mlp.down_proj.weight", K::kMatrix, {Ha, I}, i, true});
  }
  return out;
}

}  // namespace g4
