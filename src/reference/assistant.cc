#include "reference/assistant.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>

#include "base/mapped_file.h"
#include "io/safetensors.h"

namespace g4::reference {

using json = nlohmann::json;

struct ReferenceAssistant::Impl {
  int hb = 0, ha = 0, vocab = 0, mlp = 0;
  double eps = 1e-6;
  bool centroid = false;
  int n_centroids = 0, top_k = 0;
  ReferenceConfig own;       // the inner text config's layer facts (geometry, RoPE)
  std::vector<int> sources;  // target layer per assistant layer
  std::unique_ptr<TensorStore> store;
  std::vector<int64_t> ordering;
  const TensorView* Get(const std::string& name) const { return store->Find(name); }
};

ReferenceAssistant::~ReferenceAssistant() = default;
int ReferenceAssistant::vocab() const { return impl_->vocab; }
std::vector<int> ReferenceAssistant::source_layers() const { return impl_->sources; }

ReferenceHooks TargetState::Capture() {
  ReferenceHooks hooks;
  hooks.on_kv = [this](int layer, int pos, const std::vector<double>&, std::vector<double>& k,
                       std::vector<double>& v) {
    auto& ks = this->k[layer];
    auto& vs = this->v[layer];
    if (static_cast<int>(ks.size()) <= pos) ks.resize(pos + 1), vs.resize(pos + 1);
    ks[pos] = k;
    vs[pos] = v;
  };
  hooks.on_final_hidden = [this](int pos, const std::vector<double>& h) { hidden[pos] = h; };
  return hooks;
}

Result<std::unique_ptr<ReferenceAssistant>> ReferenceAssistant::Load(const std::string& dir,
                                                                     const ReferenceModel& target) {
  const std::string path = dir + "/config.json";
  G4_ASSIGN_OR_RETURN(std::string text, ReadFileToString(path));
  json c = json::parse(text, nullptr, false);
  if (c.is_discarded() || !c.is_object() || !c.contains("text_config") ||
      !c["text_config"].is_object() || !c.contains("backbone_hidden_size"))
    return Status::Errorf(path, ": not an assistant config");
  auto a = std::unique_ptr<ReferenceAssistant>(new ReferenceAssistant());
  a->impl_ = std::make_unique<Impl>();
  a->target_ = &target;
  Impl& m = *a->impl_;
  m.hb = c["backbone_hidden_size"].get<int>();
  m.centroid = c.value("use_ordered_embeddings", false);
  m.n_centroids = c.value("num_centroids", 2048);
  m.top_k = c.value("centroid_intermediate_top_k", 32);
  // Every layer reads the target: parse the inner config as an unshared text decoder.
  json t = c["text_config"];
  t["model_type"] = "gemma4_text";
  t["num_kv_shared_layers"] = 0;
  G4_ASSIGN_OR_RETURN(m.own, ParseReferenceConfig(t.dump(), path + " text_config"));
  m.ha = m.own.hidden;
  m.vocab = m.own.vocab;
  m.eps = m.own.rms_norm_eps;
  m.mlp = t["intermediate_size"].get<int>();
  if (m.hb != target.config().hidden || m.vocab != target.config().vocab)
    return Status::Errorf(path, ": does not fit the reference target");
  const auto& tl = target.layers();
  for (const LayerFacts& f : m.own.layers) {
    int src = -1;
    for (int j = static_cast<int>(tl.size()) - 1; j >= 0 && src < 0; --j)
      if (tl[j].kv_source == j && tl[j].sliding == f.sliding) src = j;
    if (src < 0 || tl[src].head_dim != f.head_dim || tl[src].n_heads_kv != f.n_heads_kv)
      return Status::Errorf(path, ": no target layer with this layer's K/V geometry");
    m.sources.push_back(src);
  }
  G4_ASSIGN_OR_RETURN(m.store, TensorStore::OpenDir(dir));
  if (m.centroid) {
    const TensorView* o = m.Get("masked_embedding.token_ordering");
    if (!o || o->dtype != DType::kI64 || o->numel() != m.vocab)
      return Status::Errorf(dir, ": bad masked_embedding.token_ordering");
    m.ordering.resize(m.vocab);
    std::memcpy(m.ordering.data(), o->data, 8 * static_cast<size_t>(m.vocab));
  }
  return a;
}

namespace {

// y = W x for a [rows, cols] tensor read element by element (ValueAt widens exactly).
template <class T>
std::vector<T> MatVec(const TensorView* w, const std::vector<T>& x) {
  const int64_t rows = w->shape[0], cols = w->shape[1];
  std::vector<T> y(rows);
  for (int64_t r = 0; r < rows; ++r) {
    T s = 0;
    for (int64_t i = 0; i < cols; ++i) s += static_cast<T>(w->ValueAt(r * cols + i)) * x[i];
    y[r] = s;
  }
  return y;
}

template <class T>
void Norm(T* x, int n, const TensorView* w, double eps) {
  T ss = 0;
  for (int i = 0; i < n; ++i) ss += x[i] * x[i];
  const T inv = T(1) / std::sqrt(ss / static_cast<T>(n) + static_cast<T>(eps));
  for (int i = 0; i < n; ++i) x[i] = x[i] * inv * static_cast<T>(w->ValueAt(i));
}

}  // namespace

template <class T>
Result<std::vector<double>> ReferenceAssistant::Step(const TargetState& state, int token, int pos,
                                                     const std::vector<double>& h,
                                                     std::vector<double>* h_next) const {
  const Impl& m = *impl_;
  auto get = [&](const std::string& name) -> const TensorView* { return m.Get(name); };
  // [target embedding x its scale, h] -> pre_projection.
  std::vector<T> in;
  for (double e : target_->ScaledEmbedding(token)) in.push_back(static_cast<T>(e));
  for (double e : h) in.push_back(static_cast<T>(e));
  std::vector<T> x = MatVec(get("pre_projection.weight"), in);
  for (size_t l = 0; l < m.own.layers.size(); ++l) {
    const LayerFacts& f = m.own.layers[l];
    const std::string p = "model.layers." + std::to_string(l) + ".";
    const int hd = f.head_dim, nq = f.n_heads_q, group = f.n_heads_q / f.n_heads_kv;
    std::vector<T> a = x;
    Norm(a.data(), m.ha, get(p + "input_layernorm.weight"), m.eps);
    std::vector<T> q = MatVec(get(p + "self_attn.q_proj.weight"), a);
    const auto& ks = state.k.at(m.sources[l]);
    const auto& vs = state.v.at(m.sources[l]);
    if (static_cast<int>(ks.size()) < pos) return Status::Errorf("reference assistant: no K/V");
    // Visible: positions < pos; sliding also pos - j < W, i.e. j >= pos - W + 1.
    const int lo = f.sliding ? std::max(0, pos - f.window + 1) : 0;
    std::vector<T> attn(static_cast<size_t>(nq) * hd, T(0));
    for (int hh = 0; hh < nq; ++hh) {
      T* qh = q.data() + static_cast<size_t>(hh) * hd;
      Norm(qh, hd, get(p + "self_attn.q_norm.weight"), m.eps);
      ApplyRope(qh, hd, f.rope_pairs, f.rope_theta, pos);
      const int kvh = hh / group;
      std::vector<T> s;
      T mx = -std::numeric_limits<T>::infinity();
      for (int j = lo; j < pos; ++j) {
        T d = 0;
        for (int i = 0; i < hd; ++i) d += qh[i] * static_cast<T>(ks[j][kvh * hd + i]);
        s.push_back(d);
        mx = std::max(mx, d);
      }
      T sum = 0;
      for (T& e : s) sum += (e = std::exp(e - mx));
      for (int j = lo; j < pos; ++j)
        for (int i = 0; i < hd; ++i)
          attn[static_cast<size_t>(hh) * hd + i] += s[j - lo] / sum * static_cast<T>(vs[j][kvh * hd + i]);
    }
    std::vector<T> o = MatVec(get(p + "self_attn.o_proj.weight"), attn);
    Norm(o.data(), m.ha, get(p + "post_attention_layernorm.weight"), m.eps);
    for (int i = 0; i < m.ha; ++i) x[i] += o[i];
    std::vector<T> fin = x;
    Norm(fin.data(), m.ha, get(p + "pre_feedforward_layernorm.weight"), m.eps);
    std::vector<T> g = MatVec(get(p + "mlp.gate_proj.weight"), fin);
    const std::vector<T> u = MatVec(get(p + "mlp.up_proj.weight"), fin);
    const T c = static_cast<T>(0.7978845608028654);
    for (int i = 0; i < m.mlp; ++i)
      g[i] = T(0.5) * g[i] * (T(1) + std::tanh(c * (g[i] + T(0.044715) * g[i] * g[i] * g[i]))) * u[i];
    std::vector<T> d = MatVec(get(p + "mlp.down_proj.weight"), g);
    Norm(d.data(), m.ha, get(p + "post_feedforward_layernorm.weight"), m.eps);
    const T scalar = static_cast<T>(get(p + "layer_scalar")->ValueAt(0));
    for (int i = 0; i < m.ha; ++i) x[i] = (x[i] + d[i]) * scalar;
  }
  Norm(x.data(), m.ha, get("model.norm.weight"), m.eps);
  const std::vector<T> hn = MatVec(get("post_projection.weight"), x);
  h_next->assign(hn.begin(), hn.end());
  const TensorView* embed = get("model.embed_tokens.weight");
  std::vector<double> logits(m.vocab);
  auto score = [&](int64_t id) {
    T s = 0;
    for (int i = 0; i < m.ha; ++i) s += static_cast<T>(embed->ValueAt(id * m.ha + i)) * x[i];
    return static_cast<double>(s);
  };
  if (!m.centroid) {
    for (int id = 0; id < m.vocab; ++id) logits[id] = score(id);
    return logits;
  }
  // Centroid head: the top_k clusters by centroid score (ties: lower index), their ids scored.
  const std::vector<T> cs = MatVec(get("masked_embedding.centroids.weight"), x);
  std::vector<int> order(m.n_centroids);
  for (int i = 0; i < m.n_centroids; ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return cs[a] > cs[b]; });
  const int size = m.vocab / m.n_centroids;
  double lowest = std::numeric_limits<double>::infinity();
  std::vector<std::pair<int64_t, double>> scored;
  for (int r = 0; r < m.top_k; ++r)
    for (int j = 0; j < size; ++j) {
      const int64_t id = m.ordering[static_cast<size_t>(order[r]) * size + j];
      scored.push_back({id, score(id)});
      lowest = std::min(lowest, scored.back().second);
    }
  std::fill(logits.begin(), logits.end(), lowest - 1);
  for (const auto& [id, s] : scored) logits[id] = s;
  return logits;
}

template Result<std::vector<double>> ReferenceAssistant::Step<double>(
    const TargetState&, int, int, const std::vector<double>&, std::vector<double>*) const;
template Result<std::vector<double>> ReferenceAssistant::Step<float>(
    const TargetState&, int, int, const std::vector<double>&, std::vector<double>*) const;

}  // namespace g4::reference
