#include "model/arch/gemma4.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>


namespace g4 {

using json = nlohmann::json;

namespace {

const char* kSliding = "sliding_attention";
// Largest width accepted for any one activation row (hidden, heads x head_dim, MLP, all layers'
// PLE inputs): 16x the largest released Gemma-4's, far below where int products overflow.
constexpr int64_t kMaxWidth = int64_t{1} << 20;
const char* kFull = "full_attention";

// Reads an integer field; `required` fields that are absent are an error naming the field.
Status GetInt(const json& j, const char* key, int* out, bool required, const std::string& where) {
  if (!j.contains(key) || j[key].is_null()) {
    return required ? Status::Errorf(where, ": missing required field \"", key, "\"") : OkStatus();
  }
  if (!j[key].is_number_integer())
    return Status::Errorf(where, ": field \"", key, "\" must be an integer, got ", j[key].dump());
  long long v = j[key].get<long long>();
  if (v < 0 || v > std::numeric_limits<int>::max())
    return Status::Errorf(where, ": field \"", key, "\" = ", v, " is out of range");
  *out = static_cast<int>(v);
  return OkStatus();
}

Status GetDouble(const json& j, const char* key, double* out, const std::string& where) {
  if (!j.contains(key) || j[key].is_null()) return OkStatus();
  if (!j[key].is_number())
    return Status::Errorf(where, ": field \"", key, "\" must be a number, got ", j[key].dump());
  *out = j[key].get<double>();
  return OkStatus();
}

Status GetBool(const json& j, const char* key, bool* out, const std::string& where) {
  if (!j.contains(key) || j[key].is_null()) return OkStatus();
  if (!j[key].is_boolean())
    return Status::Errorf(where, ": field \"", key, "\" must be true/false, got ", j[key].dump());
  *out = j[key].get<bool>();
  return OkStatus();
}

// eos_token_id may be an int or a list of ints.
Status AddIds(const json& j, const char* key, std::vector<int>* ids, const std::string& where) {
  if (!j.contains(key) || j[key].is_null()) return OkStatus();
  const json& v = j[key];
  auto add = [&](const json& x) -> Status {
    if (!x.is_number_integer() || x.get<long long>() < 0 ||
        x.get<long long>() > std::numeric_limits<int>::max())
      return Status::Errorf(where, ": \"", key, "\" holds a non-id value ", x.dump());
    int id = x.get<int>();
    if (std::find(ids->begin(), ids->end(), id) == ids->end()) ids->push_back(id);
    return OkStatus();
  };
  if (v.is_array()) {
    for (const json& x : v) G4_RETURN_IF_ERROR(add(x));
    return OkStatus();
  }
  return add(v);
}

Status ParseRope(const json& j, RopeParameters* rope, const std::string& where) {
  if (!j.is_object()) return Status::Errorf(where, ": must be an object");
  if (j.contains("rope_type")) {
    if (!j["rope_type"].is_string()) return Status::Errorf(where, ".rope_type must be a string");
    rope->rope_type = j["rope_type"].get<std::string>();
  } else if (j.contains("partial_rotary_factor")) {
    rope->rope_type = "proportional";  // spec §1.4: missing type with a partial factor
  }
  G4_RETURN_IF_ERROR(GetDouble(j, "rope_theta", &rope->rope_theta, where));
  G4_RETURN_IF_ERROR(GetDouble(j, "partial_rotary_factor", &rope->partial_rotary_factor, where));
  G4_RETURN_IF_ERROR(GetDouble(j, "factor", &rope->factor, where));
  if (rope->rope_type != "default" && rope->rope_type != "proportional")
    return Status::Errorf(where, ".rope_type \"", rope->rope_type,
                          "\" is not supported (expected default or proportional)");
  if (!(rope->rope_theta > 0)) return Status::Errorf(where, ".rope_theta must be positive");
  if (!(rope->partial_rotary_factor > 0 && rope->partial_rotary_factor <= 1))
    return Status::Errorf(where, ".partial_rotary_factor must be in (0, 1]");
  if (!(rope->factor > 0)) return Status::Errorf(where, ".factor must be positive");
  return OkStatus();
}

}  // namespace

Result<ModelConfig> ParseGemma4Config(const std::string& config_json,
                                      const std::string& generation_config_json,
                                      const std::string& source) {
  ModelConfig cfg;
  cfg.source = source;
  const std::string where_outer = source + "/config.json";
  json outer = json::parse(config_json, nullptr, false);
  if (outer.is_discarded() || !outer.is_object())
    return Status::Errorf(where_outer, ": not a JSON object");
  if (!outer.contains("model_type") || !outer["model_type"].is_string())
    return Status::Errorf(where_outer, ": missing \"model_type\"");
  cfg.model_type = outer["model_type"].get<std::string>();
  if (outer.contains("architectures") && outer["architectures"].is_array())
    for (const json& a : outer["architectures"])
      if (a.is_string()) cfg.architectures.push_back(a.get<std::string>());

  const json* text = &outer;
  std::string where = where_outer;
  if (cfg.model_type == "gemma4" || cfg.model_type == "gemma4_unified") {
    if (!outer.contains("text_config") || !outer["text_config"].is_object())
      return Status::Errorf(where_outer, ": model_type ", cfg.model_type,
                            " needs an object \"text_config\"");
    text = &outer["text_config"];
    where = where_outer + " text_config";
    // Not json::value(): it throws when the field is there but not a string.
    cfg.text_model_type = cfg.model_type + "_text";
    if (text->contains("model_type")) {
      if (!(*text)["model_type"].is_string())
        return Status::Errorf(where, ": \"model_type\" must be a string");
      cfg.text_model_type = (*text)["model_type"].get<std::string>();
    }
  } else if (cfg.model_type == "gemma4_text" || cfg.model_type == "gemma4_unified_text") {
    cfg.text_model_type = cfg.model_type;
  } else {
    return Status::Errorf(where_outer, ": model_type \"", cfg.model_type,
                          "\" is not supported (expected gemma4, gemma4_unified, gemma4_text or "
                          "gemma4_unified_text)");
  }
  if (cfg.text_model_type != "gemma4_text" && cfg.text_model_type != "gemma4_unified_text")
    return Status::Errorf(where, ": model_type \"", cfg.text_model_type,
                          "\" is not a Gemma-4 text decoder");
  const json& t = *text;

  bool moe = false;
  G4_RETURN_IF_ERROR(GetBool(t, "enable_moe_block", &moe, where));
  if (moe)
    return Status::Errorf(where, ": enable_moe_block=true (the 26B-A4B mixture of experts) is not "
                          "supported by g4 yet");
  G4_RETURN_IF_ERROR(GetInt(t, "vocab_size", &cfg.vocab_size, true, where));
  G4_RETURN_IF_ERROR(GetInt(t, "hidden_size", &cfg.hidden_size, true, where));
  G4_RETURN_IF_ERROR(GetInt(t, "intermediate_size", &cfg.intermediate_size, true, where));
  G4_RETURN_IF_ERROR(GetInt(t, "num_hidden_layers", &cfg.num_hidden_layers, true, where));
  G4_RETURN_IF_ERROR(GetInt(t, "num_attention_heads", &cfg.num_attention_heads, true, where));
  G4_RETURN_IF_ERROR(GetInt(t, "num_key_value_heads", &cfg.num_key_value_heads, true, where));
  G4_RETURN_IF_ERROR(GetInt(t, "head_dim", &cfg.head_dim, true, where));
  G4_RETURN_IF_ERROR(GetInt(t, "global_head_dim", &cfg.global_head_dim, false, where));
  if (t.contains("num_global_key_value_heads") && !t["num_global_key_value_heads"].is_null()) {
    int v = 0;
    G4_RETURN_IF_ERROR(GetInt(t, "num_global_key_value_heads", &v, true, where));
    cfg.num_global_key_value_heads = v;
  }
  G4_RETURN_IF_ERROR(GetBool(t, "attention_k_eq_v", &cfg.attention_k_eq_v, where));
  G4_RETURN_IF_ERROR(GetBool(t, "use_double_wide_mlp", &cfg.use_double_wide_mlp, where));
  G4_RETURN_IF_ERROR(GetInt(t, "sliding_window", &cfg.sliding_window, true, where));
  G4_RETURN_IF_ERROR(GetInt(t, "num_kv_shared_layers", &cfg.num_kv_shared_layers, false, where));
  G4_RETURN_IF_ERROR(
      GetInt(t, "hidden_size_per_layer_input", &cfg.hidden_size_per_layer_input, false, where));
  G4_RETURN_IF_ERROR(
      GetInt(t, "vocab_size_per_layer_input", &cfg.vocab_size_per_layer_input, false, where));
  if (t.contains("final_logit_softcapping") && !t["final_logit_softcapping"].is_null())
    G4_RETURN_IF_ERROR(GetDouble(t, "final_logit_softcapping", &cfg.final_logit_softcapping, where));
  G4_RETURN_IF_ERROR(GetDouble(t, "rms_norm_eps", &cfg.rms_norm_eps, where));
  G4_RETURN_IF_ERROR(GetInt(t, "max_position_embeddings", &cfg.max_position_embeddings, false, where));
  G4_RETURN_IF_ERROR(GetBool(t, "tie_word_embeddings", &cfg.tie_word_embeddings, where));
  if (outer.contains("tie_word_embeddings"))
    G4_RETURN_IF_ERROR(GetBool(outer, "tie_word_embeddings", &cfg.tie_word_embeddings, where_outer));
  for (const char* act_key : {"hidden_activation", "hidden_act"}) {
    if (t.contains(act_key) && t[act_key].is_string()) {
      cfg.hidden_activation = t[act_key].get<std::string>();
      break;
    }
  }
  if (cfg.hidden_activation != "gelu_pytorch_tanh")
    return Status::Errorf(where, ": hidden_activation \"", cfg.hidden_activation,
                          "\" is not supported (Gemma-4 uses gelu_pytorch_tanh)");
  if (t.contains("dtype") && t["dtype"].is_string()) cfg.dtype = t["dtype"].get<std::string>();
  else if (t.contains("torch_dtype") && t["torch_dtype"].is_string())
    cfg.dtype = t["torch_dtype"].get<std::string>();

  if (cfg.num_hidden_layers <= 0 || cfg.num_hidden_layers > 1024)
    return Status::Errorf(where, ": num_hidden_layers = ", cfg.num_hidden_layers, " is out of range");

  // Layer types: explicit list, or HF's default pattern (5 sliding : 1 full, last layer full).
  if (t.contains("layer_types") && !t["layer_types"].is_null()) {
    if (!t["layer_types"].is_array()) return Status::Errorf(where, ": layer_types must be a list");
    for (const json& x : t["layer_types"]) {
      if (!x.is_string() || (x.get<std::string>() != kSliding && x.get<std::string>() != kFull))
        return Status::Errorf(where, ": layer_types has an unknown entry ", x.dump());
      cfg.layer_types.push_back(x.get<std::string>());
    }
    if (static_cast<int>(cfg.layer_types.size()) != cfg.num_hidden_layers)
      return Status::Errorf(where, ": layer_types has ", cfg.layer_types.size(),
                            " entries but num_hidden_layers is ", cfg.num_hidden_layers);
  } else {
    for (int i = 0; i < cfg.num_hidden_layers; ++i)
      cfg.layer_types.push_back((i + 1) % 6 == 0 ? kFull : kSliding);
    cfg.layer_types.back() = kFull;
  }

  // RoPE per layer type. Defaults are the released models' values (spec §1.1).
  cfg.rope_parameters[kSliding] = RopeParameters{"default", 10000.0, 1.0, 1.0};
  cfg.rope_parameters[kFull] = RopeParameters{"proportional", 1000000.0, 0.25, 1.0};
  if (t.contains("rope_parameters") && !t["rope_parameters"].is_null()) {
    const json& rp = t["rope_parameters"];
    if (!rp.is_object()) return Status::Errorf(where, ": rope_parameters must be an object");
    for (const char* type : {kSliding, kFull}) {
      if (rp.contains(type)) {
        RopeParameters r;
        if (std::string(type) == kFull) r.rope_type = "default";
        G4_RETURN_IF_ERROR(ParseRope(rp[type], &r, where + " rope_parameters." + type));
        cfg.rope_parameters[type] = r;
      }
    }
  }

  if (t.contains("per_layer_config") && !t["per_layer_config"].is_null()) {
    const json& plc = t["per_layer_config"];
    if (!plc.is_object()) return Status::Errorf(where, ": per_layer_config must be an object");
    for (auto it = plc.begin(); it != plc.end(); ++it) {
      int layer = -1;
      try {
        size_t used = 0;
        layer = std::stoi(it.key(), &used);
        if (used != it.key().size()) layer = -1;
      } catch (...) {
        layer = -1;
      }
      if (layer < 0 || layer >= cfg.num_hidden_layers)
        return Status::Errorf(where, ": per_layer_config key \"", it.key(),
                              "\" is not a layer index in [0, ", cfg.num_hidden_layers, ")");
      if (!it->is_object())
        return Status::Errorf(where, ": per_layer_config[\"", it.key(), "\"] must be an object");
      PerLayerOverride o;
      std::string w = where + " per_layer_config[" + it.key() + "]";
      int v = 0;
      if (it->contains("head_dim")) {
        G4_RETURN_IF_ERROR(GetInt(*it, "head_dim", &v, true, w));
        o.head_dim = v;
      }
      if (it->contains("num_key_value_heads")) {
        G4_RETURN_IF_ERROR(GetInt(*it, "num_key_value_heads", &v, true, w));
        o.num_key_value_heads = v;
      }
      cfg.per_layer_config[layer] = o;
    }
  }

  // Special ids and stop tokens: union of config.json (outer and text) and generation_config.
  G4_RETURN_IF_ERROR(GetInt(t, "bos_token_id", &cfg.bos_token_id, false, where));
  G4_RETURN_IF_ERROR(GetInt(t, "pad_token_id", &cfg.pad_token_id, false, where));
  G4_RETURN_IF_ERROR(AddIds(outer, "eos_token_id", &cfg.eos_token_ids, where_outer));
  if (text != &outer) G4_RETURN_IF_ERROR(AddIds(t, "eos_token_id", &cfg.eos_token_ids, where));

  if (!generation_config_json.empty()) {
    const std::string gwhere = source + "/generation_config.json";
    json g = json::parse(generation_config_json, nullptr, false);
    if (g.is_discarded() || !g.is_object()) return Status::Errorf(gwhere, ": not a JSON object");
    G4_RETURN_IF_ERROR(AddIds(g, "eos_token_id", &cfg.eos_token_ids, gwhere));
    G4_RETURN_IF_ERROR(AddIds(g, "suppress_tokens", &cfg.suppress_tokens, gwhere));
    G4_RETURN_IF_ERROR(GetBool(g, "do_sample", &cfg.generation.do_sample, gwhere));
    G4_RETURN_IF_ERROR(GetDouble(g, "temperature", &cfg.generation.temperature, gwhere));
    G4_RETURN_IF_ERROR(GetDouble(g, "top_p", &cfg.generation.top_p, gwhere));
    G4_RETURN_IF_ERROR(GetInt(g, "top_k", &cfg.generation.top_k, false, gwhere));
  }
  if (cfg.eos_token_ids.empty()) cfg.eos_token_ids.push_back(1);
  return cfg;
}

Result<ModelPlan> BuildGemma4Plan(const ModelConfig& cfg) {
  const std::string where = cfg.source + "/config.json";
  ModelPlan plan;
  plan.architecture = "gemma4";
  plan.config = cfg;
  plan.hidden = cfg.hidden_size;
  plan.vocab = cfg.vocab_size;
  plan.ple_dim = cfg.hidden_size_per_layer_input;
  plan.softcap = cfg.final_logit_softcapping;
  plan.rms_norm_eps = cfg.rms_norm_eps;
  const int L = cfg.num_hidden_layers;
  if (cfg.hidden_size <= 0) return Status::Errorf(where, ": hidden_size must be positive");
  if (cfg.vocab_size <= 0) return Status::Errorf(where, ": vocab_size must be positive");
  if (cfg.num_attention_heads <= 0) return Status::Errorf(where, ": num_attention_heads must be positive");
  if (cfg.num_kv_shared_layers < 0 || cfg.num_kv_shared_layers >= L)
    return Status::Errorf(where, ": num_kv_shared_layers = ", cfg.num_kv_shared_layers,
                          " must be in [0, num_hidden_layers)");
  if (cfg.hidden_size_per_layer_input > 0 && cfg.vocab_size_per_layer_input != 0 &&
      cfg.vocab_size_per_layer_input != cfg.vocab_size)
    return Status::Errorf(where, ": vocab_size_per_layer_input = ", cfg.vocab_size_per_layer_input,
                          " differs from vocab_size = ", cfg.vocab_size, " (not supported)");
  plan.first_kv_shared = L - cfg.num_kv_shared_layers;

  for (int i = 0; i < L; ++i) {
    LayerPlan lp;
    lp.index = i;
    const bool full = cfg.layer_types[i] == kFull;
    lp.kind = full ? AttentionKind::kFull : AttentionKind::kSliding;
    lp.n_heads_q = cfg.num_attention_heads;
    lp.k_eq_v = cfg.attention_k_eq_v && full;
    // Geometry: newer form (per_layer_config) overrides; older form uses the flat globals.
    lp.head_dim = full ? cfg.global_head_dim : cfg.head_dim;
    lp.n_heads_kv = cfg.num_key_value_heads;
    if (full && cfg.attention_k_eq_v && cfg.num_global_key_value_heads)
      lp.n_heads_kv = *cfg.num_global_key_value_heads;
    if (!cfg.per_layer_config.empty()) {
      // Form B: full layers take head_dim/kv heads only from their override (spec §1.4).
      lp.head_dim = cfg.head_dim;
      lp.n_heads_kv = cfg.num_key_value_heads;
      auto it = cfg.per_layer_config.find(i);
      if (it != cfg.per_layer_config.end()) {
        if (it->second.head_dim) lp.head_dim = *it->second.head_dim;
        if (it->second.num_key_value_heads) lp.n_heads_kv = *it->second.num_key_value_heads;
      }
    }
    const std::string lw = Str(where, ": layer ", i, " (", cfg.layer_types[i], ")");
    if (lp.head_dim <= 0 || lp.head_dim % 2 != 0)
      return Status::Errorf(lw, ": head_dim ", lp.head_dim, " must be positive and even");
    if (lp.n_heads_kv <= 0 || lp.n_heads_q % lp.n_heads_kv != 0)
      return Status::Errorf(lw, ": ", lp.n_heads_q, " query heads do not divide into ",
                            lp.n_heads_kv, " KV heads");
    lp.group_size = lp.n_heads_q / lp.n_heads_kv;
    lp.window = full ? 0 : cfg.sliding_window;
    if (!full && cfg.sliding_window <= 0)
      return Status::Errorf(where, ": sliding_window must be positive (layer ", i, " is sliding)");

    const RopeParameters& rope = plan.config.rope_parameters.at(cfg.layer_types[i]);
    lp.rope_theta = rope.rope_theta;
    if (rope.rope_type == "proportional") {
      // HF _compute_proportional_rope_parameters: int(prf * d // 2) pairs, exponent over d.
      lp.rope_pairs = static_cast<int>(std::floor(rope.partial_rotary_factor * lp.head_dim / 2.0));
    } else {
      if (rope.partial_rotary_factor != 1.0)
        return Status::Errorf(lw, ": default RoPE with partial_rotary_factor != 1 is not supported");
      lp.rope_pairs = lp.head_dim / 2;
    }
    if (rope.factor != 1.0)
      return Status::Errorf(lw, ": rope factor ", rope.factor, " != 1 is not supported");

    const bool shared = cfg.num_kv_shared_layers > 0 && i >= plan.first_kv_shared;
    lp.kv_source = i;
    if (shared) {
      // HF rule: the last non-shared layer of the same attention type.
      int src = -1;
      for (int j = plan.first_kv_shared - 1; j >= 0; --j)
        if (cfg.layer_types[j] == cfg.layer_types[i]) {
          src = j;
          break;
        }
      if (src < 0)
        return Status::Errorf(lw, ": KV-shared layer has no earlier non-shared ", cfg.layer_types[i],
                              " layer to read from");
      lp.kv_source = src;
      const LayerPlan& s = plan.layers[src];
      if (s.head_dim != lp.head_dim || s.n_heads_kv != lp.n_heads_kv)
        return Status::Errorf(lw, ": reads KV from layer ", src, " but their geometry differs");
    }
    // Widths are bounded here, at the front door, so that every size the engine derives from
    // the plan (q_dim, kv_dim, mlp_width, layers x ple_dim, rows x width in int64) fits its type.
    const int64_t mlp_width =
        int64_t{cfg.intermediate_size} * ((cfg.use_double_wide_mlp && shared) ? 2 : 1);
    if (mlp_width <= 0) return Status::Errorf(where, ": intermediate_size must be positive");
    for (auto [name, value] : {std::pair<const char*, int64_t>{"hidden_size", cfg.hidden_size},
                               {"query width (heads x head_dim)", int64_t{lp.n_heads_q} * lp.head_dim},
                               {"KV width (kv heads x head_dim)", int64_t{lp.n_heads_kv} * lp.head_dim},
                               {"MLP width", mlp_width},
                               {"per-layer input width (layers x hidden_size_per_layer_input)",
                                int64_t{L} * plan.ple_dim}})
      if (value > kMaxWidth)
        return Status::Errorf(lw, ": ", name, " = ", value, " exceeds ", kMaxWidth,
                              " (corrupt config?)");
    lp.mlp_width = static_cast<int>(mlp_width);
    lp.ple_offset = plan.ple_dim > 0 ? i * plan.ple_dim : -1;
    if (lp.owns_kv()) {
      lp.kv_slot = static_cast<int>(plan.kv_owners.size());
      plan.kv_owners.push_back(i);
    }
    plan.layers.push_back(lp);
  }
  return plan;
}

std::string LayerTensorName(int layer, const char* suffix) {
  return Str("layers.", layer, ".", suffix);
}

}  // namespace g4
