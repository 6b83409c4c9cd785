// The fast forward pass over bf16/f32 weights with fp32 activations. One call runs a batch of
// rows; each row is one token of one sequence at one position, with that sequence's KV cache.
// A prefill chunk is many rows of one sequence; a batched decode step is one row from each of
// many sequences; both go through the same code (matrix-matrix products over all rows).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "base/thread_pool.h"
#include "kernels/attention.h"
#include "kernels/row_lookup.h"
#include "model/communicator.h"
#include "model/kv_cache.h"
#include "model/plan.h"
#include "model/weights.h"

namespace g4 {

struct BatchRow {
  int token = 0;
  int64_t pos = 0;
  KvCache* cache = nullptr;
  bool want_logits = false;
};

// Scratch activations, sized for the largest batch seen; reused so decode does not allocate.
struct Activations {
  int capacity_rows = 0;
  std::vector<float> x, normed, q, k, v, attn, proj, gate, up, ple_inputs, ple_gate, ple_out;
  std::vector<float> rope_cos, rope_sin;  // [n_rope_configs][rows][max_pairs]
  std::vector<float> logits_in;
  std::vector<uint8_t> row_bytes;    // a mapped embedding / PLE row on its way to fp32
  std::vector<AttentionRow> attention_rows;  // one per row: its query, output and cache slot
  AttentionScratch attention;  // pre-sized for the rows' longest context on each Forward
  std::vector<float> logits_block, logits_gathered;  // tensor parallel: this rank's vocab block, all blocks
  void Reserve(const ModelPlan& plan, int rows, int n_rope_configs, int max_pairs);
};

// The token embedding as a model holds it: the whole (tied) matrix, or, when that is only a
// tensor-parallel rank's vocabulary block, the checkpoint's table left mapped. Rows read through
// LookupRow come out scaled by sqrt(hidden) (the model's embed_scale).
RowTable EmbeddingTable(const ModelWeights& w, int hidden);

class Model {
 public:
  // A model over bound weights (model/loader.h's LoadModel builds one from a checkpoint or an
  // artifact). `source` names where they came from; `threads` 0 = one per hardware thread.
  // kernel_layout: reorder q8/q4 matrices into the active kernels' layout (ToKernelLayout).
  Model(std::string source, ModelPlan plan, std::unique_ptr<ModelWeights> weights, int threads,
        bool kernel_layout = true);

  const ModelPlan& plan() const { return plan_; }
  const ModelWeights& weights() const { return *weights_; }
  ThreadPool& pool() { return *pool_; }
  const std::string& dir() const { return dir_; }

  // Runs the rows, writes their K/V into their caches and stores the raw (pre-softcap) logits
  // of the rows with want_logits, in row order, into logits[n_wanted * vocab].
  // Rows of one cache must be adjacent in `rows`, at consecutive positions from that cache's n_past, at most
  // cache->max_chunk() of them, below its max_context.
  Status Forward(const std::vector<BatchRow>& rows, Activations& act, float* logits);

  // Sizes `act` for calls of up to `rows` rows over caches of up to `max_context` positions, so
  // that such calls allocate nothing (speculative decoding's verify passes of draft_max + 1 rows).
  void ReserveActivations(Activations& act, int rows, int64_t max_context) const;

  // Tensor parallelism: this model holds one rank's slices (its plan has the rank's heads and
  // widths); partial sums of o_proj and down_proj are all-reduced through `comm`, and the LM
  // head's vocabulary blocks are gathered (or broadcast from rank 0), so every rank gets the
  // same full logits. Every rank must call Forward with the same rows.
  void set_communicator(Communicator* comm) { comm_ = comm; }
  Communicator* communicator() const { return comm_; }

  // For tests: disables the layer_scalar multiply (proves the tests notice its absence).
  void set_skip_layer_scalar(bool skip) { skip_layer_scalar_ = skip; }
  // For tests and measurements: the blocked attention's tile sizes (kernels/attention.h; 0 = auto).
  void set_attention_tiles(AttentionTiles tiles) { attention_tiles_ = tiles; }

 private:
  struct RopeConfig {
    int head_dim;
    int pairs;
    double theta;
    std::vector<double> inv_freq;
  };
  void Prepare(int threads, bool kernel_layout);
  Status CheckRows(const std::vector<BatchRow>& rows) const;
  void ReserveFor(const std::vector<BatchRow>& rows, Activations& act) const;
  void RopeAngles(const std::vector<BatchRow>& rows, Activations& act) const;
  void DecoderLayer(const LayerPlan& lp, const std::vector<BatchRow>& rows, Activations& act);
  Status ComputePle(const std::vector<BatchRow>& rows, Activations& act);
  void Attention(const LayerPlan& lp, const std::vector<BatchRow>& rows, Activations& act);
  void LmHead(int m, Activations& act, float* logits);

  std::string dir_;
  ModelPlan plan_;
  std::unique_ptr<ModelWeights> weights_;
  std::unique_ptr<ThreadPool> pool_;
  std::vector<RopeConfig> rope_configs_;
  std::vector<int> layer_rope_config_;
  int max_rope_pairs_ = 0;
  int max_heads_q_ = 0, max_head_dim_ = 0;  // over the layers: sizes the attention scratch
  bool skip_layer_scalar_ = false;
  AttentionTiles attention_tiles_;
  Communicator* comm_ = nullptr;
};

}  // namespace g4
