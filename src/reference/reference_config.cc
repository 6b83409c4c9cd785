// config.json -> ReferenceConfig: the reference's own reading of the checkpoint's geometry (spec
// §1.2-§1.5), independent of the engine's model/arch parser.
#include <cmath>
#include <nlohmann/json.hpp>

#include "base/mapped_file.h"
#include "reference/reference.h"

namespace g4::reference {

using json = nlohmann::json;

namespace {

Status ReadInt(const json& j, const char* key, bool required, int* out, const std::string& where) {
  if (!j.contains(key) || j[key].is_null())
    return required ? Status::Errorf(where, ": missing \"", key, "\"") : OkStatus();
  if (!j[key].is_number_integer() || j[key].get<long long>() < 0 ||
      j[key].get<long long>() > (1LL << 30))
    return Status::Errorf(where, ": \"", key, "\" must be a non-negative integer, got ",
                          j[key].dump());
  *out = j[key].get<int>();
  return OkStatus();
}

Status ReadNumber(const json& j, const char* key, double* out, const std::string& where) {
  if (!j.contains(key) || j[key].is_null()) return OkStatus();
  if (!j[key].is_number())
    return Status::Errorf(where, ": \"", key, "\" must be a number, got ", j[key].dump());
  *out = j[key].get<double>();
  return OkStatus();
}

bool ReadFlag(const json& j, const char* key) {
  return j.contains(key) && j[key].is_boolean() && j[key].get<bool>();
}

struct Rope {
  bool proportional = false;
  double theta = 10000;
  double partial = 1.0;
};

Status ReadRope(const json& j, Rope* rope, const std::string& where) {
  if (!j.is_object()) return Status::Errorf(where, ": must be an object");
  std::string type;
  if (j.contains("rope_type") && j["rope_type"].is_string())
    type = j["rope_type"].get<std::string>();
  // Spec §1.4: copies without rope_type are proportional when they carry a partial factor.
  else if (j.contains("partial_rotary_factor"))
    type = "proportional";
  else
    type = "default";
  if (type != "default" && type != "proportional")
    return Status::Errorf(where, ": rope_type \"", type, "\" not supported");
  rope->proportional = type == "proportional";
  rope->partial = 1.0;
  G4_RETURN_IF_ERROR(ReadNumber(j, "rope_theta", &rope->theta, where));
  G4_RETURN_IF_ERROR(ReadNumber(j, "partial_rotary_factor", &rope->partial, where));
  double factor = 1.0;
  G4_RETURN_IF_ERROR(ReadNumber(j, "factor", &factor, where));
  if (factor != 1.0) return Status::Errorf(where, ": rope factor ", factor, " not supported");
  if (!rope->proportional && rope->partial != 1.0)
    return Status::Errorf(where, ": default RoPE with partial_rotary_factor not supported");
  return OkStatus();
}

}  // namespace

Result<ReferenceConfig> ParseReferenceConfig(const std::string& text, const std::string& path) {
  json outer = json::parse(text, nullptr, false);
  if (outer.is_discarded() || !outer.is_object())
    return Status::Errorf(path, ": not a JSON object");
  const std::string type = outer.value("model_type", "");
  const json* tp = &outer;
  std::string where = path;
  if (type == "gemma4" || type == "gemma4_unified") {
    if (!outer.contains("text_config") || !outer["text_config"].is_object())
      return Status::Errorf(path, ": model_type ", type, " without a text_config object");
    tp = &outer["text_config"];
    where = path + " text_config";
  } else if (type != "gemma4_text" && type != "gemma4_unified_text") {
    return Status::Errorf(path, ": model_type \"", type, "\" is not a Gemma-4 model");
  }
  const json& t = *tp;
  if (ReadFlag(t, "enable_moe_block"))
    return Status::Errorf(where, ": enable_moe_block (MoE) is not supported by the reference");

  ReferenceConfig c;
  int n_layers = 0, heads = 0, kv_heads = 0, head_dim = 0, global_head_dim = 512, global_kv = 0,
      inter = 0, window = 0, shared = 0;
  G4_RETURN_IF_ERROR(ReadInt(t, "vocab_size", true, &c.vocab, where));
  G4_RETURN_IF_ERROR(ReadInt(t, "hidden_size", true, &c.hidden, where));
  G4_RETURN_IF_ERROR(ReadInt(t, "intermediate_size", true, &inter, where));
  G4_RETURN_IF_ERROR(ReadInt(t, "num_hidden_layers", true, &n_layers, where));
  G4_RETURN_IF_ERROR(ReadInt(t, "num_attention_heads", true, &heads, where));
  G4_RETURN_IF_ERROR(ReadInt(t, "num_key_value_heads", true, &kv_heads, where));
  G4_RETURN_IF_ERROR(ReadInt(t, "head_dim", true, &head_dim, where));
  G4_RETURN_IF_ERROR(ReadInt(t, "global_head_dim", false, &global_head_dim, where));
  G4_RETURN_IF_ERROR(ReadInt(t, "num_global_key_value_heads", false, &global_kv, where));
  G4_RETURN_IF_ERROR(ReadInt(t, "sliding_window", false, &window, where));
  G4_RETURN_IF_ERROR(ReadInt(t, "num_kv_shared_layers", false, &shared, where));
  G4_RETURN_IF_ERROR(ReadInt(t, "hidden_size_per_layer_input", false, &c.ple_dim, where));
  G4_RETURN_IF_ERROR(ReadNumber(t, "rms_norm_eps", &c.rms_norm_eps, where));
  G4_RETURN_IF_ERROR(ReadNumber(t, "final_logit_softcapping", &c.softcap, where));
  for (const json* j : {static_cast<const json*>(&outer), &t})
    if (j->contains("tie_word_embeddings") && (*j)["tie_word_embeddings"] == false)
      return Status::Errorf(where, ": tie_word_embeddings=false is not supported (Gemma-4 ties)");
  const bool k_eq_v = ReadFlag(t, "attention_k_eq_v");
  const bool double_wide = ReadFlag(t, "use_double_wide_mlp");
  if (n_layers < 1 || heads < 1 || kv_heads < 1 || c.hidden < 1 || c.vocab < 1)
    return Status::Errorf(where, ": layer, head, hidden and vocab counts must be positive");

  std::vector<bool> full(n_layers);
  if (t.contains("layer_types") && t["layer_types"].is_array()) {
    if (static_cast<int>(t["layer_types"].size()) != n_layers)
      return Status::Errorf(where, ": layer_types has ", t["layer_types"].size(), " entries for ",
                            n_layers, " layers");
    for (int i = 0; i < n_layers; ++i) {
      const json& e = t["layer_types"][i];
      if (e == "full_attention")
        full[i] = true;
      else if (e != "sliding_attention")
        return Status::Errorf(where, ": layer_types[", i, "] = ", e.dump(), " unknown");
    }
  } else {
    // HF's default: every 6th layer full, and the last layer always full.
    for (int i = 0; i < n_layers; ++i) full[i] = (i + 1) % 6 == 0;
    full[n_layers - 1] = true;
  }

  Rope rope_sliding{false, 10000.0, 1.0}, rope_full{true, 1000000.0, 0.25};
  if (t.contains("rope_parameters") && t["rope_parameters"].is_object()) {
    const json& rp = t["rope_parameters"];
    if (rp.contains("sliding_attention"))
      G4_RETURN_IF_ERROR(ReadRope(rp["sliding_attention"], &rope_sliding, where + " rope sliding"));
    if (rp.contains("full_attention"))
      G4_RETURN_IF_ERROR(ReadRope(rp["full_attention"], &rope_full, where + " rope full"));
  }

  // Form B: per_layer_config {"<layer>": {"head_dim": .., "num_key_value_heads": ..}}. When it is
  // present it is the only source of per-layer geometry; the flat globals are form A.
  const bool form_b = t.contains("per_layer_config") && t["per_layer_config"].is_object();
  const int first_shared = n_layers - shared;
  if (shared < 0 || shared >= n_layers)
    return Status::Errorf(where, ": num_kv_shared_layers ", shared, " out of range");
  for (int i = 0; i < n_layers; ++i) {
    LayerFacts f;
    f.sliding = !full[i];
    f.n_heads_q = heads;
    f.k_eq_v = k_eq_v && full[i];
    if (form_b) {
      f.head_dim = head_dim;
      f.n_heads_kv = kv_heads;
      const std::string key = std::to_string(i);
      const json& plc = t["per_layer_config"];
      if (plc.contains(key)) {
        G4_RETURN_IF_ERROR(
            ReadInt(plc[key], "head_dim", false, &f.head_dim, where + " per_layer_config." + key));
        G4_RETURN_IF_ERROR(ReadInt(plc[key], "num_key_value_heads", false, &f.n_heads_kv,
                                   where + " per_layer_config." + key));
      }
    } else {
      f.head_dim = full[i] ? global_head_dim : head_dim;
      // num_global_key_value_heads applies only to K=V full layers (spec §1.2).
      f.n_heads_kv = (f.k_eq_v && global_kv > 0) ? global_kv : kv_heads;
    }
    if (f.head_dim < 2 || f.head_dim % 2 || f.n_heads_kv < 1 || heads % f.n_heads_kv)
      return Status::Errorf(where, ": layer ", i, " has head_dim ", f.head_dim, " and ",
                            f.n_heads_kv, " KV heads for ", heads, " query heads");
    f.window = full[i] ? 0 : window;
    if (f.sliding && window < 1) return Status::Errorf(where, ": sliding_window must be positive");
    const Rope& r = full[i] ? rope_full : rope_sliding;
    f.rope_theta = r.theta;
    // HF proportional: int(partial_rotary_factor * head_dim // 2) rotating pairs.
    f.rope_pairs =
        r.proportional ? static_cast<int>(std::floor(r.partial * f.head_dim / 2)) : f.head_dim / 2;
    const bool is_shared = shared > 0 && i >= first_shared;
    f.kv_source = i;
    if (is_shared) {
      // HF: the last non-shared layer of the same attention type.
      f.kv_source = -1;
      for (int j = first_shared - 1; j >= 0; --j)
        if (full[j] == full[i]) {
          f.kv_source = j;
          break;
        }
      if (f.kv_source < 0)
        return Status::Errorf(where, ": shared layer ", i, " has no non-shared layer of its type");
      const LayerFacts& s = c.layers[f.kv_source];
      if (s.head_dim != f.head_dim || s.n_heads_kv != f.n_heads_kv)
        return Status::Errorf(where, ": shared layer ", i, " and its source ", f.kv_source,
                              " differ in KV geometry");
    }
    f.mlp_width = inter * (double_wide && is_shared ? 2 : 1);
    c.layers.push_back(f);
  }
  return c;
}

Result<ReferenceConfig> ReadReferenceConfig(const std::string& dir) {
  G4_ASSIGN_OR_RETURN(std::string text, ReadFileToString(dir + "/config.json"));
  return ParseReferenceConfig(text, dir + "/config.json");
}

}  // namespace g4::reference
