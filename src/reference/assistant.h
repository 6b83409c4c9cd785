// Independent reference of Gemma-4's assistant (MTP) drafter, one draft step in T (double for the
// oracle, float to measure the noise floor), straight from docs/gemma4.md §10. Like the rest of
// reference/ it shares nothing with the engine but io/safetensors: it reads the assistant's
// config.json and tensors itself, and takes the target's K/V and hidden state from the reference
// target's hooks (TargetState), not from the engine's cache.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "reference/reference.h"

namespace g4::reference {

// What the assistant reads of the target, captured through ReferenceHooks (Capture()).
struct TargetState {
  std::map<int, std::vector<std::vector<double>>> k, v;  // by target layer: [pos][kv heads x hd]
  std::map<int, std::vector<double>> hidden;             // final-normed hidden by position
  // Hooks that fill this state from a ReferenceModel::Logits<double> run.
  ReferenceHooks Capture();
};

class ReferenceAssistant {
 public:
  // Loads the assistant checkpoint DIR for the reference target `target` (sources: the target's
  // last KV-owner layer of each attention type).
  static Result<std::unique_ptr<ReferenceAssistant>> Load(const std::string& dir,
                                                          const ReferenceModel& target);
  ~ReferenceAssistant();

  // One step for `token` at `pos` (keys of positions < pos visible; sliding: the W-1 before it)
  // with input hidden h [Hb]: the logits [vocab] (centroid head: candidates scored, the others
  // min - 1) and h_next [Hb].
  template <class T>
  Result<std::vector<double>> Step(const TargetState& state, int token, int pos,
                                   const std::vector<double>& h, std::vector<double>* h_next) const;

  int vocab() const;
  std::vector<int> source_layers() const;  // per assistant layer

 private:
  struct Impl;
  ReferenceAssistant() = default;
  std::unique_ptr<Impl> impl_;
  const ReferenceModel* target_ = nullptr;
};

}  // namespace g4::reference
