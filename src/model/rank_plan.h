// Tensor parallelism: one rank's share of the model, derived from the full layer plan. The rules
// are the ones the Inferentia2 port found the hard way ("mixed heads"):
//
//   query heads   split evenly: rank r holds heads [r*nq/tp, (r+1)*nq/tp) (q_proj rows, o_proj
//                 columns). nq % tp != 0 is an error: a head cannot be cut.
//   K/V heads     split only when the layer's nkv divides by tp, keeping group_size, so each
//                 rank's query heads map to its own KV heads (E4B 8q/2kv, 12B sliding 16q/8kv).
//                 Otherwise K/V are replicated (kv_head_offset 0) and the grouping is re-derived
//                 through q_head_offset / group_size (E2B's MQA layers, the 12B's global layers
//                 with one KV head). Dividing the group count as well scrambles which query reads
//                 which KV head ("plausible-looking but wrong output").
//   MLP           gate/up rows and down columns split evenly (width % tp != 0 is an error).
//   replicated    norms, the PLE block, the embedding lookup, RoPE, sampling.
//   LM head       split by vocabulary rows (logits all-gathered) or kept on rank 0.
//
// After o_proj and down_proj each rank holds a partial sum; Forward all-reduces them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "model/plan.h"

namespace g4 {

struct RankPlanOptions {
  // Split: every rank reads 1/tp of the head and the logits are gathered (one all-gather of
  // vocab floats per row). Rank 0: the other ranks wait while rank 0 reads the whole head.
  LmHeadPlacement lm_head = LmHeadPlacement::kSplitVocab;
};

// OK if `full` can be split over tp ranks; else an error that names the layer and says why,
// and lists the rank counts that would work.
Status CheckTensorParallel(const ModelPlan& full, int tp);

// Rank counts this model supports (divisors of every layer's query-head count and MLP width).
std::vector<int> SupportedTensorParallel(const ModelPlan& full);

// The plan of rank `rank` of `tp`. tp == 1 returns `full` unchanged.
Result<ModelPlan> BuildRankPlan(const ModelPlan& full, int rank, int tp, const RankPlanOptions& options = {});

// True when the rank plan's layer holds the same K/V heads as the full model.
inline bool KvReplicated(const LayerPlan& full_layer, const LayerPlan& rank_layer) {
  return full_layer.n_heads_kv == rank_layer.n_heads_kv;
}

// What one rank holds, for `g4 inspect --tp` and capacity planning. Matches what
// LoadRankWeights allocates (tested).
struct RankMemory {
  int64_t matrix_bytes = 0;       // weight matrices copied into engine memory
  int64_t vector_bytes = 0;       // norms and scalars (fp32)
  int64_t mapped_bytes = 0;       // PLE table (+ the embedding table for lookups when split),
                                  // mapped from the checkpoint, one row read per token
  int64_t kv_bytes_per_token = 0; // fp32 K+V of this rank's cache owners, per token of context
};
// `matrix_element_bytes`: 2 for a bf16 checkpoint kept as bf16, 4 when widened to fp32.
RankMemory EstimateRankMemory(const ModelPlan& rank_plan, int matrix_element_bytes = 2);

}  // namespace g4
