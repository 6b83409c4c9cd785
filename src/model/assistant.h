// Gemma-4's assistant drafter: one draft step and chained greedy drafting (docs/gemma4.md §10).
// The assistant owns no K/V: its four layers' queries attend over the TARGET's cache (the last
// KV-owner layer of each attention type), at the position of the token being drafted from, to
// the keys strictly before it (sliding layers: the W-1 before it). Its input is
// [target embedding(token) x sqrt(Hb), h], h being the target's post-final-norm hidden state of
// the previous position on the first step and the assistant's own post_projection output after.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "base/thread_pool.h"
#include "kernels/attention.h"
#include "model/arch/gemma4_assistant.h"
#include "model/assistant_weights.h"
#include "model/forward.h"
#include "model/kv_cache.h"

namespace g4 {

class Assistant {
 public:
  // Loads DIR (config.json + safetensors, or an assistant artifact from `g4 pack`) and binds it
  // to `target` (geometry checked). Matrices keep a bf16 checkpoint's format (f16/f32 become
  // f32); with `quant` q8 or q4 they are quantized as the engine's loader quantizes a target's
  // (the centroid head's centroids and clustered table excepted: they are read row by row), so a
  // dense-head step (the 12B's) reads 53% (q8) or 28% (q4) of the bf16 bytes. An artifact holds
  // its format: `quant` bf16 takes it as packed, another format must match it. Drafts only
  // propose: the output stays the target's.
  //
  // Tensor parallel targets (`target` holds one rank's share): with `lockstep` null the assistant
  // drafts alone from this rank's cache, so every layer it reads must keep all its KV heads here
  // (replicated, as E2B's single KV head is), else an error. With `lockstep` (the target's rank
  // group), every rank loads it and calls Draft with the same arguments in the same order; the
  // caller keeps rank 0's tokens (runtime/speculative.cc broadcasts them). Each rank attends with
  // the queries of the KV heads it holds and the outputs are summed over the ranks; when no layer
  // is split, only rank 0 drafts.
  static Result<std::unique_ptr<Assistant>> Load(const std::string& dir, Model& target,
                                                 Communicator* lockstep = nullptr,
                                                 WeightType quant = WeightType::kBF16);

  const AssistantPlan& plan() const { return plan_; }
  // Some layer reads KV heads spread over the lockstep ranks: every rank must call Draft.
  bool splits_kv() const { return splits_kv_; }

  // One step: the token `token` at position `pos` (not yet in `cache`, which holds [0, pos)),
  // with input hidden h [Hb]. Writes the logits [vocab] (centroid head: the candidates' logits,
  // every other id min(candidates) - 1) and h_next [Hb].
  Status Step(const KvCache& cache, int token, int64_t pos, const float* h, float* logits,
              float* h_next);

  // Chained greedy drafting of up to n tokens from (token, pos, h): each step feeds back its
  // argmax and its h_next, at the same position (spec: the assistant cannot extend the cache).
  // With the centroid head the argmax is taken over the candidates' scores alone (the token the
  // dense logits' ArgMax picks), so no vocabulary-wide array is written or read. The chain stops
  // before the first step whose argmax has a probability below min_probability (0: never): the
  // softmax of the candidates' scores with the centroid head, of all logits with the dense one.
  Status Draft(const KvCache& cache, int token, int64_t pos, const float* h, int n,
               std::vector<int>* tokens, float min_probability = 0);

  // For tests: a dense head over all ids even when the checkpoint has the centroid head (ids
  // that token_ordering never lists, which no cluster can propose, get -inf).
  void set_dense_head(bool dense) { dense_head_ = dense; }

 private:
  struct Layer {
    std::vector<float> input_norm, post_attention_norm, pre_feedforward_norm,
        post_feedforward_norm, q_norm;
    WeightMatrix q_proj, o_proj, gate_proj, up_proj, down_proj;
    float layer_scalar = 1;
  };
  Assistant(Model& target, AssistantPlan plan) : target_(target), plan_(std::move(plan)) {}
  // Reads every tensor of PATH (a checkpoint directory or an assistant artifact) and installs it.
  Status Bind(const std::string& path, WeightType quant);
  // Puts one tensor in its slot; a matrix's bytes move into buffers_ (q8/q4 in kernel layout).
  Status Install(const AssistantTensor& t, AssistantWeight w);
  void ClusterTable();
  // Step without the head: leaves z (the final-normed state) in z_ and writes h_next.
  Status Trunk(const KvCache& cache, int token, int64_t pos, const float* h, float* h_next);
  void LmHead(const float* z, float* logits);
  // Centroid head: the top clusters' rows of the clustered table into candidate_rows_ (row r
  // is id ordering_[r]), their scores into candidates_.
  void ScoreCandidates(const float* z);
  int BestCandidate() const;

  Model& target_;
  AssistantPlan plan_;
  Communicator* lockstep_ = nullptr;
  bool splits_kv_ = false;  // some layer's KV heads are spread over the lockstep ranks
  bool dense_head_ = false;
  std::vector<std::vector<uint8_t>> buffers_;  // owned weight bytes
  // embed_: the tied head's table; with the centroid head in cluster order (row i is id
  // ordering_[i]).
  WeightMatrix embed_, pre_projection_, post_projection_, centroids_;
  std::vector<float> final_norm_;
  std::vector<int32_t> ordering_;  // [vocab]: cluster k's ids at [k * cluster_size, ...)
  std::vector<Layer> layers_;
  std::vector<std::vector<double>> inv_freq_;  // per layer
  // Scratch, sized once.
  std::vector<float> in_, x_, a_, q_, attn_, o_, gate_, up_, z_, scores_, next_h_;
  std::vector<float> step_logits_, candidates_, cos_, sin_, chain_h_;
  std::vector<float> kth_;   // the centroid scores, partitioned around the k-th largest
  std::vector<int> top_;     // the top clusters, by index
  std::vector<int32_t> candidate_rows_;
  std::vector<float> dense_rows_;  // the dense test hook's scores in table order
  std::vector<uint8_t> embed_row_bytes_;  // a mapped embedding row on its way to fp32
  int64_t reserved_context_ = 0;
  // The step's products and attention run on step_pool_: serial_ (the calling thread) when the
  // step reads at most kSerialStepBytes of weights, else the target's pool.
  static constexpr size_t kSerialStepBytes = size_t{4} << 20;
  ThreadPool serial_{1};
  ThreadPool* step_pool_ = nullptr;
  // The trunk's matrices, in the order a step reads them. A serial trunk of at most
  // kWarmTrunkBytes (about one core's L2) asks for all of them at the step's start: the target's
  // pass in between has flushed them, and one product at a time waits on memory ~25 times.
  // The default assistant's 1.2 MB trunk on a Zen 4 core (1 MiB L2): 0.10-0.13 ms against
  // 0.14-0.17; asking for the centroid table too (1.7 MB) or one layer ahead was no faster.
  static constexpr size_t kWarmTrunkBytes = size_t{3} << 19;
  std::vector<const WeightMatrix*> trunk_matrices_;
  bool warm_trunk_ = false;
  AttentionScratch attention_;
};

}  // namespace g4
