// Drafters propose tokens that the target model then verifies in one batched forward pass
// (runtime/speculative.h). A drafter sees the tokens so far and, for drafters that read the target
// itself (Gemma-4's assistant / multi-token-prediction heads), the target's KV cache and last
// hidden state; prompt lookup and a separate draft model need neither.
#pragma once

#include <vector>

#include "base/status.h"
#include "model/kv_cache.h"
#include "runtime/sampler.h"

namespace g4 {

struct DraftRequest {
  // Prompt and output so far. Its last token is the one the target runs next: the target's
  // cache holds all the others.
  const std::vector<int>* context = nullptr;
  int max_tokens = 0;
  // Drafters with probabilities (the assistant, a draft model) stop before a token whose
  // distribution's most likely token is below this (0: never). The test looks at the
  // distribution, not at the token drawn from it, so speculative sampling stays exact.
  float min_probability = 0;
  // For drafters that read the target (the assistant drafter, runtime/mtp_drafter.h): the
  // target's cache and the hidden state ([hidden] floats, after the final norm: the LM head's
  // input) of the row whose logits gave the context's last token. Null unless the drafter asks
  // for them (wants_target_state).
  const KvCache* target_cache = nullptr;
  const float* target_hidden = nullptr;
};

struct Draft {
  std::vector<int> tokens;
  // The distribution each token was drawn from (q in speculative sampling), one per token; empty
  // for a deterministic drafter, whose q is one-hot at its token (prompt lookup, greedy drafting).
  std::vector<TokenDistribution> q;
  void Clear() {
    tokens.clear();
    q.clear();
  }
};

class Drafter {
 public:
  virtual ~Drafter() = default;
  virtual const char* name() const = 0;
  // Proposes up to request.max_tokens tokens to follow the context into *draft (cleared first;
  // it may stay empty). Each call's context extends the accepted part of the previous one, or
  // follows a Reset().
  virtual Status Propose(const DraftRequest& request, Draft* draft) = 0;
  // Forget any state: the next context starts a new conversation.
  virtual void Reset() {}
  virtual bool wants_target_state() const { return false; }
};

}  // namespace g4
