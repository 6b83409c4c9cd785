#include "model/rank_plan.h"

#include <numeric>

namespace g4 {

std::vector<int> SupportedTensorParallel(const ModelPlan& full) {
  int g = 0;
  for (const LayerPlan& l : full.layers) g = std::gcd(g, std::gcd(l.n_heads_q, l.mlp_width));
  std::vector<int> out;
  for (int tp = 1; tp <= g; ++tp)
    if (g % tp == 0 && tp <= full.vocab) out.push_back(tp);
  return out;
}

Status CheckTensorParallel(const ModelPlan& full, int tp) {
  auto supported = [&] {
    std::string s;
    for (int t : SupportedTensorParallel(full)) s += (s.empty() ? "" : ", ") + std::to_string(t);
    return s;
  };
  if (tp < 1) return Status::Errorf("--tp ", tp, ": the number of ranks must be at least 1");
  for (const LayerPlan& l : full.layers) {
    if (l.n_heads_q % tp != 0)
      return Status::Errorf("--tp ", tp, ": layer ", l.index, " has ", l.n_heads_q,
                            " query heads, which do not split evenly over ", tp,
                            " ranks (a rank holds whole heads); this model supports --tp ", supported());
    if (l.mlp_width % tp != 0)
      return Status::Errorf("--tp ", tp, ": layer ", l.index, " has MLP width ", l.mlp_width,
                            ", which does not split evenly over ", tp,
                            " ranks; this model supports --tp ", supported());
  }
  if (tp > full.vocab)
    return Status::Errorf("--tp ", tp, ": more ranks than vocabulary rows (", full.vocab, ")");
  return OkStatus();
}

Result<ModelPlan> BuildRankPlan(const ModelPlan& full, int rank, int tp, const RankPlanOptions& options) {
  G4_RETURN_IF_ERROR(CheckTensorParallel(full, tp));
  if (rank < 0 || rank >= tp) return Status::Errorf("rank ", rank, " is outside [0, ", tp, ")");
  ModelPlan p = full;
  p.tp_rank = rank;
  p.tp_size = tp;
  p.lm_head = options.lm_head;
  if (tp == 1) return p;
  for (LayerPlan& l : p.layers) {
    const int nq = l.n_heads_q / tp;
    l.q_head_offset = rank * nq;
    l.n_heads_q = nq;
    // group_size is the unsharded model's: global query head h reads global KV head h / group_size
    // in both branches below; only what the rank holds differs.
    if (l.n_heads_kv % tp == 0) {
      // Sharded: the rank's nq query heads are exactly the groups of its nkv/tp KV heads.
      const int nkv = l.n_heads_kv / tp;
      l.kv_head_offset = rank * nkv;
      l.n_heads_kv = nkv;
    } else {
      // Replicated: every rank holds all KV heads; its query heads pick theirs by global index.
      l.kv_head_offset = 0;
    }
    const int width = l.mlp_width / tp;
    l.mlp_offset = rank * width;
    l.mlp_width = width;
  }
  return p;
}

RankMemory EstimateRankMemory(const ModelPlan& p, int e) {
  RankMemory m;
  const int64_t H = p.hidden, P = p.ple_dim, L = p.n_layers();
  const int64_t head_rows = p.lm_head_end() - p.lm_head_begin();
  m.matrix_bytes += head_rows * H * e;
  m.vector_bytes += H * 4;  // final norm
  if (p.tp_size > 1) m.mapped_bytes += static_cast<int64_t>(p.vocab) * H * 2;  // lookup table
  if (P > 0) {
    m.mapped_bytes += static_cast<int64_t>(p.vocab) * L * P * 2;
    m.matrix_bytes += L * P * H * e;  // per_layer_model_projection
    m.vector_bytes += P * 4;
  }
  for (const LayerPlan& l : p.layers) {
    const int64_t q = l.q_dim(), kv = l.kv_dim();
    m.matrix_bytes += 2 * q * H * e;  // q_proj, o_proj
    m.vector_bytes += (4 * H + l.head_dim + 1) * 4;  // 4 norms, q_norm, layer_scalar
    if (l.owns_kv()) {
      m.matrix_bytes += (l.k_eq_v ? 1 : 2) * kv * H * e;
      m.vector_bytes += l.head_dim * 4;  // k_norm
      m.kv_bytes_per_token += 2 * kv * 4;
    }
    m.matrix_bytes += 3 * static_cast<int64_t>(l.mlp_width) * H * e;
    if (P > 0) {
      m.matrix_bytes += 2 * P * H * e;
      m.vector_bytes += H * 4;
    }
  }
  return m;
}

}  // namespace g4
