#include "reference/reference.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "base/half.h"
#include "base/mapped_file.h"
#include "io/safetensors.h"
#include "reference/row_products.h"

namespace g4::reference {

namespace {

// ---------------------------------------------------------------------------------------------
// math helpers, all in T

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

// A weight matrix as the reference reads it: the checkpoint's rows, or the rows a caller put in
// their place (ReferenceOptions::replace_rows).
struct Matrix {
  const TensorView* stored = nullptr;
  RowReader replaced;
};

// Rows [first, first + rows) of `m` widened to T. Replaced rows come as floats and widen exactly.
template <class T>
void Widen(const Matrix& m, int64_t first, int rows, int cols, T* out) {
  if (!m.replaced) return WidenRows(*m.stored, first, rows, cols, out);
  thread_local std::vector<float> floats;
  floats.resize(static_cast<size_t>(rows) * cols);
  m.replaced(first, rows, floats.data());
  for (size_t i = 0; i < floats.size(); ++i) out[i] = static_cast<T>(floats[i]);
}

// For each row r of the [rows, cols] weight `w` and each of the n inputs x[t] (rows of X, n x
// cols): emit(t, r, w[r] . x[t]). Rows are split over the pool in blocks; each thread widens one
// block into its own buffer and dots it with every input, so a block is widened once however many
// inputs there are.
template <class T, class Emit>
void ForEachRowDot(ThreadPool& pool, const Matrix& w, int rows, int cols, const T* X, int n,
                   const Emit& emit) {
  constexpr int kBlock = 16;
  // The weights are read once, front to back: on a checkpoint larger than the page cache, ask
  // for all of them now rather than one read-ahead window per page fault.
  if (!w.replaced)
    MappedFile::AdviseWillNeed(w.stored->data, static_cast<size_t>(rows) * cols * DTypeSize(w.stored->dtype));
  std::vector<std::vector<T>> scratch(pool.size());
  pool.ParallelFor((rows + kBlock - 1) / kBlock, [&](int64_t task, int thread) {
    std::vector<T>& block = scratch[thread];
    block.resize(static_cast<size_t>(kBlock) * cols);
    const int r0 = static_cast<int>(task) * kBlock;
    const int count = std::min(rows - r0, kBlock);
    Widen(w, r0, count, cols, block.data());
    T dots[kBlock];
    for (int t = 0; t < n; ++t) {
      DotRows(block.data(), count, cols, X + static_cast<size_t>(t) * cols, dots);
      for (int j = 0; j < count; ++j) emit(t, r0 + j, dots[j]);
    }
  });
}

// Y (n x rows) = X (n x cols) times w^T.
template <class T>
void MatMul(ThreadPool& pool, const Matrix& w, int rows, int cols, const T* X, int n, T* Y) {
  ForEachRowDot(pool, w, rows, cols, X, n,
                [&](int t, int r, T value) { Y[static_cast<size_t>(t) * rows + r] = value; });
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

// ---------------------------------------------------------------------------------------------
// weights: views into the mapped checkpoint; only the norm vectors are copied (as float, exact)

struct ReferenceModel::Weights {
  struct Layer {
    std::vector<float> input_norm, post_attn_norm, pre_ff_norm, post_ff_norm, q_norm, k_norm;
    Matrix q, k, v, o;  // k/v unset if shared
    Matrix gate, up, down;
    Matrix ple_gate, ple_proj;
    std::vector<float> ple_norm;
    double scalar = 1;
  };
  std::unique_ptr<TensorStore> store;  // the mapping every view points into
  Matrix embed, ple_model_proj;
  const TensorView* ple_table = nullptr;  // never replaced: the engine keeps it as stored
  std::vector<float> final_norm, ple_proj_norm;
  double embed_scale = 1, ple_scale = 1;
  std::vector<Layer> layers;
};

// K/V of every KV-owner layer for positions [0, n_past), [pos][kv_heads * head_dim], after norm
// (+RoPE for K).
template <class T>
struct ReferenceModel::Cache {
  std::vector<std::vector<T>> k, v;
  int n_past = 0;
};

ReferenceModel::~ReferenceModel() = default;
double ReferenceModel::embedding_scale() const { return w_->embed_scale; }

std::vector<double> ReferenceModel::ScaledEmbedding(int token) const {
  std::vector<double> row(config_.hidden);
  Widen(w_->embed, token, 1, config_.hidden, row.data());
  for (double& x : row) x *= w_->embed_scale;
  return row;
}
double ReferenceModel::ple_scale() const { return w_->ple_scale; }
int ReferenceModel::threads() const { return pool_->size(); }

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
  TensorReader(const TensorStore& store, std::string prefix, const ReferenceOptions& options)
      : store_(store), prefix_(std::move(prefix)), options_(options) {}

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

  // A weight matrix: the checkpoint's view (checked as above), and the caller's rows in its place
  // when options.replace_rows has them.
  Result<Matrix> Weight(const std::string& name, std::vector<int64_t> shape) const {
    Matrix m;
    G4_ASSIGN_OR_RETURN(m.stored, View(name, std::move(shape)));
    if (options_.replace_rows) m.replaced = options_.replace_rows(name);
    return m;
  }

  // Small vectors only (norms, the layer scalar): copied as float.
  Status Read(const std::string& name, std::vector<int64_t> shape, std::vector<float>* out) const {
    G4_ASSIGN_OR_RETURN(const TensorView* t, View(name, std::move(shape)));
    out->resize(static_cast<size_t>(t->numel()));
    for (int64_t i = 0; i < t->numel(); ++i) (*out)[i] = static_cast<float>(t->ValueAt(i));
    return OkStatus();
  }

 private:
  const TensorStore& store_;
  std::string prefix_;
  const ReferenceOptions& options_;
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
  const TensorReader rd(*w.store, prefix, options);
  const ReferenceConfig& c = m->config_;
  const int64_t H = c.hidden, V = c.vocab, P = c.ple_dim, L = static_cast<int64_t>(c.layers.size());

  G4_ASSIGN_OR_RETURN(w.embed, rd.Weight("embed_tokens.weight", {V, H}));
  G4_RETURN_IF_ERROR(rd.Read("norm.weight", {H}, &w.final_norm));
  w.embed_scale = ScaleInDType(std::sqrt(static_cast<double>(H)), w.embed.stored->dtype);
  if (P > 0) {
    G4_ASSIGN_OR_RETURN(w.ple_table, rd.View("embed_tokens_per_layer.weight", {V, L * P}));
    w.ple_scale = ScaleInDType(std::sqrt(static_cast<double>(P)), w.ple_table->dtype);
    G4_ASSIGN_OR_RETURN(w.ple_model_proj, rd.Weight("per_layer_model_projection.weight", {L * P, H}));
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
    G4_ASSIGN_OR_RETURN(ly.q, rd.Weight(p + "self_attn.q_proj.weight", {q_dim, H}));
    G4_RETURN_IF_ERROR(rd.Read(p + "self_attn.q_norm.weight", {hd}, &ly.q_norm));
    G4_ASSIGN_OR_RETURN(ly.o, rd.Weight(p + "self_attn.o_proj.weight", {H, q_dim}));
    if (f.kv_source == i) {
      // Shared layers' stored k_proj/v_proj/k_norm are never read (spec §2.3).
      G4_ASSIGN_OR_RETURN(ly.k, rd.Weight(p + "self_attn.k_proj.weight", {kv_dim, H}));
      G4_RETURN_IF_ERROR(rd.Read(p + "self_attn.k_norm.weight", {hd}, &ly.k_norm));
      if (f.k_eq_v) {
        if (w.store->Find(prefix + p + "self_attn.v_proj.weight"))
          return Status::Errorf("tensor ", prefix, p,
                                "self_attn.v_proj.weight present on a K=V layer (expected none)");
      } else {
        G4_ASSIGN_OR_RETURN(ly.v, rd.Weight(p + "self_attn.v_proj.weight", {kv_dim, H}));
      }
    }
    G4_ASSIGN_OR_RETURN(ly.gate, rd.Weight(p + "mlp.gate_proj.weight", {I, H}));
    G4_ASSIGN_OR_RETURN(ly.up, rd.Weight(p + "mlp.up_proj.weight", {I, H}));
    G4_ASSIGN_OR_RETURN(ly.down, rd.Weight(p + "mlp.down_proj.weight", {H, I}));
    if (P > 0) {
      G4_ASSIGN_OR_RETURN(ly.ple_gate, rd.Weight(p + "per_layer_input_gate.weight", {P, H}));
      G4_ASSIGN_OR_RETURN(ly.ple_proj, rd.Weight(p + "per_layer_projection.weight", {H, P}));
      G4_RETURN_IF_ERROR(rd.Read(p + "post_per_layer_input_norm.weight", {H}, &ly.ple_norm));
    }
    std::vector<float> scalar;
    G4_RETURN_IF_ERROR(rd.Read(p + "layer_scalar", {1}, &scalar));
    ly.scalar = scalar[0];
    w.layers.push_back(std::move(ly));
  }
  m->pool_ = std::make_unique<ThreadPool>(options.threads);
  return m;
}

// ---------------------------------------------------------------------------------------------
// forward

template <class T>
Status ReferenceModel::Forward(Cache<T>& cache, const int* ids, int n, const ReferenceHooks* hooks,
                               LogitRows rows, std::vector<std::vector<double>>* logits) const {
  const ReferenceConfig& c = config_;
  const Weights& w = *w_;
  ThreadPool& pool = *pool_;
  const int H = c.hidden, P = c.ple_dim, L = static_cast<int>(c.layers.size()),
            p0 = cache.n_past;
  const size_t LP = static_cast<size_t>(L) * P;
  const double eps = c.rms_norm_eps;
  if (!std::is_same_v<T, double>) hooks = nullptr;
  for (int t = 0; t < n; ++t)
    if (ids[t] < 0 || ids[t] >= c.vocab)
      return Status::Errorf("token id ", ids[t], " outside [0, ", c.vocab, ")");
  if (cache.k.empty()) cache.k.resize(L), cache.v.resize(L);

  // §3.1: scaled embedding, one table row per token. x is [n][H].
  std::vector<T> x(static_cast<size_t>(n) * H);
  for (int t = 0; t < n; ++t) {
    T* xt = x.data() + static_cast<size_t>(t) * H;
    Widen(w.embed, ids[t], 1, H, xt);
    for (int i = 0; i < H; ++i) xt[i] *= static_cast<T>(w.embed_scale);
  }

  // §3.2: per-layer inputs [n][L*P], from the SCALED embedding.
  std::vector<T> ple;
  if (P > 0) {
    const T ctx_scale = static_cast<T>(1.0 / std::sqrt(static_cast<double>(H)));
    const T mix_scale = static_cast<T>(1.0 / std::sqrt(2.0));
    ple.resize(n * LP);
    MatMul(pool, w.ple_model_proj, L * P, H, x.data(), n, ple.data());
    std::vector<T> tok(LP);
    for (int t = 0; t < n; ++t) {
      T* ctx = ple.data() + t * LP;
      for (int l = 0; l < L; ++l) {
        T* slice = ctx + static_cast<size_t>(l) * P;
        for (int k = 0; k < P; ++k) slice[k] *= ctx_scale;
        RmsNorm(slice, P, w.ple_proj_norm.data(), eps);
      }
      WidenRows(*w.ple_table, ids[t], 1, static_cast<int>(LP), tok.data());
      for (size_t k = 0; k < LP; ++k)
        ctx[k] = (ctx[k] + tok[k] * static_cast<T>(w.ple_scale)) * mix_scale;
    }
  }

  std::vector<T> a, q, attn, y, m, gate, up, g, z;
  for (int l = 0; l < L; ++l) {
    const LayerFacts& f = c.layers[l];
    const Weights::Layer& ly = w.layers[l];
    const int hd = f.head_dim, nq = f.n_heads_q, nkv = f.n_heads_kv;
    const int q_dim = nq * hd, kv_dim = nkv * hd, I = f.mlp_width;

    a = x;
    for (int t = 0; t < n; ++t) RmsNorm(a.data() + static_cast<size_t>(t) * H, H, ly.input_norm.data(), eps);
    q.resize(static_cast<size_t>(n) * q_dim);
    MatMul(pool, ly.q, q_dim, H, a.data(), n, q.data());
    for (int t = 0; t < n; ++t)
      for (int h = 0; h < nq; ++h) {
        T* qh = q.data() + static_cast<size_t>(t) * q_dim + h * hd;
        RmsNorm(qh, hd, ly.q_norm.data(), eps);
        ApplyRope(qh, hd, f.rope_pairs, f.rope_theta, p0 + t);
      }
    if (f.kv_source == l) {
      std::vector<T> k_raw(static_cast<size_t>(n) * kv_dim), v_raw;
      MatMul(pool, ly.k, kv_dim, H, a.data(), n, k_raw.data());
      // §5: on K=V layers V is the RAW k_proj output, normed separately below.
      if (f.k_eq_v) {
        v_raw = k_raw;
      } else {
        v_raw.resize(k_raw.size());
        MatMul(pool, ly.v, kv_dim, H, a.data(), n, v_raw.data());
      }
      std::vector<T>& K = cache.k[l];
      std::vector<T>& V = cache.v[l];
      for (int t = 0; t < n; ++t) {
        const size_t off = static_cast<size_t>(t) * kv_dim;
        std::vector<T> k(k_raw.begin() + off, k_raw.begin() + off + kv_dim);
        std::vector<T> v(v_raw.begin() + off, v_raw.begin() + off + kv_dim);
        for (int gh = 0; gh < nkv; ++gh) {
          RmsNorm(k.data() + gh * hd, hd, ly.k_norm.data(), eps);
          ApplyRope(k.data() + gh * hd, hd, f.rope_pairs, f.rope_theta, p0 + t);
          RmsNorm(v.data() + gh * hd, hd, static_cast<const float*>(nullptr), eps);  // no weight, no RoPE
        }
        if constexpr (std::is_same_v<T, double>) {
          if (hooks && hooks->on_kv) {
            const std::vector<double> raw(k_raw.begin() + off, k_raw.begin() + off + kv_dim);
            hooks->on_kv(l, p0 + t, raw, k, v);
          }
        }
        K.insert(K.end(), k.begin(), k.end());
        V.insert(V.end(), v.begin(), v.end());
      }
    }
    // §4: shared layers read the K/V of their source layer (already holding this chunk).
    const T* Ks = cache.k[f.kv_source].data();
    const T* Vs = cache.v[f.kv_source].data();
    const int group = nq / nkv;
    attn.assign(static_cast<size_t>(n) * q_dim, T(0));
    pool.ParallelFor(int64_t{n} * nq, [&](int64_t task, int) {
      const int t = static_cast<int>(task / nq), h = static_cast<int>(task % nq), pos = p0 + t;
      const int gh = h / group;  // GQA: query heads gh*group .. gh*group+group-1 share KV head gh
      const T* qh = q.data() + static_cast<size_t>(t) * q_dim + h * hd;
      // Visible keys: j <= pos, and on sliding layers pos - j < window (spec §3.3.5).
      const int j0 = f.sliding ? std::max(0, pos - f.window + 1) : 0;
      std::vector<T> s(pos - j0 + 1);
      T mx = -INFINITY;
      for (int j = j0; j <= pos; ++j) {
        const T* kj = Ks + static_cast<size_t>(j) * kv_dim + gh * hd;
        T dot = 0;
        for (int d = 0; d < hd; ++d) dot += qh[d] * kj[d];
        s[j - j0] = dot;  // attention scale 1.0: no 1/sqrt(hd)
        mx = std::max(mx, dot);
      }
      T sum = 0;
      for (T& e : s) sum += (e = std::exp(e - mx));
      T* oh = attn.data() + static_cast<size_t>(t) * q_dim + h * hd;
      for (int j = j0; j <= pos; ++j) {
        const T pr = s[j - j0] / sum;
        const T* vj = Vs + static_cast<size_t>(j) * kv_dim + gh * hd;
        for (int d = 0; d < hd; ++d) oh[d] += pr * vj[d];
      }
    });
    if constexpr (std::is_same_v<T, double>) {
      if (hooks && hooks->on_attention)
        for (int t = 0; t < n; ++t) {
          const size_t off = static_cast<size_t>(t) * q_dim;
          hooks->on_attention(l, p0 + t, std::vector<double>(attn.begin() + off, attn.begin() + off + q_dim));
        }
    }
    y.resize(static_cast<size_t>(n) * H);
    MatMul(pool, ly.o, H, q_dim, attn.data(), n, y.data());
    for (int t = 0; t < n; ++t) {
      T* yt = y.data() + static_cast<size_t>(t) * H;
      RmsNorm(yt, H, ly.post_attn_norm.data(), eps);
      for (int i = 0; i < H; ++i) x[static_cast<size_t>(t) * H + i] += yt[i];
    }

    // Feed-forward: GELU-tanh gated MLP.
    m = x;
    for (int t = 0; t < n; ++t) RmsNorm(m.data() + static_cast<size_t>(t) * H, H, ly.pre_ff_norm.data(), eps);
    gate.resize(static_cast<size_t>(n) * I);
    up.resize(gate.size());
    MatMul(pool, ly.gate, I, H, m.data(), n, gate.data());
    MatMul(pool, ly.up, I, H, m.data(), n, up.data());
    for (size_t k = 0; k < gate.size(); ++k) gate[k] = GeluTanh(gate[k]) * up[k];
    MatMul(pool, ly.down, H, I, gate.data(), n, y.data());
    for (int t = 0; t < n; ++t) {
      T* yt = y.data() + static_cast<size_t>(t) * H;
      RmsNorm(yt, H, ly.post_ff_norm.data(), eps);
      for (int i = 0; i < H; ++i) x[static_cast<size_t>(t) * H + i] += yt[i];
    }

    // Per-layer-input block, after the FFN residual.
    if (P > 0) {
      g.resize(static_cast<size_t>(n) * P);
      z.resize(static_cast<size_t>(n) * H);
      MatMul(pool, ly.ple_gate, P, H, x.data(), n, g.data());
      for (int t = 0; t < n; ++t)
        for (int k = 0; k < P; ++k) {
          T& gk = g[static_cast<size_t>(t) * P + k];
          gk = GeluTanh(gk) * ple[t * LP + static_cast<size_t>(l) * P + k];
        }
      MatMul(pool, ly.ple_proj, H, P, g.data(), n, z.data());
      for (int t = 0; t < n; ++t) {
        T* zt = z.data() + static_cast<size_t>(t) * H;
        RmsNorm(zt, H, ly.ple_norm.data(), eps);
        for (int i = 0; i < H; ++i) x[static_cast<size_t>(t) * H + i] += zt[i];
      }
    }
    // layer_scalar scales the whole residual stream, last thing in the layer.
    if (!options_.ignore_layer_scalar)
      for (T& e : x) e *= static_cast<T>(ly.scalar);
  }
  cache.n_past += n;

  // §3.4: final norm, tied LM head, softcap; only the rows asked for.
  const int first = rows == LogitRows::kLast ? n - 1 : 0, n_out = n - first;
  std::vector<T> h(x.begin() + static_cast<size_t>(first) * H, x.end());
  for (int t = 0; t < n_out; ++t) RmsNorm(h.data() + static_cast<size_t>(t) * H, H, w.final_norm.data(), eps);
  if (hooks && hooks->on_final_hidden)
    for (int t = 0; t < n_out; ++t)
      hooks->on_final_hidden(p0 + first + t,
                             std::vector<double>(h.begin() + static_cast<size_t>(t) * H,
                                                 h.begin() + static_cast<size_t>(t + 1) * H));
  const size_t base = logits->size();
  logits->resize(base + n_out, std::vector<double>(c.vocab));
  const T cap = static_cast<T>(c.softcap);
  ForEachRowDot(pool, w.embed, c.vocab, H, h.data(), n_out, [&](int t, int v, T acc) {
    if (c.softcap > 0) acc = cap * std::tanh(acc / cap);
    (*logits)[base + t][v] = static_cast<double>(acc);
  });
  return OkStatus();
}

template <class T>
Result<std::vector<std::vector<double>>> ReferenceModel::Logits(const std::vector<int>& ids,
                                                                const ReferenceHooks* hooks,
                                                                int chunk) const {
  if (ids.empty()) return Status::Errorf("reference: empty input");
  const int n = static_cast<int>(ids.size());
  if (chunk <= 0 || chunk > n) chunk = n;
  Cache<T> cache;
  std::vector<std::vector<double>> logits;
  for (int p = 0; p < n; p += chunk)
    G4_RETURN_IF_ERROR(Forward<T>(cache, ids.data() + p, std::min(chunk, n - p), hooks,
                                  LogitRows::kAll, &logits));
  return logits;
}
template Result<std::vector<std::vector<double>>> ReferenceModel::Logits<double>(
    const std::vector<int>&, const ReferenceHooks*, int) const;
template Result<std::vector<std::vector<double>>> ReferenceModel::Logits<float>(
    const std::vector<int>&, const ReferenceHooks*, int) const;

template <class T>
Status ReferenceModel::ForEachLogits(const std::vector<int>& ids, int chunk,
                                     const RowFn& row_fn) const {
  if (ids.empty()) return Status::Errorf("reference: empty input");
  const int n = static_cast<int>(ids.size());
  if (chunk <= 0 || chunk > n) chunk = n;
  Cache<T> cache;
  std::vector<std::vector<double>> logits;
  for (int p = 0; p < n; p += chunk) {
    logits.clear();
    G4_RETURN_IF_ERROR(Forward<T>(cache, ids.data() + p, std::min(chunk, n - p), nullptr,
                                  LogitRows::kAll, &logits));
    for (size_t r = 0; r < logits.size(); ++r) row_fn(p + static_cast<int>(r), logits[r]);
  }
  return OkStatus();
}
template Status ReferenceModel::ForEachLogits<double>(const std::vector<int>&, int,
                                                      const RowFn&) const;
template Status ReferenceModel::ForEachLogits<float>(const std::vector<int>&, int,
                                                     const RowFn&) const;

Result<std::vector<ReferenceModel::GreedyStep>> ReferenceModel::GreedyTrace(
    const std::vector<int>& prompt, int n_new) const {
  if (prompt.empty()) return Status::Errorf("reference: empty prompt");
  Cache<double> cache;
  std::vector<GreedyStep> steps;
  std::vector<std::vector<double>> logits;
  for (int s = 0; s < n_new; ++s) {
    logits.clear();
    // The prompt in one pass, then one token per step against the cache.
    if (s == 0)
      G4_RETURN_IF_ERROR(Forward<double>(cache, prompt.data(), static_cast<int>(prompt.size()),
                                         nullptr, LogitRows::kLast, &logits));
    else
      G4_RETURN_IF_ERROR(Forward<double>(cache, &steps.back().token, 1, nullptr, LogitRows::kLast,
                                         &logits));
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
