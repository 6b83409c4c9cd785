#include "model/weights.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cmath>
#include <cstring>

#include "base/half.h"
#include "base/thread_pool.h"
#include "kernels/quantize.h"
#include "model/arch/gemma4.h"

namespace g4 {

namespace {

class Binder {
 public:
  Binder(const TensorStore& store, std::string prefix, ModelWeights* w, WeightType quant, ThreadPool* pool)
      : store_(store), prefix_(std::move(prefix)), w_(w), quant_(quant), pool_(pool) {}

  Result<const TensorView*> Find(const std::string& name, std::vector<int64_t> shape) {
    const std::string full = prefix_ + name;
    const TensorView* t = store_.Find(full);
    if (!t) return Status::Errorf("checkpoint is missing tensor ", full);
    if (t->shape != shape) {
      TensorView expect;
      expect.shape = shape;
      return Status::Errorf(*t->file, ": tensor ", full, " has shape ", t->ShapeString(),
                            ", expected ", expect.ShapeString());
    }
    if (t->dtype != DType::kBF16 && t->dtype != DType::kF16 && t->dtype != DType::kF32)
      return Status::Errorf(*t->file, ": tensor ", full, " has dtype ", DTypeName(t->dtype),
                            ", expected BF16, F16 or F32");
    return t;
  }

  Status Vector(const std::string& name, int64_t n, std::vector<float>* out) {
    G4_ASSIGN_OR_RETURN(const TensorView* t, Find(name, {n}));
    out->resize(n);
    for (int64_t i = 0; i < n; ++i) (*out)[i] = static_cast<float>(t->ValueAt(i));
    return OkStatus();
  }

  Status Matrix(const std::string& name, int rows, int cols, WeightMatrix* out) {
    G4_ASSIGN_OR_RETURN(const TensorView* t, Find(name, {rows, cols}));
    out->rows = rows;
    out->cols = cols;
    const SourceType src = t->dtype == DType::kBF16 ? SourceType::kBF16
                           : t->dtype == DType::kF16 ? SourceType::kF16
                                                     : SourceType::kF32;
    if (quant_ != WeightType::kBF16 && quant_ != WeightType::kF32 && WeightTypeFits(quant_, cols)) {
      out->type = quant_;
    } else {
      out->type = t->dtype == DType::kBF16 ? WeightType::kBF16 : WeightType::kF32;
    }
    out->bytes = WeightBytes(out->type, rows, cols);
    uint8_t* buf = Allocate(out->bytes);
    if (out->type == WeightType::kBF16) {
      std::memcpy(buf, t->data, out->bytes);
    } else {
      QuantizeMatrix(t->data, src, rows, cols, out->type, buf, pool_);
    }
    out->data = buf;
    DropPages(t->data, t->bytes);
    return OkStatus();
  }

 private:
  uint8_t* Allocate(size_t bytes) {
    w_->buffers.emplace_back(new (std::align_val_t(64)) uint8_t[bytes]);
    w_->resident_bytes += static_cast<int64_t>(bytes);
    return w_->buffers.back().get();
  }

  // The checkpoint's copy is no longer needed: unmap its pages from this process so peak RSS is
  // the engine's copy, not both (the page cache keeps them; a later touch re-reads them).
  static void DropPages(const void* data, size_t bytes) {
    const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
    const uintptr_t begin = reinterpret_cast<uintptr_t>(data) / page * page;
    const uintptr_t end = reinterpret_cast<uintptr_t>(data) + bytes;
    madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
  }

