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
#include "model/tensor_table.h"

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
  const int H = plan.hidden, V = plan.vocab, P = plan.ple_dim;
  const int head_rows = plan.lm_head_end() - plan.lm_head_begin();
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
  if (!plan.config.tie_word_embeddings)
    return Status::Errorf(dir, ": tie_word_embeddings=false is not supported (Gemma-4 ties them)");

  w->layers.resize(plan.n_layers());
  // Every tensor the table lists for this rank, whole or its slice (model/tensor_table.h).
  for (const PlannedTensor& t : PlanTensors(full, plan)) {
    if (!t.held()) continue;  // shared layers' stored K/V (spec §2.3), a rank without LM-head rows
    const TensorSpec& spec = *t.spec;
    switch (spec.kind) {
      case TensorKind::kMatrix: {
        const Slice slice{.row_begin = static_cast<int>(t.slice.row_begin),
                          .n_rows = static_cast<int>(t.slice.n_rows),
                          .col_begin = static_cast<int>(t.slice.col_begin),
                          .n_cols = static_cast<int>(t.slice.n_cols)};
        G4_RETURN_IF_ERROR(b.Matrix(t.name, static_cast<int>(t.shape[0]),
                                    static_cast<int>(t.shape[1]), spec.matrix(*w, t.layer),
                                    slice));
        break;
      }
      case TensorKind::kVector:
        G4_RETURN_IF_ERROR(b.Vector(t.name, t.shape[0], spec.vector(*w, t.layer)));
        break;
      case TensorKind::kScalar: {
        std::vector<float> scalar;
        G4_RETURN_IF_ERROR(b.Vector(t.name, 1, &scalar));
        *spec.scalar(*w, t.layer) = scalar[0];
        break;
      }
      case TensorKind::kTable: {
        // The PLE table stays mapped, read one row per token at random.
        G4_ASSIGN_OR_RETURN(const TensorView* view, b.Find(t.name, t.shape));
        w->ple_table = view->data;
        w->ple_dtype = view->dtype;
        w->mapped_bytes += static_cast<int64_t>(view->bytes);
        for (const auto& f : w->store->files())
          if (&f->path() == view->file) f->mapped().AdviseRandom();
        w->ple_scale = RoundToDType(std::sqrt(static_cast<double>(P)), view->dtype);
        break;
      }
    }
  }
  // A K=V layer has no v_proj; one in the checkpoint means config and tensors disagree.
  for (const LayerPlan& lp : plan.layers) {
    if (!lp.k_eq_v || !lp.owns_kv()) continue;
    if (w->store->Find(w->tensor_prefix + LayerTensorName(lp.index, "self_attn.v_proj.weight")))
      return Status::Errorf(dir, ": layer ", lp.index,
                            " is a K=V layer (attention_k_eq_v) but the "
                            "checkpoint has self_attn.v_proj.weight: config and tensors disagree");
  }
  return w;
}

ParameterCounts CountParameters(const ModelPlan& plan) {
  ParameterCounts c;
  for (const PlannedTensor& t : PlanTensors(plan)) {
    const int64_t n = t.numel();
    c.total += n;  // every stored tensor, the unused K/V of shared layers included
    if (t.spec->kind == TensorKind::kTable) c.ple_table += n;
    if (t.spec->lm_head) c.embedding += n;
    if (!t.used) continue;
    // Per decoded token: a lookup reads one row; the tied embedding is also the whole LM head.
    const int64_t row = t.shape.size() > 1 ? t.shape[1] : 1;
    c.per_token_read += (t.spec->read_whole ? n : row) + (t.spec->lm_head ? n : 0);
  }
  c.effective = c.total - c.ple_table;
  return c;
}

}  // namespace g4
