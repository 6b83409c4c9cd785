#include "model/weights.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <utility>

#include "base/half.h"
#include "base/thread_pool.h"
#include "kernels/cpu_kernels.h"
#include "kernels/quantize.h"
#include "model/arch/gemma4.h"

namespace g4 {

namespace {

// The checkpoint's copy is no longer needed: unmap its pages from this process so peak RSS is
// the engine's copy, not both (the page cache keeps them; a later touch re-reads them).
void DropPages(const void* data, size_t bytes) {
  const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t begin = reinterpret_cast<uintptr_t>(data) / page * page;
  const uintptr_t end = reinterpret_cast<uintptr_t>(data) + bytes;
  madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
}

// Copies `bytes` from a read-only mapping in chunks over the pool, unmapping each source chunk
// once copied, so the process never holds both copies of a large matrix (an E2B bf16 embedding
// is 0.8 GB).
void CopyAndDropPages(uint8_t* dst, const uint8_t* src, size_t bytes, ThreadPool* pool) {
  constexpr size_t kChunk = size_t{4} << 20;
  const int64_t n = static_cast<int64_t>((bytes + kChunk - 1) / kChunk);
  pool->ParallelFor(n, [&](int64_t i, int) {
    const size_t begin = static_cast<size_t>(i) * kChunk, len = std::min(kChunk, bytes - begin);
    std::memcpy(dst + begin, src + begin, len);
    DropPages(src + begin, len);
  });
}

// Rows [row_begin, row_begin + n_rows) and columns [col_begin, col_begin + n_cols) of a
// [rows, cols] tensor; the whole tensor by default (tensor parallel slices, rank_plan.h).
struct Slice {
  int row_begin = 0, n_rows = -1;
  int col_begin = 0, n_cols = -1;
};

class Binder {
 public:
  Binder(const TensorStore& store, std::string prefix, ModelWeights* w, WeightType quant,
         ThreadPool* pool)
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

  Status Matrix(const std::string& name, int rows, int cols, WeightMatrix* out, Slice slice = {}) {
    G4_ASSIGN_OR_RETURN(const TensorView* t, Find(name, {rows, cols}));
    if (slice.n_rows < 0) slice.n_rows = rows - slice.row_begin;
    if (slice.n_cols < 0) slice.n_cols = cols - slice.col_begin;
    if (slice.row_begin < 0 || slice.row_begin + slice.n_rows > rows || slice.col_begin < 0 ||
        slice.col_begin + slice.n_cols > cols)
      return Status::Errorf(*t->file, ": tensor ", prefix_, name, ": slice rows [", slice.row_begin,
                            ", ", slice.row_begin + slice.n_rows, ") cols [", slice.col_begin, ", ",
                            slice.col_begin + slice.n_cols, ") is outside ", t->ShapeString());
    const size_t esize = DTypeSize(t->dtype);
    // A row block is contiguous in the mapped file; a column block is gathered row by row.
    const uint8_t* data = t->data + static_cast<size_t>(slice.row_begin) * cols * esize;
    std::vector<uint8_t> gathered;
    if (slice.n_cols != cols) {
      const size_t row_bytes = static_cast<size_t>(slice.n_cols) * esize;
      gathered.resize(static_cast<size_t>(slice.n_rows) * row_bytes);
      for (int r = 0; r < slice.n_rows; ++r)
        std::memcpy(gathered.data() + r * row_bytes,
                    data + (static_cast<size_t>(r) * cols + slice.col_begin) * esize, row_bytes);
      data = gathered.data();
    }
    rows = slice.n_rows;
    cols = slice.n_cols;
    out->rows = rows;
    out->cols = cols;
    const SourceType src = t->dtype == DType::kBF16  ? SourceType::kBF16
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
      std::memcpy(buf, data, out->bytes);
    } else {
      QuantizeMatrix(data, src, rows, cols, out->type, buf, pool_);
    }
    out->data = buf;
    DropPages(t->data, t->bytes);
    return OkStatus();
  }

