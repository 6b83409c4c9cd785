// Collecting what a scheduler sequence produced, for tests that submit to a Scheduler.
//
//   SequenceRunner run;
//   scheduler.Submit(run.Request(prompt, 16));  // or run.Wire(request) on a request of your own
//   SequenceOutcome out = run.future.get();     // once the sequence is done
#pragma once

#include <future>
#include <memory>
#include <vector>

#include "runtime/scheduler.h"

namespace g4 {

// Sampling at `temperature` from a fixed seed, so a sampled run repeats.
inline SamplingParams SeededSampling(float temperature, uint64_t seed) {
  SamplingParams sp;
  sp.temperature = temperature;
  sp.seed = seed;
  sp.has_seed = true;
  return sp;
}

struct SequenceOutcome {
  std::vector<int> tokens;
  std::vector<TokenInfo> infos;  // one per token: its logprobs, when the request asked
  SequenceResult result;
};

// One sequence's collector: the callbacks Wire/Request install append each token to `outcome`
// and fulfil `future` with it when the sequence ends. Replace on_token to watch tokens yourself,
// pushing to outcome->tokens (or calling the installed one) as it does.
struct SequenceRunner {
  std::shared_ptr<std::promise<SequenceOutcome>> promise =
      std::make_shared<std::promise<SequenceOutcome>>();
  std::shared_ptr<SequenceOutcome> outcome = std::make_shared<SequenceOutcome>();
  std::future<SequenceOutcome> future = promise->get_future();

  void Wire(SequenceRequest& request);
  SequenceRequest Request(std::vector<int> prompt, int max_new);
};

}  // namespace g4
