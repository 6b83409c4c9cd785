#include "reference/reference.h"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <type_traits>

#include "base/half.h"
#include "base/mapped_file.h"
#include "io/safetensors.h"

namespace g4::reference {

using json = nlohmann::json;

namespace {

// ---------------------------------------------------------------------------------------------
// config.json

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

Result<ReferenceConfig> ParseConfig(const std::string& text, const std::string& path) {
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

// ---------------------------------------------------------------------------------------------
// math helpers, all in T

// Four interleaved partial sums: not for accuracy (double has plenty) but because a single
// running sum is latency-bound, and the 262,144-row LM head dominates the run time.
template <class T>
T Dot(const float* w, const T* x, int n) {
  T a0 = 0, a1 = 0, a2 = 0, a3 = 0;
  int i = 0;
  for (; i + 4 <= n; i += 4) {
    a0 += static_cast<T>(w[i]) * x[i];
    a1 += static_cast<T>(w[i + 1]) * x[i + 1];
    a2 += static_cast<T>(w[i + 2]) * x[i + 2];
    a3 += static_cast<T>(w[i + 3]) * x[i + 3];
  }
  for (; i < n; ++i) a0 += static_cast<T>(w[i]) * x[i];
  return (a0 + a1) + (a2 + a3);
}

template <class T>
void MatVec(const std::vector<float>& w, int rows, int cols, const T* x, T* y) {
  for (int r = 0; r < rows; ++r) y[r] = Dot(w.data() + static_cast<size_t>(r) * cols, x, cols);
}

// y = x * (mean(x^2) + eps)^-1/2 * w; w == nullptr for the weightless norm. No (1 + w).
template <class T>
void RmsNorm(T* x, int n, const float* w, double eps) {
  T ss = 0;
  for (int i = 0; i < n; ++i) ss += x[i] * x[i];
  const T inv = T(1) / std::sqrt(ss / static_cast<T>(n) + static_cast<T>(eps));
  for (int i = 0; i < n; ++i) x[i] = x[i] * inv * (w ? static_cast<T>(w[i]) : T(1));
}

template <class T>
T GeluTanh(T x) {
  const T c = static_cast<T>(0.7978845608028654);  // sqrt(2/pi)
  return T(0.5) * x * (T(1) + std::tanh(c * (x + static_cast<T>(0.044715) * x * x * x)));
}

}  // namespace

template <class T>
void ApplyRope(T* x, int head_dim, int rope_pairs, double theta, int pos) {
  const int half = head_dim / 2;
  for (int j = 0; j < rope_pairs && j < half; ++j) {
    const double inv_freq = std::pow(theta, -2.0 * j / head_dim);
    const T angle = static_cast<T>(pos * inv_freq);
    const T c = std::cos(angle), s = std::sin(angle);
    const T a = x[j], b = x[j + half];
    x[j] = a * c - b * s;
    x[j + half] = b * c + a * s;
  }
}
template void ApplyRope<double>(double*, int, int, double, int);
template void ApplyRope<float>(float*, int, int, double, int);

Result<ReferenceConfig> ReadReferenceConfig(const std::string& dir) {
  G4_ASSIGN_OR_RETURN(std::string text, ReadFileToString(dir + "/config.json"));
  return ParseConfig(text, dir + "/config.json");
}

// ---------------------------------------------------------------------------------------------
// weights

struct ReferenceModel::Weights {
  struct Layer {
    std::vector<float> input_norm, post_attn_norm, pre_ff_norm, post_ff_norm;
    std::vector<float> q, q_norm, k, k_norm, v, o;  // k/k_norm/v empty on shared layers
    std::vector<float> gate, up, down;
    std::vector<float> ple_gate, ple_proj, ple_norm;
    double scalar = 1;
  };
  std::unique_ptr<TensorStore> store;  // keeps the mapped PLE table alive
  std::vector<float> embed, final_norm, ple_model_proj, ple_proj_norm;
  const TensorView* ple_table = nullptr;
  double embed_scale = 1, ple_scale = 1;
  std::vector<Layer> layers;
};

ReferenceModel::~ReferenceModel() = default;
double ReferenceModel::embedding_scale() const { return w_->embed_scale; }
double ReferenceModel::ple_scale() const { return w_->ple_scale; }

namespace {

// HF rounds the embedding scale to the weight dtype (embed_scale.to(weight.dtype)); the python
// float becomes an fp32 tensor first.
double ScaleInDType(double value, DType dtype) {
  const float f = static_cast<float>(value);
  switch (dtype) {
    case DType::kBF16:
      return RoundToBf16(f);
    case DType::kF16:
      return RoundToF16(f);
    case DType::kF32:
      return f;
    default:
      return value;
  }
}

class TensorReader {
 public:
  TensorReader(const TensorStore& store, std::string prefix)
      : store_(store), prefix_(std::move(prefix)) {}

