// Speculative decoding: a drafter proposes up to N tokens, the target runs
// [last token, d1..dN] as one batched forward with logits for every row, keeps the longest prefix
// its own sampler agrees with, adds one token of its own (the correction at the first rejection,
// or a bonus token after the last draft) and rolls its KV cache back past the rejected rows.
//
// Greedy: a draft is kept when it equals the target's argmax, so the output is the target's greedy
// output token for token (up to float ties between a batched and a one-row pass). Sampling:
// standard speculative sampling (accept d with probability min(1, p(d)/q(d)), else draw from the
// normalised max(0, p - q)), so the output distribution is exactly the target's.
#pragma once

#include <functional>
#include <vector>

#include "base/function_ref.h"
#include "model/forward.h"
#include "runtime/drafter.h"
#include "runtime/generate.h"
#include "runtime/sampler.h"

namespace g4 {

struct SpeculativeOptions {
  int draft_max = 4;      // tokens drafted per target pass; must be below the cache's max_chunk
  bool adaptive = false;  // start at draft_max, one fewer after a rejection, one more after a
                          // fully accepted draft (between 1 and draft_max)
  float draft_p_min = 0;  // drafters stop before a token they give less probability (drafter.h)
  // The tokens the cache holds before the prompt (a conversation's earlier turns), if known:
  // drafters then see the whole conversation, not only the new turn.
  const std::vector<int>* cached = nullptr;
};

// Scratch for VerifyDrafts, reused across steps.
struct VerifyScratch {
  TokenDistribution p, residual;
  std::vector<double> q_dense;  // [vocab]: the drafter's q while a residual is built, else 0
};

// Decides what the target keeps of `draft`. `logits` holds draft.tokens.size() + 1 rows of the
// target's raw logits: row i follows the context and the first i drafted tokens. Appends the
// kept drafts and then one token of the target's own to `generated` (the sampler's penalty
// history), and returns how many tokens it appended (1 .. drafts + 1). `logits` is modified.
// Constrained sequences pass `row_masks` (drafts + 1 entries, each null or a vocab bitmask): row
// i samples, greedy or not, from the target's distribution masked to row_masks[i] (the grammar's
// mask in the state after the first i drafts), as plain constrained decoding would; each draft
// must be allowed by its row's mask. `picked`, if given, is called after each appended token,
// while the sampler still holds that row's distribution (Sampler::LogProb / TopLogProbs give the
// row's logprobs, equal to plain decoding's).
int VerifyDrafts(Sampler& sampler, float* logits, int vocab, const Draft& draft,
                 std::vector<int>& generated, VerifyScratch& scratch,
                 const uint64_t* const* row_masks = nullptr,
                 const FunctionRef<void(int token)>* picked = nullptr);

// Generate() with speculative decoding: the same prompt handling, callbacks, stop rules, result
// (plus the speculative counters) and constraint (options.constraint: drafts are cut at the first
// token the grammar rejects and verify row i samples under the mask after the first i drafts, so
// greedy output is constrained Generate's), and the cache ends as Generate leaves it (every token
// but the last generated one). The cache's max_chunk must exceed spec.draft_max.
Result<GenerateResult> GenerateSpeculative(Model& model, KvCache& cache,
                                           const std::vector<int>& prompt,
                                           const GenerateOptions& options, Drafter& drafter,
                                           const SpeculativeOptions& spec,
                                           const std::function<bool(int token)>& on_token = nullptr);

}  // namespace g4
