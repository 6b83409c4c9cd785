#include "runtime/ngram_drafter.h"

#include <algorithm>

namespace g4 {

NgramDrafter::NgramDrafter(int n_min, int n_max)
    : n_min_(std::max(1, n_min)), n_max_(std::max(std::max(1, n_min), n_max)) {}

Status NgramDrafter::Propose(const DraftRequest& request, Draft* draft) {
  draft->Clear();
  const std::vector<int>& ctx = *request.context;
  const int64_t L = static_cast<int64_t>(ctx.size());
  if (request.max_tokens <= 0) return OkStatus();
  for (int64_t n = std::min<int64_t>(n_max_, L - 1); n >= n_min_; --n) {
    const int* suffix = ctx.data() + (L - n);
    // The latest earlier occurrence that has at least one token after it (j + n <= L - 1).
    for (int64_t j = L - n - 1; j >= 0; --j) {
      if (!std::equal(suffix, suffix + n, ctx.data() + j)) continue;
      const int64_t start = j + n;
      const int64_t end = std::min<int64_t>(L, start + request.max_tokens);
      draft->tokens.insert(draft->tokens.end(), ctx.begin() + start, ctx.begin() + end);
      return OkStatus();
    }
  }
  return OkStatus();
}

}  // namespace g4
