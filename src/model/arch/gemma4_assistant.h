// Gemma-4's assistant drafter (multi-token prediction, docs/speculative.md "mtp"): config and
// tensor table. The assistant is a 4-layer Gemma-4 decoder with no K/V of its own: its queries
// read the TARGET's cache (the last KV-owner layer of each attention type), its input is
// [target embedding x sqrt(Hb), target hidden] projected to its width Ha, and it predicts the
// next token with its own tied table, densely (12B) or through the sparse centroid head (E2B/E4B).
// Spec: docs/gemma4.md §10.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "model/model_config.h"
#include "model/plan.h"

namespace g4 {

struct AssistantConfig {
  std::string source;      // directory, for messages
  std::string model_type;  // gemma4_assistant or gemma4_unified_assistant
  int backbone_hidden = 0;             // Hb: the target's hidden size
  bool use_ordered_embeddings = false; // the centroid head (E2B/E4B)
  int num_centroids = 2048;
  int centroid_top_k = 32;
  ModelConfig text;  // the inner Gemma-4 text config (hidden_size = Ha)
};

// True for the model_type values of assistant checkpoints.
bool IsAssistantModelType(const std::string& model_type);

// Parses an assistant's config.json text. Errors name the field.
Result<AssistantConfig> ParseAssistantConfig(const std::string& config_json,
                                             const std::string& source);
// Reads config.json of DIR (a checkpoint directory or a `g4 pack` artifact).
Result<AssistantConfig> LoadAssistantConfig(const std::string& dir);

// True when MODEL (directory or artifact) has a config.json whose model_type is an assistant's.
bool IsAssistantCheckpoint(const std::string& model);

// The assistant's layers bound to a target: geometry from its own config, kv_source = the target
// layer whose cache each layer reads (HF: the last KV-owner layer of the same type), checked
// against the target (same KV heads, head dims, window, vocabulary, Hb).
struct AssistantPlan {
  AssistantConfig config;
  int hidden = 0;           // Ha
  int backbone_hidden = 0;  // Hb
  int vocab = 0;
  int mlp_width = 0;
  double rms_norm_eps = 1e-6;
  // kv_source/kv_slot index the TARGET's plan and cache; n_heads_kv and kv_head_offset are the
  // KV heads that cache holds (under tensor parallelism, maybe a share: LayerSplitsKv).
  std::vector<LayerPlan> layers;
  bool centroid_head() const { return config.use_ordered_embeddings; }
  int cluster_size() const { return vocab / config.num_centroids; }
};
Result<AssistantPlan> BuildAssistantPlan(const AssistantConfig& config, const ModelPlan& target);

// True when an assistant layer's queries read KV heads that this rank's cache does not hold
// (the target's layer keeps its K/V split over the tensor-parallel ranks).
inline bool LayerSplitsKv(const LayerPlan& layer) {
  return layer.n_heads_kv * layer.group_size < layer.n_heads_q;
}

// The assistant's checkpoint tensors (HF names, no prefix), expanded for a config.
enum class AssistantTensorKind { kMatrix, kVector, kScalar, kOrdering };
struct AssistantTensor {
  std::string name;
  AssistantTensorKind kind;
  std::vector<int64_t> shape;
  int layer = -1;  // -1: model-wide
  // A matrix `--draft-quant` / `g4 pack --quant` quantizes: the projections, every layer's
  // products and the dense head's table. The centroid head's clustered table and centroids are
  // read row by row and stay as shipped.
  bool quantizable = false;
};
std::vector<AssistantTensor> AssistantTensors(const AssistantConfig& config);

}  // namespace g4