  Result<const TensorView*> View(const std::string& name, std::vector<int64_t> shape) const {
    const TensorView* t = store_.Find(prefix_ + name);
    if (!t) return Status::Errorf("checkpoint lacks tensor ", prefix_, name);
    if (t->shape != shape) {
      TensorView want;
      want.shape = shape;
      return Status::Errorf("tensor ", prefix_, name, " has shape ", t->ShapeString(),
                            ", expected ", want.ShapeString());
    }
    if (t->dtype != DType::kBF16 && t->dtype != DType::kF16 && t->dtype != DType::kF32)
      return Status::Errorf("tensor ", prefix_, name, " has dtype ", DTypeName(t->dtype),
                            " (reference reads BF16, F16, F32)");
    return t;
  }

  Status Read(const std::string& name, std::vector<int64_t> shape, std::vector<float>* out) const {
    G4_ASSIGN_OR_RETURN(const TensorView* t, View(name, std::move(shape)));
    out->resize(static_cast<size_t>(t->numel()));
    for (int64_t i = 0; i < t->numel(); ++i) (*out)[i] = static_cast<float>(t->ValueAt(i));
    return OkStatus();
  }

 private:
  const TensorStore& store_;
  std::string prefix_;
};

}  // namespace

Result<std::unique_ptr<ReferenceModel>> ReferenceModel::Load(const std::string& dir,
                                                             const ReferenceOptions& options) {
  auto m = std::unique_ptr<ReferenceModel>(new ReferenceModel());
  m->options_ = options;
  G4_ASSIGN_OR_RETURN(m->config_, ReadReferenceConfig(dir));
  m->w_ = std::make_unique<Weights>();
  Weights& w = *m->w_;
  G4_ASSIGN_OR_RETURN(w.store, TensorStore::OpenDir(dir));
  std::string prefix = "model.";
  for (const std::string& n : w.store->Names())
    if (n.rfind("model.language_model.", 0) == 0) {
      prefix = "model.language_model.";
      break;
    }
  const TensorReader rd(*w.store, prefix);
  const ReferenceConfig& c = m->config_;
  const int64_t H = c.hidden, V = c.vocab, P = c.ple_dim, L = static_cast<int64_t>(c.layers.size());

  G4_RETURN_IF_ERROR(rd.Read("embed_tokens.weight", {V, H}, &w.embed));
  G4_RETURN_IF_ERROR(rd.Read("norm.weight", {H}, &w.final_norm));
  w.embed_scale = ScaleInDType(std::sqrt(static_cast<double>(H)),
                               w.store->Find(prefix + "embed_tokens.weight")->dtype);
  if (P > 0) {
    G4_ASSIGN_OR_RETURN(w.ple_table, rd.View("embed_tokens_per_layer.weight", {V, L * P}));
    w.ple_scale = ScaleInDType(std::sqrt(static_cast<double>(P)), w.ple_table->dtype);
    G4_RETURN_IF_ERROR(rd.Read("per_layer_model_projection.weight", {L * P, H}, &w.ple_model_proj));
    G4_RETURN_IF_ERROR(rd.Read("per_layer_projection_norm.weight", {P}, &w.ple_proj_norm));
  }
  for (int i = 0; i < L; ++i) {
    const LayerFacts& f = c.layers[i];
    Weights::Layer ly;
    const std::string p = "layers." + std::to_string(i) + ".";
    const int64_t hd = f.head_dim, q_dim = int64_t{f.n_heads_q} * hd,
                  kv_dim = int64_t{f.n_heads_kv} * hd, I = f.mlp_width;
    G4_RETURN_IF_ERROR(rd.Read(p + "input_layernorm.weight", {H}, &ly.input_norm));
    G4_RETURN_IF_ERROR(rd.Read(p + "post_attention_layernorm.weight", {H}, &ly.post_attn_norm));
    G4_RETURN_IF_ERROR(rd.Read(p + "pre_feedforward_layernorm.weight", {H}, &ly.pre_ff_norm));
    G4_RETURN_IF_ERROR(rd.Read(p + "post_feedforward_layernorm.weight", {H}, &ly.post_ff_norm));
    G4_RETURN_IF_ERROR(rd.Read(p + "self_attn.q_proj.weight", {q_dim, H}, &ly.q));
    G4_RETURN_IF_ERROR(rd.Read(p + "self_attn.q_norm.weight", {hd}, &ly.q_norm));
    G4_RETURN_IF_ERROR(rd.Read(p + "self_attn.o_proj.weight", {H, q_dim}, &ly.o));
    if (f.kv_source == i) {
      // Shared layers' stored k_proj/v_proj/k_norm are never read (spec §2.3).
      G4_RETURN_IF_ERROR(rd.Read(p + "self_attn.k_proj.weight", {kv_dim, H}, &ly.k));
      G4_RETURN_IF_ERROR(rd.Read(p + "self_attn.k_norm.weight", {hd}, &ly.k_norm));
      if (f.k_eq_v) {
        if (w.store->Find(prefix + p + "self_attn.v_proj.weight"))
          return Status::Errorf("tensor ", prefix, p,
                                "self_attn.v_proj.weight present on a K=V layer (expected none)");
      } else {
        G4_RETURN_IF_ERROR(rd.Read(p + "self_attn.v_proj.weight", {kv_dim, H}, &ly.v));
      }
    }
    G4_RETURN_IF_ERROR(rd.Read(p + "mlp.gate_proj.weight", {I, H}, &ly.gate));
    G4_RETURN_IF_ERROR(rd.Read(p + "mlp.up_proj.weight", {I, H}, &ly.up));
    G4_RETURN_IF_ERROR(rd.Read(p + "mlp.down_proj.weight", {H, I}, &ly.down));
    if (P > 0) {
      G4_RETURN_IF_ERROR(rd.Read(p + "per_layer_input_gate.weight", {P, H}, &ly.ple_gate));
      G4_RETURN_IF_ERROR(rd.Read(p + "per_layer_projection.weight", {H, P}, &ly.ple_proj));
      G4_RETURN_IF_ERROR(rd.Read(p + "post_per_layer_input_norm.weight", {H}, &ly.ple_norm));
    }
    std::vector<float> scalar;
    G4_RETURN_IF_ERROR(rd.Read(p + "layer_scalar", {1}, &scalar));
    ly.scalar = scalar[0];
    w.layers.push_back(std::move(ly));
  }
  return m;
}

// ---------------------------------------------------------------------------------------------
// forward

template <class T>
Status ReferenceModel::Forward(const std::vector<int>& ids, const ReferenceHooks* hooks,
                               bool last_only, std::vector<std::vector<double>>* logits) const {
  const ReferenceConfig& c = config_;
  const Weights& w = *w_;
  const int n = static_cast<int>(ids.size()), H = c.hidden, P = c.ple_dim,
            L = static_cast<int>(c.layers.size());
  const double eps = c.rms_norm_eps;
  if (!std::is_same_v<T, double>) hooks = nullptr;
  for (int id : ids)
    if (id < 0 || id >= c.vocab)
      return Status::Errorf("token id ", id, " outside [0, ", c.vocab, ")");

  // §3.1: scaled embedding.
  std::vector<std::vector<T>> x(n, std::vector<T>(H));
  for (int t = 0; t < n; ++t)
    for (int i = 0; i < H; ++i)
      x[t][i] = static_cast<T>(w.embed[static_cast<size_t>(ids[t]) * H + i]) *
                static_cast<T>(w.embed_scale);

  // §3.2: per-layer inputs [L*P] per position.
  std::vector<std::vector<T>> ple(n);
  if (P > 0) {
    const T ctx_scale = static_cast<T>(1.0 / std::sqrt(static_cast<double>(H)));
    const T mix_scale = static_cast<T>(1.0 / std::sqrt(2.0));
    for (int t = 0; t < n; ++t) {
      std::vector<T> ctx(static_cast<size_t>(L) * P);
      MatVec(w.ple_model_proj, L * P, H, x[t].data(), ctx.data());  // from the SCALED embedding
      ple[t].resize(ctx.size());
      for (int l = 0; l < L; ++l) {
        T* slice = ctx.data() + static_cast<size_t>(l) * P;
        for (int k = 0; k < P; ++k) slice[k] *= ctx_scale;
        RmsNorm(slice, P, w.ple_proj_norm.data(), eps);
      }
      const int64_t row = static_cast<int64_t>(ids[t]) * L * P;
      for (int k = 0; k < L * P; ++k) {
        const T tok = static_cast<T>(w.ple_table->ValueAt(row + k)) * static_cast<T>(w.ple_scale);
        ple[t][k] = (ctx[k] + tok) * mix_scale;
      }
    }
  }

  // K/V per owner layer, [pos][kv_heads * head_dim], after norm (+RoPE for K).
  std::vector<std::vector<std::vector<T>>> K(L), Vc(L);
  for (int l = 0; l < L; ++l) {
    const LayerFacts& f = c.layers[l];
    const Weights::Layer& ly = w.layers[l];
    const int hd = f.head_dim, nq = f.n_heads_q, nkv = f.n_heads_kv;
    const int q_dim = nq * hd, kv_dim = nkv * hd, I = f.mlp_width;

    std::vector<std::vector<T>> a(n, std::vector<T>(H)), q(n, std::vector<T>(q_dim));
    for (int t = 0; t < n; ++t) {
      a[t] = x[t];
      RmsNorm(a[t].data(), H, ly.input_norm.data(), eps);
      MatVec(ly.q, q_dim, H, a[t].data(), q[t].data());
      for (int h = 0; h < nq; ++h) {
        RmsNorm(q[t].data() + h * hd, hd, ly.q_norm.data(), eps);
        ApplyRope(q[t].data() + h * hd, hd, f.rope_pairs, f.rope_theta, t);
      }
    }
    if (f.kv_source == l) {
      K[l].assign(n, std::vector<T>(kv_dim));
      Vc[l].assign(n, std::vector<T>(kv_dim));
      for (int t = 0; t < n; ++t) {
        std::vector<T> k_raw(kv_dim), v_raw(kv_dim);
        MatVec(ly.k, kv_dim, H, a[t].data(), k_raw.data());
        // §5: on K=V layers V is the RAW k_proj output, normed separately below.
        if (f.k_eq_v)
          v_raw = k_raw;
        else
          MatVec(ly.v, kv_dim, H, a[t].data(), v_raw.data());
        std::vector<T>& k = K[l][t];
        std::vector<T>& v = Vc[l][t];
        k = k_raw;
        v = v_raw;
        for (int g = 0; g < nkv; ++g) {
          RmsNorm(k.data() + g * hd, hd, ly.k_norm.data(), eps);
          ApplyRope(k.data() + g * hd, hd, f.rope_pairs, f.rope_theta, t);
          RmsNorm(v.data() + g * hd, hd, static_cast<const float*>(nullptr),
                  eps);  // no weight, no RoPE
        }
        if constexpr (std::is_same_v<T, double>) {
          if (hooks && hooks->on_kv) hooks->on_kv(l, t, k_raw, k, v);
        }
      }
    }
    // §4: shared layers read the K/V of their source layer.
    const auto& Ks = K[f.kv_source];
    const auto& Vs = Vc[f.kv_source];
    const int group = nq / nkv;
    for (int t = 0; t < n; ++t) {
      std::vector<T> attn(q_dim, T(0));
      for (int h = 0; h < nq; ++h) {
        const int g = h / group;  // GQA: query heads g*group .. g*group+group-1 share KV head g
        const T* qh = q[t].data() + h * hd;
        // Visible keys: j <= t, and on sliding layers t - j < window (spec §3.3.5).
        const int j0 = f.sliding ? std::max(0, t - f.window + 1) : 0;
        std::vector<T> s(t - j0 + 1);
        T mx = -INFINITY;
        for (int j = j0; j <= t; ++j) {
          const T* kj = Ks[j].data() + g * hd;
          T dot = 0;
          for (int d = 0; d < hd; ++d) dot += qh[d] * kj[d];
          s[j - j0] = dot;  // attention scale 1.0: no 1/sqrt(hd)
          mx = std::max(mx, dot);
        }
        T sum = 0;
        for (T& e : s) sum += (e = std::exp(e - mx));
        T* oh = attn.data() + h * hd;
        for (int j = j0; j <= t; ++j) {
          const T pr = s[j - j0] / sum;
          const T* vj = Vs[j].data() + g * hd;
          for (int d = 0; d < hd; ++d) oh[d] += pr * vj[d];
        }
      }
      if constexpr (std::is_same_v<T, double>) {
        if (hooks && hooks->on_attention) hooks->on_attention(l, t, attn);
      }
      std::vector<T> y(H);
      MatVec(ly.o, H, q_dim, attn.data(), y.data());
      RmsNorm(y.data(), H, ly.post_attn_norm.data(), eps);
      for (int i = 0; i < H; ++i) x[t][i] += y[i];

      // Feed-forward: GELU-tanh gated MLP.
      std::vector<T> m = x[t], gate(I), up(I), down(H);
      RmsNorm(m.data(), H, ly.pre_ff_norm.data(), eps);
      MatVec(ly.gate, I, H, m.data(), gate.data());
      MatVec(ly.up, I, H, m.data(), up.data());
      for (int k = 0; k < I; ++k) gate[k] = GeluTanh(gate[k]) * up[k];
      MatVec(ly.down, H, I, gate.data(), down.data());
      RmsNorm(down.data(), H, ly.post_ff_norm.data(), eps);
      for (int i = 0; i < H; ++i) x[t][i] += down[i];

      // Per-layer-input block, after the FFN residual.
      if (P > 0) {
        std::vector<T> g(P), z(H);
        MatVec(ly.ple_gate, P, H, x[t].data(), g.data());
        for (int k = 0; k < P; ++k) g[k] = GeluTanh(g[k]) * ple[t][static_cast<size_t>(l) * P + k];
        MatVec(ly.ple_proj, H, P, g.data(), z.data());
        RmsNorm(z.data(), H, ly.ple_norm.data(), eps);
        for (int i = 0; i < H; ++i) x[t][i] += z[i];
      }
      // layer_scalar scales the whole residual stream, last thing in the layer.
      if (!options_.ignore_layer_scalar)
        for (int i = 0; i < H; ++i) x[t][i] *= static_cast<T>(ly.scalar);
    }
  }

  // §3.4: final norm, tied LM head, softcap.
  logits->clear();
  const T cap = static_cast<T>(c.softcap);
  for (int t = last_only ? n - 1 : 0; t < n; ++t) {
    std::vector<T> h = x[t];
    RmsNorm(h.data(), H, w.final_norm.data(), eps);
    std::vector<double> out(c.vocab);
    for (int v = 0; v < c.vocab; ++v) {
      T acc = Dot(w.embed.data() + static_cast<size_t>(v) * H, h.data(), H);
      if (c.softcap > 0) acc = cap * std::tanh(acc / cap);
      out[v] = static_cast<double>(acc);
    }
    logits->push_back(std::move(out));
  }
  return OkStatus();
}

template <class T>
Result<std::vector<std::vector<double>>> ReferenceModel::Logits(const std::vector<int>& ids,
                                                                const ReferenceHooks* hooks) const {
  if (ids.empty()) return Status::Errorf("reference: empty input");
  std::vector<std::vector<double>> logits;
  G4_RETURN_IF_ERROR(Forward<T>(ids, hooks, /*last_only=*/false, &logits));
  return logits;
}
template Result<std::vector<std::vector<double>>> ReferenceModel::Logits<double>(
    const std::vector<int>&, const ReferenceHooks*) const;
template Result<std::vector<std::vector<double>>> ReferenceModel::Logits<float>(
    const std::vector<int>&, const ReferenceHooks*) const;

Result<std::vector<ReferenceModel::GreedyStep>> ReferenceModel::GreedyTrace(
    const std::vector<int>& prompt, int n_new) const {
  if (prompt.empty()) return Status::Errorf("reference: empty prompt");
  std::vector<int> ids = prompt;
  std::vector<GreedyStep> steps;
  for (int s = 0; s < n_new; ++s) {
    std::vector<std::vector<double>> logits;
    G4_RETURN_IF_ERROR(Forward<double>(ids, nullptr, /*last_only=*/true, &logits));
    const std::vector<double>& l = logits.back();
    GreedyStep step;
    step.top1 = step.top2 = -INFINITY;
    for (int v = 0; v < static_cast<int>(l.size()); ++v) {
      if (l[v] > step.top1) {  // first index wins ties
        step.top2 = step.top1;
        step.top1 = l[v];
        step.token = v;
      } else if (l[v] > step.top2) {
        step.top2 = l[v];
      }
    }
    steps.push_back(step);
    ids.push_back(step.token);
  }
  return steps;
}

Result<std::vector<int>> ReferenceModel::Greedy(const std::vector<int>& prompt, int n_new) const {
  G4_ASSIGN_OR_RETURN(std::vector<GreedyStep> steps, GreedyTrace(prompt, n_new));
  std::vector<int> out;
  for (const auto& s : steps) out.push_back(s.token);
  return out;
}

}  // namespace g4::reference