  const TensorStore& store_;
  std::string prefix_;
  ModelWeights* w_;
  WeightType quant_;
  ThreadPool* pool_;
};

float RoundToDType(double v, DType dtype) {
  if (dtype == DType::kBF16) return RoundToBf16(static_cast<float>(v));
  if (dtype == DType::kF16) return RoundToF16(static_cast<float>(v));
  return static_cast<float>(v);
}

}  // namespace

Result<std::unique_ptr<ModelWeights>> LoadWeights(const ModelPlan& plan, const std::string& dir,
                                                  const LoadOptions& options) {
  auto w = std::make_unique<ModelWeights>();
  w->quant = options.quant;
  ThreadPool pool(options.threads);
  G4_ASSIGN_OR_RETURN(w->store, TensorStore::OpenDir(dir));
  for (const char* prefix : {"model.language_model.", "model.", ""}) {
    if (w->store->Find(std::string(prefix) + "embed_tokens.weight")) {
      w->tensor_prefix = prefix;
      break;
    }
  }
  if (!w->store->Find(w->tensor_prefix + "embed_tokens.weight"))
    return Status::Errorf(dir, ": no embed_tokens.weight under model.language_model. or model. "
                          "(not a Gemma-4 text checkpoint?)");
  Binder b(*w->store, w->tensor_prefix, w.get(), options.quant, &pool);
  const int H = plan.hidden, V = plan.vocab, L = plan.n_layers(), P = plan.ple_dim;

  G4_RETURN_IF_ERROR(b.Matrix("embed_tokens.weight", V, H, &w->embed));
  const DType embed_dtype = w->store->Find(w->tensor_prefix + "embed_tokens.weight")->dtype;
  w->embed_scale = RoundToDType(std::sqrt(static_cast<double>(H)), embed_dtype);
  G4_RETURN_IF_ERROR(b.Vector("norm.weight", H, &w->final_norm));
  if (!plan.config.tie_word_embeddings)
    return Status::Errorf(dir, ": tie_word_embeddings=false is not supported (Gemma-4 ties them)");

  if (P > 0) {
    G4_ASSIGN_OR_RETURN(const TensorView* t,
                        b.Find("embed_tokens_per_layer.weight", {V, static_cast<int64_t>(L) * P}));
    w->ple_table = t->data;
    w->ple_dtype = t->dtype;
    w->mapped_bytes = static_cast<int64_t>(t->bytes);
    for (const auto& f : w->store->files())
      if (&f->path() == t->file) f->mapped().AdviseRandom();
    w->ple_scale = RoundToDType(std::sqrt(static_cast<double>(P)), t->dtype);
    G4_RETURN_IF_ERROR(b.Matrix("per_layer_model_projection.weight", L * P, H, &w->ple_model_projection));
    G4_RETURN_IF_ERROR(b.Vector("per_layer_projection_norm.weight", P, &w->ple_projection_norm));
  }

  w->layers.resize(L);
  for (int i = 0; i < L; ++i) {
    const LayerPlan& lp = plan.layers[i];
    LayerWeights& lw = w->layers[i];
    auto name = [&](const char* suffix) { return LayerTensorName(i, suffix); };
    G4_RETURN_IF_ERROR(b.Vector(name("input_layernorm.weight"), H, &lw.input_norm));
    G4_RETURN_IF_ERROR(b.Vector(name("post_attention_layernorm.weight"), H, &lw.post_attention_norm));
    G4_RETURN_IF_ERROR(b.Vector(name("pre_feedforward_layernorm.weight"), H, &lw.pre_feedforward_norm));
    G4_RETURN_IF_ERROR(b.Vector(name("post_feedforward_layernorm.weight"), H, &lw.post_feedforward_norm));
    G4_RETURN_IF_ERROR(b.Matrix(name("self_attn.q_proj.weight"), lp.q_dim(), H, &lw.q_proj));
    G4_RETURN_IF_ERROR(b.Vector(name("self_attn.q_norm.weight"), lp.head_dim, &lw.q_norm));
    G4_RETURN_IF_ERROR(b.Matrix(name("self_attn.o_proj.weight"), H, lp.q_dim(), &lw.o_proj));
    if (lp.owns_kv()) {
      // Shared layers' stored k_proj/v_proj/k_norm are unused (spec §2.3) and never loaded.
      G4_RETURN_IF_ERROR(b.Matrix(name("self_attn.k_proj.weight"), lp.kv_dim(), H, &lw.k_proj));
      G4_RETURN_IF_ERROR(b.Vector(name("self_attn.k_norm.weight"), lp.head_dim, &lw.k_norm));
      if (!lp.k_eq_v) {
        G4_RETURN_IF_ERROR(b.Matrix(name("self_attn.v_proj.weight"), lp.kv_dim(), H, &lw.v_proj));
      } else if (w->store->Find(w->tensor_prefix + name("self_attn.v_proj.weight"))) {
        return Status::Errorf(dir, ": layer ", i, " is a K=V layer (attention_k_eq_v) but the "
                              "checkpoint has self_attn.v_proj.weight: config and tensors disagree");
      }
    }
    G4_RETURN_IF_ERROR(b.Matrix(name("mlp.gate_proj.weight"), lp.mlp_width, H, &lw.gate_proj));
    G4_RETURN_IF_ERROR(b.Matrix(name("mlp.up_proj.weight"), lp.mlp_width, H, &lw.up_proj));
    G4_RETURN_IF_ERROR(b.Matrix(name("mlp.down_proj.weight"), H, lp.mlp_width, &lw.down_proj));
    if (P > 0) {
      G4_RETURN_IF_ERROR(b.Matrix(name("per_layer_input_gate.weight"), P, H, &lw.ple_gate));
      G4_RETURN_IF_ERROR(b.Matrix(name("per_layer_projection.weight"), H, P, &lw.ple_projection));
      G4_RETURN_IF_ERROR(b.Vector(name("post_per_layer_input_norm.weight"), H, &lw.ple_post_norm));
    }
    // layer_scalar is a [1] buffer without a .weight suffix; param-only loaders drop it.
    std::vector<float> scalar;
    G4_RETURN_IF_ERROR(b.Vector(name("layer_scalar"), 1, &scalar));
    lw.layer_scalar = scalar[0];
  }
  return w;
}

ParameterCounts CountParameters(const ModelPlan& plan) {
  ParameterCounts c;
  const int64_t H = plan.hidden, V = plan.vocab, L = plan.n_layers(), P = plan.ple_dim;
  c.embedding = V * H;
  c.ple_table = V * L * P;
  int64_t body = H;  // final norm
  int64_t body_read = H;
  if (P > 0) {
    body += L * P * H + P;
    body_read += L * P * H + P + L * P;  // one PLE row per token
  }
  for (const auto& l : plan.layers) {
    const int64_t q = l.q_dim(), kv = l.kv_dim();
    int64_t attn = q * H + H * q + l.head_dim;  // q, o, q_norm
    int64_t kv_params = kv * H + l.head_dim + (l.k_eq_v ? 0 : kv * H);  // k, k_norm, v
    int64_t mlp = 3 * H * l.mlp_width;
    int64_t other = 4 * H + 1 + (P > 0 ? 2 * P * H + H : 0);
    body += attn + kv_params + mlp + other;
    body_read += attn + (l.owns_kv() ? kv_params : 0) + mlp + other;
  }
  c.total = c.embedding + c.ple_table + body;
  c.effective = c.total - c.ple_table;
  c.per_token_read = c.embedding * 2 + body_read;  // embedding row + LM head ~ one full read
  c.per_token_read -= c.embedding - H;             // the input row is one row, not the table
  return c;
}

}  // namespace g4
