// Independent reference forward pass of the Gemma-4 text decoder: the oracle the engine is tested
// against, at any model size. Plain scalar loops straight from docs/gemma4.md §3, with full causal
// attention over a K/V cache of its own (in T), so a prompt plus a greedy continuation costs one
// pass per token. It shares nothing with the engine except io/safetensors: it parses config.json
// itself (reference_config.cc), derives its own layer facts and has its own loops.
//
// Memory: weights are never copied. Each matrix-vector product widens the rows it needs from the
// mapped checkpoint (bf16/f16/f32 -> T, one row per thread at a time); the embedding and PLE
// tables are read one row per token. What it holds besides the mapping is the norms, the K/V cache
// and one chunk's activations (and the logits the caller asks for).
//
// Threads: products are split over output rows and attention over (position, head); every output
// element is computed by the same scalar loop in the same order whatever the thread count or the
// chunking of the positions, so the results are bit-identical across both.
//
// Numerics: Hugging Face's math without its intermediate bf16 rounding, in the scalar type T
// (double for the oracle; float to measure a checkpoint's noise floor). The one rounding kept is
// HF's: the embedding scales sqrt(H) and sqrt(P) are rounded to the weight dtype (39.25 for E2B).
// Widening bf16/f16/f32 to T is exact.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "base/thread_pool.h"

namespace g4::reference {

// What the reference derives for one layer from config.json (spec §1.2-§1.4, §4, §5).
struct LayerFacts {
  bool sliding = false;
  int head_dim = 0;
  int n_heads_q = 0;
  int n_heads_kv = 0;
  int window = 0;       // sliding: key j visible from query pos iff 0 <= pos - j < window; 0 = full
  int kv_source = 0;    // layer whose K/V this layer attends to; itself unless KV-shared
  bool k_eq_v = false;  // no v_proj: V = weightless RMSNorm of the raw k_proj output
  int rope_pairs = 0;   // pairs (j, j + head_dim/2) with j < rope_pairs rotate
  double rope_theta = 0;
  int mlp_width = 0;
};

struct ReferenceConfig {
  int vocab = 0;
  int hidden = 0;
  int ple_dim = 0;  // hidden_size_per_layer_input; 0 = no per-layer embeddings
  double rms_norm_eps = 1e-6;
  double softcap = 0;  // final_logit_softcapping; 0 = none
  std::vector<LayerFacts> layers;
};

// Parses DIR/config.json (any accepted form) into the reference's own facts.
Result<ReferenceConfig> ReadReferenceConfig(const std::string& dir);
// The same from config.json text; `path` names it in errors.
Result<ReferenceConfig> ParseReferenceConfig(const std::string& text, const std::string& path);

// Writes rows [first, first + rows) of one weight matrix as floats, row after row. Called from
// several threads at once.
using RowReader = std::function<void(int64_t first, int rows, float* out)>;

struct ReferenceOptions {
  bool ignore_layer_scalar = false;  // for the test that layer_scalar matters
  int threads = 0;                   // 0 = one per hardware thread
  // Weights to run on in place of the checkpoint's, matrix by matrix: given a matrix's name under
  // the text prefix ("layers.0.mlp.up_proj.weight", "embed_tokens.weight", which is also the LM
  // head), a reader of its rows, or an empty one to keep the checkpoint's. For checking an engine
  // against the quantized weights it really holds (g4 validate); everything else (config, norms,
  // scales, the PLE table) stays the checkpoint's, and the arithmetic stays the reference's.
  std::function<RowReader(const std::string& name)> replace_rows;
};

// Test probes, honoured by Logits<double> only.
struct ReferenceHooks {
  // After a KV-owner layer computed position `pos`: the raw k_proj output [nkv*hd] and the K
  // (k_norm + RoPE) and V (weightless norm) it caches, which the hook may modify.
  std::function<void(int layer, int pos, const std::vector<double>& k_raw, std::vector<double>& k,
                     std::vector<double>& v)>
      on_kv;
  // The attention output of layer `layer` at `pos`: heads concatenated, before o_proj.
  std::function<void(int layer, int pos, const std::vector<double>& attention)> on_attention;
  // The final-normed hidden state of `pos` (the LM head's input), for every row with logits.
  std::function<void(int pos, const std::vector<double>& hidden)> on_final_hidden;
};

// RoPE on one head in place (HF rotate_half layout): for j < rope_pairs the pair
// (x[j], x[j + head_dim/2]) rotates by pos * theta^(-2j/head_dim); all other dims pass through.
template <class T>
void ApplyRope(T* x, int head_dim, int rope_pairs, double theta, int pos);

class ReferenceModel {
 public:
  // Loads DIR (config.json + model.safetensors or a sharded index). Text tensors are read under
  // "model.language_model." or "model."; tower tensors and shared layers' K/V are ignored.
  static Result<std::unique_ptr<ReferenceModel>> Load(const std::string& dir,
                                                      const ReferenceOptions& options = {});

  // Softcapped logits for every position of `ids` (teacher forcing), computed in T. The positions
  // go through the layers `chunk` at a time (0 = all at once), each chunk attending to the cached
  // K/V of the ones before; the result does not depend on `chunk` (tested).
  template <class T>
  Result<std::vector<std::vector<double>>> Logits(const std::vector<int>& ids,
                                                  const ReferenceHooks* hooks = nullptr,
                                                  int chunk = 0) const;

  // The same logits streamed: row_fn(pos, row) for every position in order, `chunk` positions
  // (0 = all) held at a time, so long sequences over a 262,144-token vocabulary need not fit.
  using RowFn = std::function<void(int pos, const std::vector<double>& row)>;
  template <class T>
  Status ForEachLogits(const std::vector<int>& ids, int chunk, const RowFn& row_fn) const;

  // Greedy decoding in double: n_new argmax tokens after the prompt (no stop tokens).
  Result<std::vector<int>> Greedy(const std::vector<int>& prompt, int n_new) const;

  struct GreedyStep {
    int token = 0;
    double top1 = 0, top2 = 0;  // the two largest softcapped logits at that step
  };
  Result<std::vector<GreedyStep>> GreedyTrace(const std::vector<int>& prompt, int n_new) const;

  const ReferenceConfig& config() const { return config_; }
  // sqrt(H) and sqrt(P) as applied: rounded to the dtype of their tables, as HF does.
  double embedding_scale() const;
  double ple_scale() const;
  const std::vector<LayerFacts>& layers() const { return config_.layers; }
  // Row `token` of the embedding table times embedding_scale(), in double (the assistant
  // drafter's input, reference/assistant.h).
  std::vector<double> ScaledEmbedding(int token) const;
  int threads() const;

  ~ReferenceModel();

 private:
  struct Weights;
  template <class T>
  struct Cache;
  enum class LogitRows { kAll, kLast };
  ReferenceModel() = default;
  // Runs ids[0..n) at positions cache.n_past.. through the model, appending their K/V to `cache`.
  template <class T>
  Status Forward(Cache<T>& cache, const int* ids, int n, const ReferenceHooks* hooks,
                 LogitRows rows, std::vector<std::vector<double>>* logits) const;

  ReferenceConfig config_;
  ReferenceOptions options_;
  std::unique_ptr<Weights> w_;
  std::unique_ptr<ThreadPool> pool_;
};

}  // namespace g4::reference
