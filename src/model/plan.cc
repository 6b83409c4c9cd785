#include "model/plan.h"

#include <algorithm>
#include <cstdio>

namespace g4 {

int ModelPlan::max_q_dim() const {
  int m = 0;
  for (const auto& l : layers) m = std::max(m, l.q_dim());
  return m;
}
int ModelPlan::max_kv_dim() const {
  int m = 0;
  for (const auto& l : layers) m = std::max(m, l.kv_dim());
  return m;
}
int ModelPlan::max_head_dim() const {
  int m = 0;
  for (const auto& l : layers) m = std::max(m, l.head_dim);
  return m;
}
int ModelPlan::max_mlp_width() const {
  int m = 0;
  for (const auto& l : layers) m = std::max(m, l.mlp_width);
  return m;
}
int ModelPlan::lm_head_begin() const {
  if (tp_size == 1 || lm_head == LmHeadPlacement::kRank0) return 0;
  return std::min(vocab, tp_rank * lm_head_block());
}
int ModelPlan::lm_head_end() const {
  if (tp_size == 1) return vocab;
  if (lm_head == LmHeadPlacement::kRank0) return tp_rank == 0 ? vocab : 0;
  return std::min(vocab, (tp_rank + 1) * lm_head_block());
}
int64_t ModelPlan::kv_bytes_per_token(int owner_layer, int element_bytes) const {
  return 2LL * layers[owner_layer].kv_dim() * element_bytes;
}

std::string FormatPlan(const ModelPlan& plan) {
  std::string out =
      "layer  kind     head_dim  q_heads  kv_heads  window  kv_source  k_eq_v  rope_theta  "
      "rope_pairs  mlp_width  ple\n";
  char line[256];
  for (const auto& l : plan.layers) {
    std::snprintf(line, sizeof line, "%5d  %-7s  %8d  %7d  %8d  %6d  %9s  %6s  %10.0f  %10d  %9d  %3s\n",
                  l.index, l.is_sliding() ? "sliding" : "full", l.head_dim, l.n_heads_q,
                  l.n_heads_kv, l.window,
                  l.owns_kv() ? "own" : std::to_string(l.kv_source).c_str(),
                  l.k_eq_v ? "yes" : "no", l.rope_theta, l.rope_pairs, l.mlp_width,
                  l.ple_offset >= 0 ? "yes" : "no");
    out += line;
  }
  return out;
}

}  // namespace g4
