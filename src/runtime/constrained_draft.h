// Speculative decoding under a constraint (a grammar, forced prefixes or both): which drafts a
// constrained sequence may verify and the mask each verify row samples under, so that greedy
// output is plain constrained decoding's token for token. Shared by the scheduler (g4 serve) and
// GenerateSpeculative (g4 run / g4 bench).
#pragma once

#include <cstdint>
#include <vector>

#include "grammar/token_mask.h"
#include "runtime/drafter.h"

namespace g4 {

// The tokens that may come next given `generated` so far: those continuing one of `prefixes`
// that `generated` follows and has not finished. Empty: no constraint (no prefixes, or one is
// already complete; then it stays empty however `generated` grows).
std::vector<int> AllowedNextTokens(const std::vector<std::vector<int>>& prefixes,
                                   const std::vector<int>& generated);

// One sequence's verify-row masks, reused across steps.
struct DraftMasks {
  std::vector<uint64_t> rows;         // [drafts + 1][vocab / 64]
  std::vector<const uint64_t*> ptrs;  // per verify row: its mask (null: none); empty: unconstrained
  std::vector<uint64_t> forced;       // scratch: a forced prefix's next tokens as a mask
  // What VerifyDrafts takes as row_masks.
  const uint64_t* const* data() const { return ptrs.empty() ? nullptr : ptrs.data(); }
};

// A draft while a forced prefix has exactly one next token: those tokens (at most n_max) into
// `draft`. False: no forced prefix is active (the drafter proposes).
bool ForcedDraft(const std::vector<std::vector<int>>& prefixes, const std::vector<int>& generated,
                 int n_max, Draft& draft);

// Cuts `draft` at the first token the grammar or an active forced prefix rejects (and where the
// grammar would be finished or stuck: the row before picks that token itself) and fills
// masks.ptrs with each remaining verify row's mask: the forced prefix's next tokens while one is
// active, else the grammar's mask in the state after the drafts before it. `constraint` walks the
// drafts and is rolled back: it ends where it started. masks.ptrs is left empty when there is no
// constraint or the draft ends up empty (row 0 then samples under the current mask, as plain
// decoding does).
void ConstrainDraft(grammar::TokenConstraint* constraint,
                    const std::vector<std::vector<int>>& prefixes,
                    const std::vector<int>& generated, int vocab, Draft& draft, DraftMasks& masks);

}  // namespace g4
