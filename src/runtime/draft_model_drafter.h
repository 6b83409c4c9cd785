// Draft-model drafting: a smaller Gemma-4 with the target's vocabulary runs ahead of the target
// with a KV cache of its own, kept in step with the tokens the target accepts (rolled back past
// the rejected ones, like the target's).
#pragma once

#include <memory>

#include "model/forward.h"
#include "runtime/drafter.h"

namespace g4 {

class DraftModelDrafter : public Drafter {
 public:
  // `draft` must outlive the drafter and have `target_vocab` tokens. It drafts greedily when
  // `sampling` is greedy, else samples with the same parameters (its own generator) and reports
  // the distributions for speculative sampling. `context` bounds its cache like the target's;
  // `max_chunk` must exceed the longest draft.
  static Result<std::unique_ptr<DraftModelDrafter>> Create(Model& draft, int target_vocab,
                                                           const SamplingParams& sampling,
                                                           int context, int max_chunk);
  const char* name() const override { return "draft"; }
  Status Propose(const DraftRequest& request, Draft* draft) override;
  void Reset() override;

 private:
  DraftModelDrafter(Model& draft, const SamplingParams& sampling, int context, int max_chunk);
  // Runs ids[begin, end) after the cache and leaves the last row's logits in logits_.
  Status Feed(const std::vector<int>& ids, size_t begin, size_t end);

  Model& model_;
  KvCache cache_;
  Activations act_;
  Sampler sampler_;
  std::vector<int> cached_;  // the tokens the cache holds, [0, n_past)
  std::vector<int> history_; // drafted tokens so far in this proposal (penalties' history)
  std::vector<BatchRow> rows_;
  std::vector<float> logits_;
};

}  // namespace g4
