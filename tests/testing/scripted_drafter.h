// A drafter that knows the answer: for whichever of `prompts` the context starts with, it proposes
// the next tokens of the matching plain (non-speculative) output, then lets `spoil` change them,
// so that drafts are partly accepted and partly rejected and verification, rollback and emission
// are all exercised whatever the random weights say.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <vector>

#include "runtime/drafter.h"

namespace g4 {

class ScriptedDrafter : public Drafter {
 public:
  // `call` counts this drafter's proposals that matched a prompt, from 1.
  using Spoil = std::function<void(int call, std::vector<int>& tokens)>;
  // The vectors must outlive the drafter; `proposed`, if given, counts the tokens proposed.
  ScriptedDrafter(const std::vector<std::vector<int>>* prompts,
                  const std::vector<std::vector<int>>* outputs, Spoil spoil,
                  std::atomic<uint64_t>* proposed = nullptr)
      : prompts_(prompts), outputs_(outputs), spoil_(std::move(spoil)), proposed_(proposed) {}
  const char* name() const override { return "scripted"; }
  Status Propose(const DraftRequest& request, Draft* draft) override;

 private:
  const std::vector<std::vector<int>>* prompts_;
  const std::vector<std::vector<int>>* outputs_;
  Spoil spoil_;
  std::atomic<uint64_t>* proposed_;
  int calls_ = 0;
};

}  // namespace g4
