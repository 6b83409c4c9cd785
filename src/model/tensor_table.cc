#include "model/tensor_table.h"

#include "model/architecture.h"
#include "model/rank_plan.h"

namespace g4 {

int64_t PlannedTensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string ExpandTensorName(const char* pattern, int layer) {
  std::string s = pattern;
  const size_t at = s.find("{i}");
  if (at != std::string::npos) s.replace(at, 3, std::to_string(layer));
  return s;
}

int64_t DimSize(Dim dim, const ModelPlan& plan, int layer) {
  const LayerPlan* lp = layer >= 0 ? &plan.layers[layer] : nullptr;
  switch (dim) {
    case Dim::kNone:
    case Dim::kOne:
      return 1;
    case Dim::kHidden:
      return plan.hidden;
    case Dim::kVocab:
      return plan.vocab;
    case Dim::kQuery:
      return lp->q_dim();
    case Dim::kKv:
      return lp->kv_dim();
    case Dim::kHeadDim:
      return lp->head_dim;
    case Dim::kMlp:
      return lp->mlp_width;
    case Dim::kPle:
      return plan.ple_dim;
    case Dim::kLayersPle:
      return static_cast<int64_t>(plan.n_layers()) * plan.ple_dim;
  }
  return 0;
}

namespace {

struct Range {
  int64_t begin, count;
};

// The rank's range of a split axis of size DimSize(dim, full, layer) (rank_plan.h's rules).
Range SplitRange(Dim dim, const ModelPlan& full, const ModelPlan& rank, int layer) {
  const int64_t whole = DimSize(dim, full, layer);
  if (dim == Dim::kVocab) return {rank.lm_head_begin(), rank.lm_head_end() - rank.lm_head_begin()};
  if (layer < 0) return {0, whole};
  const LayerPlan& fl = full.layers[layer];
  const LayerPlan& rl = rank.layers[layer];
  switch (dim) {
    case Dim::kQuery:
      return {static_cast<int64_t>(rl.q_head_offset) * rl.head_dim, rl.q_dim()};
    case Dim::kKv:
      // All of them when this rank replicates K/V.
      if (KvReplicated(fl, rl)) return {0, whole};
      return {static_cast<int64_t>(rl.kv_head_offset) * rl.head_dim, rl.kv_dim()};
    case Dim::kMlp:
      return {rl.mlp_offset, rl.mlp_width};
    default:
      return {0, whole};
  }
}

bool Applies(const TensorSpec& spec, const ModelPlan& plan, int layer) {
  switch (spec.when) {
    case When::kAlways:
      return true;
    case When::kWithPle:
      return plan.ple_dim > 0;
    case When::kNotKEqV:
      return !plan.layers[layer].k_eq_v;
  }
  return true;
}

}  // namespace

TensorSlice RankSlice(const TensorSpec& spec, int layer, const ModelPlan& full,
                      const ModelPlan& rank) {
  TensorSlice s;
  s.n_rows = DimSize(spec.rows, full, layer);
  s.n_cols = DimSize(spec.cols, full, layer);
  if (spec.split == Split::kRows) {
    const Range r = SplitRange(spec.rows, full, rank, layer);
    s.row_begin = r.begin;
    s.n_rows = r.count;
  } else if (spec.split == Split::kColumns) {
    const Range r = SplitRange(spec.cols, full, rank, layer);
    s.col_begin = r.begin;
    s.n_cols = r.count;
  }
  return s;
}

std::vector<PlannedTensor> PlanTensors(const ModelPlan& plan) { return PlanTensors(plan, plan); }

std::vector<PlannedTensor> PlanTensors(const ModelPlan& full, const ModelPlan& rank) {
  const TensorTable& table = TensorTableFor(full);
  std::vector<PlannedTensor> out;
  auto add = [&](const TensorSpec& spec, int layer) {
    if (!Applies(spec, full, layer)) return;
    PlannedTensor t;
    t.spec = &spec;
    t.layer = layer;
    t.name = ExpandTensorName(spec.name, layer);
    t.internal = ExpandTensorName(spec.internal, layer);
    t.shape = {DimSize(spec.rows, full, layer)};
    if (spec.cols != Dim::kNone) t.shape.push_back(DimSize(spec.cols, full, layer));
    t.used = !spec.kv_owner_only || full.layers[layer].owns_kv();
    t.slice = RankSlice(spec, layer, full, rank);
    out.push_back(std::move(t));
  };
  // Model-wide rows first, then each layer's rows in table order: the order of the pack's
  // sections and of binding's error messages.
  for (const TensorSpec& spec : table.rows)
    if (!spec.per_layer) add(spec, -1);
  for (int i = 0; i < full.n_layers(); ++i)
    for (const TensorSpec& spec : table.rows)
      if (spec.per_layer) add(spec, i);
  return out;
}

}  // namespace g4
