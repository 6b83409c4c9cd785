#include "runtime/mtp_drafter.h"

namespace g4 {

namespace {

bool HasTargetState(const DraftRequest& request) {
  return request.target_cache && request.target_hidden && request.context &&
         !request.context->empty();
}

}  // namespace

bool MtpDrafter::WillDraft(const DraftRequest& request) {
  return request.max_tokens > 0 && HasTargetState(request);
}

Status MtpDrafter::Propose(const DraftRequest& request, Draft* draft) {
  draft->Clear();
  if (!HasTargetState(request))
    return Status::Error("the mtp drafter needs the target's cache, hidden state and context");
  if (request.max_tokens <= 0) return OkStatus();
  return assistant_->Draft(*request.target_cache, request.context->back(),
                           request.target_cache->n_past(), request.target_hidden,
                           request.max_tokens, &draft->tokens, request.min_probability);
}

}  // namespace g4
