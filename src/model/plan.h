// The model as data: one LayerPlan row per layer, derived once from the config and read by
// every other part of the engine (weights, KV cache, forward, tensor parallel). Shared code
// reads these fields; it never asks which model is loaded.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "model/model_config.h"

namespace g4 {

enum class AttentionKind { kSliding, kFull };

// Where the tied LM head lives under tensor parallelism (model/rank_plan.h).
enum class LmHeadPlacement {
  kSplitVocab,  // rank r holds a contiguous block of vocabulary rows; logits are all-gathered
  kRank0,       // rank 0 holds every row and broadcasts the logits; the other ranks hold none
};

struct LayerPlan {
  int index = 0;
  AttentionKind kind = AttentionKind::kSliding;
  int head_dim = 0;
  int n_heads_q = 0;   // query heads held here (all of them unless tensor parallel)
  int n_heads_kv = 0;  // KV heads held here
  // GQA mapping, kept from the unsharded model: global query head h reads global KV head
  // h / group_size. Under tensor parallelism a rank holds query heads from q_head_offset and KV
  // heads from kv_head_offset (0 when K/V are replicated), so the mapping survives sharding.
  int group_size = 1;
  int q_head_offset = 0;
  int kv_head_offset = 0;
  int window = 0;      // sliding: key j visible from query pos iff 0 <= pos - j < window; 0 = full
  int kv_source = 0;   // layer whose K/V this layer reads; == index for KV-owner layers
  int kv_slot = -1;    // index of this layer's cache among the owners; -1 for shared layers
  bool k_eq_v = false; // no v_proj: V comes from the raw k_proj output (spec §5)
  double rope_theta = 10000.0;
  int rope_pairs = 0;  // pairs (j, j + head_dim/2) for j < rope_pairs rotate; the rest pass through
  int mlp_width = 0;   // gate/up rows (down columns) held here
  int mlp_offset = 0;  // first of them in the checkpoint's [intermediate] axis (tensor parallel)
  int ple_offset = -1; // first column of this layer's slice of the per-layer inputs; -1 = no PLE

  bool owns_kv() const { return kv_source == index; }
  bool is_sliding() const { return kind == AttentionKind::kSliding; }
  int q_dim() const { return n_heads_q * head_dim; }
  int kv_dim() const { return n_heads_kv * head_dim; }
};

struct ModelPlan {
  std::string architecture;  // its entry in model/architecture.h ("gemma4")
  ModelConfig config;
  std::vector<LayerPlan> layers;
  int hidden = 0;
  int vocab = 0;
  int ple_dim = 0;  // hidden_size_per_layer_input (P); 0 = no per-layer embeddings
  int first_kv_shared = 0;
  double softcap = 0.0;
  double rms_norm_eps = 1e-6;
  std::vector<int> kv_owners;  // layer indices that own a cache, in order of kv_slot

  // Tensor parallelism (model/rank_plan.h): this plan is rank tp_rank's share of tp_size.
  // Layer fields above are then the rank's heads and widths; `vocab` stays the full vocabulary
  // (token ids and gathered logits), the LM head rows held here are [lm_head_begin, lm_head_end).
  int tp_rank = 0;
  int tp_size = 1;
  LmHeadPlacement lm_head = LmHeadPlacement::kSplitVocab;
  // Vocabulary rows per rank when split: ceil(vocab / tp_size); the last block may be short.
  int lm_head_block() const { return tp_size == 1 ? vocab : (vocab + tp_size - 1) / tp_size; }
  int lm_head_begin() const;
  int lm_head_end() const;

  int n_layers() const { return static_cast<int>(layers.size()); }
  int max_q_dim() const;
  int max_kv_dim() const;
  int max_head_dim() const;
  int max_mlp_width() const;
  // Bytes of K+V cache per token of context for one layer's cache at the given element size.
  int64_t kv_bytes_per_token(int owner_layer, int element_bytes) const;
};

// Human-readable plan table (g4 inspect).
std::string FormatPlan(const ModelPlan& plan);

}  // namespace g4
