// The assistant (MTP) drafter: Gemma-4's own drafter heads (model/assistant.h) read the target's
// KV cache and the hidden state of its last row, and draft greedily by chaining their own
// recurrent hidden. Stateless between proposals: everything it reads is the target's, so the
// slots of g4 serve share one assistant (their proposals run one after another on the engine
// thread).
#pragma once

#include <memory>

#include "model/assistant.h"
#include "runtime/drafter.h"

namespace g4 {

class MtpDrafter : public Drafter {
 public:
  explicit MtpDrafter(std::shared_ptr<Assistant> assistant) : assistant_(std::move(assistant)) {}
  const char* name() const override { return "mtp"; }
  // Drafts request.max_tokens tokens after context.back(), which the target's cache does not
  // hold yet (it holds every earlier token); deterministic, so draft->q stays empty.
  Status Propose(const DraftRequest& request, Draft* draft) override;
  // Whether Propose runs the assistant on this request (it drafts nothing or refuses otherwise);
  // g4 serve --tp asks it to send the followers exactly the proposals rank 0 drafts.
  static bool WillDraft(const DraftRequest& request);
  bool wants_target_state() const override { return true; }

 private:
  std::shared_ptr<Assistant> assistant_;
};

}  // namespace g4
