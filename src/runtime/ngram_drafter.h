// Prompt lookup: drafts by copying what followed the latest earlier occurrence of the context's
// last n tokens (longest n first), over the prompt and the output so far. No model, no state;
// it pays off when the output repeats its input (summaries, edits, retrieval, code).
#pragma once

#include "runtime/drafter.h"

namespace g4 {

class NgramDrafter : public Drafter {
 public:
  // Matches suffixes of n_max down to n_min tokens (1 <= n_min <= n_max).
  NgramDrafter(int n_min, int n_max);
  const char* name() const override { return "ngram"; }
  Status Propose(const DraftRequest& request, Draft* draft) override;

 private:
  int n_min_, n_max_;
};

}  // namespace g4
