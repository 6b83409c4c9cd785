#include "testing/scripted_drafter.h"

#include <algorithm>

namespace g4 {

Status ScriptedDrafter::Propose(const DraftRequest& request, Draft* draft) {
  draft->Clear();
  const std::vector<int>& ctx = *request.context;
  for (size_t s = 0; s < prompts_->size(); ++s) {
    const std::vector<int>& p = (*prompts_)[s];
    if (ctx.size() < p.size() || !std::equal(p.begin(), p.end(), ctx.begin())) continue;
    const std::vector<int>& out = (*outputs_)[s];
    for (size_t i = ctx.size() - p.size();
         i < out.size() && static_cast<int>(draft->tokens.size()) < request.max_tokens; ++i)
      draft->tokens.push_back(out[i]);
    ++calls_;
    if (spoil_) spoil_(calls_, draft->tokens);
    if (proposed_) proposed_->fetch_add(draft->tokens.size());
    break;
  }
  return OkStatus();
}

}  // namespace g4
