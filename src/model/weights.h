// Weights bound to the layer plan. Tensors used on every token are copied into memory the engine
// owns; only the PLE table (read one row per token) stays mapped from the checkpoint.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "base/streamed_buffer.h"
#include "base/thread_pool.h"
#include "io/safetensors.h"
#include "kernels/weight_matrix.h"
#include "model/plan.h"

namespace g4 {

struct LayerWeights {
  std::vector<float> input_norm, post_attention_norm, pre_feedforward_norm, post_feedforward_norm;
  std::vector<float> q_norm, k_norm;            // k_norm only on KV-owner layers
  WeightMatrix q_proj, k_proj, v_proj, o_proj;  // k/v only on owners; v empty when k_eq_v
  WeightMatrix gate_proj, up_proj, down_proj;
  WeightMatrix ple_gate, ple_projection;  // per_layer_input_gate [P,H], per_layer_projection [H,P]
  std::vector<float> ple_post_norm;       // post_per_layer_input_norm [H]
  float layer_scalar = 1.0f;
};

struct ModelWeights {
  WeightMatrix embed;  // embed_tokens [vocab, H]; also the tied LM head. Under tensor
                       // parallelism only the plan's LM-head rows [lm_head_begin, end).
  // Input lookups when `embed` is not the whole table: the checkpoint's [vocab, H] table stays
  // mapped and one row is read per token (like the PLE table). Null when embed is whole.
  const uint8_t* embed_table = nullptr;
  DType embed_table_dtype = DType::kBF16;
  // The format the whole `embed` would have (q8/q4 when it is quantized): a looked-up row is
  // quantized and dequantized again (blocks lie within a row), so every rank, and any rank
  // count, feeds the model the same input as one rank dequantizing its quantized embedding.
  WeightType embed_table_type = WeightType::kBF16;
  float embed_scale = 1;  // sqrt(H) rounded to the checkpoint dtype, as HF does (spec §3.1)
  std::vector<float> final_norm;
  // Per-layer embeddings (E2B/E4B): the table stays mapped.
  const uint8_t* ple_table = nullptr;  // [vocab, L*P] in ple_dtype
  DType ple_dtype = DType::kBF16;
  float ple_scale = 1;                     // sqrt(P) rounded to the checkpoint dtype
  WeightMatrix ple_model_projection;       // per_layer_model_projection [L*P, H]
  std::vector<float> ple_projection_norm;  // per_layer_projection_norm [P]
  std::vector<LayerWeights> layers;

  std::string tensor_prefix;             // "model.language_model." or "model."
  int64_t resident_bytes = 0;            // bytes copied into engine memory
  WeightType quant = WeightType::kBF16;  // the requested format (LoadOptions::quant)
  int64_t mapped_bytes = 0;              // bytes left mapped (PLE table, lookup table)

  // Keeps the mapped files (PLE table) and the owned buffers alive.
  std::unique_ptr<TensorStore> store;
  std::vector<StreamedBuffer> buffers;
  // A new owned buffer (counted in resident_bytes; base/streamed_buffer.h).
  uint8_t* Allocate(size_t bytes);
  // Every matrix slot (empty ones included): the embedding (also the tied LM head), the PLE
  // model projection, then each layer's.
  std::vector<const WeightMatrix*> Matrices() const;
  std::vector<WeightMatrix*> Matrices();
  // A packed artifact (model/pack_reader.h) whose mapping the PLE table points into (and the
  // matrices, until ToKernelLayout copies them out); null for a checkpoint.
  std::shared_ptr<const void> artifact;
};

struct LoadOptions {
  // Checkpoint bf16 stays bf16; f16/f32 tensors become f32 (no precision is thrown away).
  bool keep_native = true;
  // Format of the matrices (incl. the tied embedding / LM head). kBF16 keeps the checkpoint's
  // format; kQ8/kQ4 quantize at load every matrix whose width fits the block (the rest keep
  // theirs). The PLE table is never converted: it stays mapped.
  WeightType quant = WeightType::kBF16;
  int threads = 0;  // for the conversion; 0 = one per hardware thread
};

// Opens DIR's safetensors and binds every tensor the plan needs, checking names, shapes and
// dtypes. Errors name the file, the tensor and expected vs found.
Result<std::unique_ptr<ModelWeights>> LoadWeights(const ModelPlan& plan, const std::string& dir,
                                                  const LoadOptions& options = {});

// Tensor parallel: binds only the slices `rank` (a plan from model/rank_plan.h) holds, read
// straight from the mapped checkpoint, whose shapes are checked against `full`: q_proj rows and
// o_proj columns of its query heads, k/v rows of its KV heads (all of them when replicated),
// gate/up rows and down columns of its MLP block, the LM head's vocabulary rows. No rank copies
// the whole model.
Result<std::unique_ptr<ModelWeights>> LoadRankWeights(const ModelPlan& full, const ModelPlan& rank,
                                                      const std::string& dir,
                                                      const LoadOptions& options = {});

// Reorders the q8/q4 matrices into the layout the active kernels read fastest (row groups for
// the AVX-512 VNNI and AVX2 q8/q4 tables; kernels/quantize.h), in place for a checkpoint. A
// packed artifact's matrices, which point into its read-only mapping, are all reordered or copied
// into owned memory (read on every token, they must not be paged out with the file); only its
// PLE table stays mapped.
void ToKernelLayout(ModelWeights* w, ThreadPool* pool);

// Parameter counts for `g4 inspect` (spec §7), derived from the plan.
struct ParameterCounts {
  int64_t total = 0;  // every text tensor stored (incl. unused K/V of shared layers)
  int64_t ple_table = 0;
  int64_t embedding = 0;
  int64_t effective = 0;       // total minus the PLE table
  int64_t per_token_read = 0;  // weights touched per decoded token
};
ParameterCounts CountParameters(const ModelPlan& plan);

}  // namespace g4
