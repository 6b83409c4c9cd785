#include "runtime/constrained_draft.h"

#include <algorithm>

#include "runtime/sampler.h"

namespace g4 {

std::vector<int> AllowedNextTokens(const std::vector<std::vector<int>>& prefixes,
                                   const std::vector<int>& generated) {
  std::vector<int> allowed;
  const size_t k = generated.size();
  for (const auto& prefix : prefixes) {
    if (!std::equal(generated.begin(), generated.begin() + std::min(k, prefix.size()),
                    prefix.begin()))
      continue;
    if (k >= prefix.size()) return {};  // this one is complete: free from here on
    if (std::find(allowed.begin(), allowed.end(), prefix[k]) == allowed.end())
      allowed.push_back(prefix[k]);
  }
  return allowed;
}

bool ForcedDraft(const std::vector<std::vector<int>>& prefixes, const std::vector<int>& generated,
                 int n_max, Draft& draft) {
  if (prefixes.empty()) return false;
  // Forced tokens are known: proposing them costs nothing, and each verify row's mask holds only
  // that token, so the target picks it exactly as plain decoding would (greedy or sampled).
  std::vector<int> ids = AllowedNextTokens(prefixes, generated);
  if (ids.empty()) return false;
  std::vector<int> seen = generated;
  while (ids.size() == 1 && static_cast<int>(draft.tokens.size()) < n_max) {
    draft.tokens.push_back(ids[0]);
    seen.push_back(ids[0]);
    ids = AllowedNextTokens(prefixes, seen);
  }
  return true;
}

void ConstrainDraft(grammar::TokenConstraint* constraint,
                    const std::vector<std::vector<int>>& prefixes,
                    const std::vector<int>& generated, int vocab, Draft& draft, DraftMasks& masks) {
  masks.ptrs.clear();
  if ((!constraint && prefixes.empty()) || draft.tokens.empty()) return;
  // A completed forced prefix stays complete: only a sequence still inside one pays for the
  // copy of its tokens below (the prefixes are a few tokens; the output may be thousands).
  const bool forcing = !prefixes.empty() && !AllowedNextTokens(prefixes, generated).empty();
  if (!constraint && !forcing) return;
  const size_t words = (static_cast<size_t>(vocab) + 63) / 64;
  const int n = static_cast<int>(draft.tokens.size());
  if (masks.rows.size() < static_cast<size_t>(n + 1) * words)
    masks.rows.resize(static_cast<size_t>(n + 1) * words);
  std::vector<int> seen;  // generated + the drafts so far, while a forced prefix is active
  if (forcing) seen = generated;
  // Row i's mask is the one plain decoding would use after the first i drafts. The recogniser
  // walks the drafts and is rolled back after; the caller advances it over the kept tokens only.
  size_t walked = 0;
  int kept = 0;
  for (int i = 0; i <= n; ++i) {
    uint64_t* row = masks.rows.data() + static_cast<size_t>(i) * words;
    const uint64_t* mask = nullptr;
    if (forcing) {
      const std::vector<int> ids = AllowedNextTokens(prefixes, seen);
      if (!ids.empty()) {
        TokenMaskOf(ids, vocab, &masks.forced);
        std::copy(masks.forced.begin(), masks.forced.end(), row);
        mask = row;
      }
    }
    if (!mask && constraint) {
      // Nothing may follow the last draft: drop it, so the target's own pick at the row before
      // (the same token, if it agrees) meets the dead end as plain decoding would.
      if (constraint->IsStuck()) {
        kept = std::max(0, i - 1);
        break;
      }
      std::copy_n(constraint->Mask(), words, row);
      mask = row;
    }
    masks.ptrs.push_back(mask);
    kept = i;
    if (i == n) break;
    const int d = draft.tokens[i];
    if (mask && !((mask[d >> 6] >> (d & 63)) & 1)) break;
    if (constraint) {
      if (!constraint->Accept(d)) break;
      ++walked;
      // The output would end with d: the row before picks d itself, and a row after it would be
      // thrown away.
      if (constraint->IsFinished()) break;
    }
    if (forcing) seen.push_back(d);
  }
  if (constraint) constraint->Rollback(walked);
  draft.tokens.resize(static_cast<size_t>(kept));
  if (draft.q.size() > draft.tokens.size()) draft.q.resize(draft.tokens.size());
  masks.ptrs.resize(kept > 0 ? static_cast<size_t>(kept) + 1 : 0);
}

}  // namespace g4
