// The model as data: one table per architecture with a row per kind of tensor, and its
// expansion for a plan. Binding (model/weights.cc), the pack layout (model/pack_layout.cc),
// `g4 doctor`'s expected tensors and CountParameters all walk PlanTensors(), so a tensor is
// described once and the four cannot drift apart (tests/tensor_table_test.cc).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/plan.h"
#include "model/weights.h"

namespace g4 {

enum class TensorKind {
  kMatrix,  // a WeightMatrix the kernels read (converted to the load's format)
  kVector,  // fp32 vector (norms)
  kScalar,  // one float ([1] in the checkpoint)
  kTable,   // a lookup table left mapped, one row read per token (the PLE table)
};

// One axis of a tensor's shape, sized from the plan (and the layer for per-layer tensors).
enum class Dim {
  kNone,       // a vector's missing second axis
  kOne,        // 1
  kHidden,     // hidden_size H
  kVocab,      // vocab_size V
  kQuery,      // query heads x head_dim (split by query heads under tensor parallelism)
  kKv,         // KV heads x head_dim (split by KV heads, or replicated: rank_plan.h)
  kHeadDim,    // head_dim
  kMlp,        // the layer's MLP width (split into blocks)
  kPle,        // hidden_size_per_layer_input P
  kLayersPle,  // layers x P
};

// Which axis tensor parallelism splits (the dim on it says how: heads, MLP block, vocabulary
// rows for the tied LM head); replicated tensors are whole on every rank.
enum class Split { kReplicated, kRows, kColumns };

// When a layer stores the tensor at all.
enum class When {
  kAlways,
  kWithPle,  // only with per-layer embeddings (ple_dim > 0)
  kNotKEqV,  // absent on K=V layers (no v_proj: V is the raw k_proj output)
};

// Slots of ModelWeights a row binds to (exactly one is set, matching the kind).
using MatrixSlot = WeightMatrix* (*)(ModelWeights& w, int layer);
using VectorSlot = std::vector<float>* (*)(ModelWeights& w, int layer);
using ScalarSlot = float* (*)(ModelWeights& w, int layer);

struct TensorSpec {
  const char* name;      // HF name relative to the text prefix; "{i}" = layer index
  const char* internal;  // g4's name (pack section under rank<r>/); "{i}" = layer index
  TensorKind kind;
  Dim rows;
  Dim cols = Dim::kNone;       // kNone for vectors and scalars
  bool per_layer = false;      // one per layer ("{i}" in the names)
  bool kv_owner_only = false;  // stored on every layer, read only on KV-owner layers
  When when = When::kAlways;
  Split split = Split::kReplicated;
  // Per decoded token: the whole tensor is read (false: one row, a lookup). The tied
  // embedding is both: one input row and the whole LM head (lm_head below).
  bool read_whole = true;
  bool lm_head = false;  // the tied embedding: input lookup + the LM head
  // Checkpoint dtypes: every row takes BF16, F16 or F32 (binding and doctor check it for all
  // rows alike; a row that needs another rule gets a field here).
  MatrixSlot matrix = nullptr;
  VectorSlot vector = nullptr;
  ScalarSlot scalar = nullptr;
};

struct TensorTable {
  std::string architecture;
  std::vector<TensorSpec> rows;
};

// A part of a [rows, cols] tensor: rows [row_begin, row_begin + n_rows), columns likewise.
struct TensorSlice {
  int64_t row_begin = 0, n_rows = 0;
  int64_t col_begin = 0, n_cols = 0;
  bool empty() const { return n_rows == 0 || n_cols == 0; }
};

// One concrete tensor of a plan.
struct PlannedTensor {
  const TensorSpec* spec = nullptr;
  int layer = -1;        // -1 for model-wide tensors
  std::string name;      // HF name relative to the text prefix
  std::string internal;  // g4's name
  std::vector<int64_t> shape;  // as stored in the checkpoint (the whole model's)
  // False for a tensor stored but never read (shared layers' K/V): counted, checked by doctor
  // if present, never bound or packed.
  bool used = true;
  // What the rank holds (the whole tensor at tp 1; empty on a rank without LM-head rows).
  TensorSlice slice;
  bool held() const { return used && !slice.empty(); }
  int64_t numel() const;
};

// Every tensor the checkpoint of `plan` stores, in table order.
std::vector<PlannedTensor> PlanTensors(const ModelPlan& plan);
// The same for a tensor-parallel rank: shapes from `full`, slices from `rank`
// (model/rank_plan.h); PlanTensors(full) is PlanTensors(full, full).
std::vector<PlannedTensor> PlanTensors(const ModelPlan& full, const ModelPlan& rank);

// The rank's part of tensor `spec` of layer `layer` (-1: model-wide) along its split axis.
TensorSlice RankSlice(const TensorSpec& spec, int layer, const ModelPlan& full,
                      const ModelPlan& rank);

// Size of `dim` in `plan` (layer's fields for per-layer dims).
int64_t DimSize(Dim dim, const ModelPlan& plan, int layer);

// "layers.{i}.x" -> "layers.3.x".
std::string ExpandTensorName(const char* pattern, int layer);

}  // namespace g4