 private:
  uint8_t* Allocate(size_t bytes) { return w_->Allocate(bytes); }

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

uint8_t* ModelWeights::Allocate(size_t bytes) {
  buffers.push_back(AllocateStreamed(bytes));
  resident_bytes += static_cast<int64_t>(bytes);
  return buffers.back().get();
}

std::vector<const WeightMatrix*> ModelWeights::Matrices() const {
  std::vector<const WeightMatrix*> out = {&embed, &ple_model_projection};
  for (const LayerWeights& l : layers)
    for (const WeightMatrix* m : {&l.q_proj, &l.k_proj, &l.v_proj, &l.o_proj, &l.gate_proj,
                                  &l.up_proj, &l.down_proj, &l.ple_gate, &l.ple_projection})
      out.push_back(m);
  return out;
}

std::vector<WeightMatrix*> ModelWeights::Matrices() {
  std::vector<WeightMatrix*> out;
  for (const WeightMatrix* m : std::as_const(*this).Matrices())
    out.push_back(const_cast<WeightMatrix*>(m));  // *this is not const: the slots are ours
  return out;
}

void ToKernelLayout(ModelWeights* w, ThreadPool* pool) {
  std::map<const void*, WeightMatrix> done;  // a buffer two matrices share is handled once
  for (WeightMatrix* m : w->Matrices()) {
    if (m->empty()) continue;
    if (auto it = done.find(m->data); it != done.end()) {
      *m = it->second;
      continue;
    }
    const bool regroup =
        CanUseRowGroups(*m) && ActiveKernels().LayoutFor(m->type) == WeightLayout::kRowGroups16;
    const void* before = m->data;
    if (w->artifact) {
      // Matrices of a packed artifact point into its read-only mapping. They are read on every
      // token, and mapped pages get paged out on these machines (decode then re-reads them from
      // disk): reorder or copy each into memory the engine owns, and let the mapped pages go.
      uint8_t* owned = w->Allocate(m->bytes);
      if (regroup) {
        ToRowGroups(m, owned, pool);
        DropPages(before, m->bytes);
      } else {
        // Drops each chunk's pages as it goes.
        CopyAndDropPages(owned, static_cast<const uint8_t*>(before), m->bytes, pool);
        m->data = owned;
      }
      w->mapped_bytes -= static_cast<int64_t>(m->bytes);
    } else if (regroup) {
      ToRowGroups(m, static_cast<uint8_t*>(const_cast<void*>(m->data)), pool);
    } else {
      continue;
    }
    done[before] = *m;
  }
}

Result<std::unique_ptr<ModelWeights>> LoadWeights(const ModelPlan& plan, const std::string& dir,
                                                  const LoadOptions& options) {
  return LoadRankWeights(plan, plan, dir, options);
}

Result<std::unique_ptr<ModelWeights>> LoadRankWeights(const ModelPlan& full, const ModelPlan& plan,
                                                      const std::string& dir,
                                                      const LoadOptions& options) {
  if (full.n_layers() != plan.n_layers())
    return Status::Errorf("rank plan has ", plan.n_layers(), " layers, the model ",
                          full.n_layers());
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
    return Status::Errorf(dir,
                          ": no embed_tokens.weight under model.language_model. or model. "
                          "(not a Gemma-4 text checkpoint?)");
  Binder b(*w->store, w->tensor_prefix, w.get(), options.quant, &pool);
  const int H = plan.hidden, V = plan.vocab, L = plan.n_layers(), P = plan.ple_dim;

  const int head_begin = plan.lm_head_begin(),
            head_rows = plan.lm_head_end() - plan.lm_head_begin();
  if (head_rows > 0)
    G4_RETURN_IF_ERROR(b.Matrix("embed_tokens.weight", V, H, &w->embed,
                                {.row_begin = head_begin, .n_rows = head_rows}));
  const TensorView* embed_view = w->store->Find(w->tensor_prefix + "embed_tokens.weight");
  const DType embed_dtype = embed_view->dtype;
  if (head_rows != V) {
    // This rank's LM head is a vocabulary block; input tokens may be anywhere in the vocabulary.
    if (embed_view->shape != std::vector<int64_t>{V, H})
      return Status::Errorf(*embed_view->file, ": tensor embed_tokens.weight has shape ",
                            embed_view->ShapeString(), ", expected [", V, ", ", H, "]");
    w->embed_table = embed_view->data;
    w->embed_table_dtype = embed_dtype;
    // What Binder::Matrix would make of the whole table.
    if ((options.quant == WeightType::kQ8 || options.quant == WeightType::kQ4) &&
        WeightTypeFits(options.quant, H))
      w->embed_table_type = options.quant;
    w->mapped_bytes += static_cast<int64_t>(embed_view->bytes);
  }
  w->embed_scale = RoundToDType(std::sqrt(static_cast<double>(H)), embed_dtype);
  G4_RETURN_IF_ERROR(b.Vector("norm.weight", H, &w->final_norm));
  if (!plan.config.tie_word_embeddings)
    return Status::Errorf(dir, ": tie_word_embeddings=false is not supported (Gemma-4 ties them)");

  if (P > 0) {
    G4_ASSIGN_OR_RETURN(const TensorView* t,
                        b.Find("embed_tokens_per_layer.weight", {V, static_cast<int64_t>(L) * P}));
    w->ple_table = t->data;
    w->ple_dtype = t->dtype;
    w->mapped_bytes += static_cast<int64_t>(t->bytes);
    for (const auto& f : w->store->files())
      if (&f->path() == t->file) f->mapped().AdviseRandom();
    w->ple_scale = RoundToDType(std::sqrt(static_cast<double>(P)), t->dtype);
    G4_RETURN_IF_ERROR(
        b.Matrix("per_layer_model_projection.weight", L * P, H, &w->ple_model_projection));
    G4_RETURN_IF_ERROR(b.Vector("per_layer_projection_norm.weight", P, &w->ple_projection_norm));
  }

  w->layers.resize(L);
  for (int i = 0; i < L; ++i) {
    const LayerPlan& lp = plan.layers[i];
    LayerWeights& lw = w->layers[i];
    auto name = [&](const char* suffix) { return LayerTensorName(i, suffix); };
    G4_RETURN_IF_ERROR(b.Vector(name("input_layernorm.weight"), H, &lw.input_norm));
    G4_RETURN_IF_ERROR(
        b.Vector(name("post_attention_layernorm.weight"), H, &lw.post_attention_norm));
    G4_RETURN_IF_ERROR(
        b.Vector(name("pre_feedforward_layernorm.weight"), H, &lw.pre_feedforward_norm));
    G4_RETURN_IF_ERROR(
        b.Vector(name("post_feedforward_layernorm.weight"), H, &lw.post_feedforward_norm));
    const LayerPlan& fl = full.layers[i];
    const int hd = lp.head_dim;
    // Query heads: q_proj rows and o_proj columns of this plan's heads.
    const Slice q_rows{.row_begin = lp.q_head_offset * hd, .n_rows = lp.q_dim()};
    const Slice q_cols{.col_begin = lp.q_head_offset * hd, .n_cols = lp.q_dim()};
    G4_RETURN_IF_ERROR(
        b.Matrix(name("self_attn.q_proj.weight"), fl.q_dim(), H, &lw.q_proj, q_rows));
    G4_RETURN_IF_ERROR(b.Vector(name("self_attn.q_norm.weight"), hd, &lw.q_norm));
    G4_RETURN_IF_ERROR(
        b.Matrix(name("self_attn.o_proj.weight"), H, fl.q_dim(), &lw.o_proj, q_cols));
    if (lp.owns_kv()) {
      // Shared layers' stored k_proj/v_proj/k_norm are unused (spec §2.3) and never loaded.
      // K/V rows of this plan's KV heads; all of them when the plan replicates K/V.
      const int kv_begin = lp.n_heads_kv == fl.n_heads_kv ? 0 : lp.kv_head_offset;
      const Slice kv_rows{.row_begin = kv_begin * hd, .n_rows = lp.kv_dim()};
      G4_RETURN_IF_ERROR(
          b.Matrix(name("self_attn.k_proj.weight"), fl.kv_dim(), H, &lw.k_proj, kv_rows));
      G4_RETURN_IF_ERROR(b.Vector(name("self_attn.k_norm.weight"), hd, &lw.k_norm));
      if (!lp.k_eq_v) {
        G4_RETURN_IF_ERROR(
            b.Matrix(name("self_attn.v_proj.weight"), fl.kv_dim(), H, &lw.v_proj, kv_rows));
      } else if (w->store->Find(w->tensor_prefix + name("self_attn.v_proj.weight"))) {
        return Status::Errorf(
            dir, ": layer ", i,
            " is a K=V layer (attention_k_eq_v) but the "
            "checkpoint has self_attn.v_proj.weight: config and tensors disagree");
      }
    }
    const Slice mlp_rows{.row_begin = lp.mlp_offset, .n_rows = lp.mlp_width};
    const Slice mlp_cols{.col_begin = lp.mlp_offset, .n_cols = lp.mlp_width};
    G4_RETURN_IF_ERROR(
        b.Matrix(name("mlp.gate_proj.weight"), fl.mlp_width, H, &lw.gate_proj, mlp_rows));
    G4_RETURN_IF_ERROR(
        b.Matrix(name("mlp.up_proj.weight"), fl.mlp_width, H, &lw.up_proj, mlp_rows));
    G4_RETURN_IF_ERROR(
        b.Matrix(name("mlp.down_proj.weight"), H, fl.mlp_width, &lw.down_proj, mlp_cols));
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
    int64_t attn = q * H + H * q + l.head_dim;                          // q, o, q_norm
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
