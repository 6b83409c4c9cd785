// The serving engine behind `g4 serve`: loads the model (in this process, or over a
// tensor-parallel rank group), its tokenizer and chat template, and starts the scheduler. The
// server (src/server) sees it only as a runtime/serving_engine.h ServingEngine.
#pragma once

#include <memory>
#include <string>

#include "base/status.h"
#include "cli/spec_flags.h"
#include "parallel/tp_serve.h"
#include "runtime/serving_engine.h"

namespace g4::cli {

struct ServeModelOptions {
  std::string model_dir;       // a checkpoint directory or a `g4 pack` artifact
  std::string quant = "bf16";  // weight format at load: bf16 (as shipped), q8, q4
  int threads = 0;             // compute threads per rank; 0 = all cores (shared among the ranks)
  // Tensor-parallel ranks: > 1 runs that many ranks as threads of this process; under mpirun
  // this process is rank 0 of the world (of this size) and the others follow (parallel/tp_serve.h).
  int tp = 1;
  std::string kv_type = "f32";  // the slots' KV cache format (--kv-type, kernels/kv_format.h)
  // Speculative decoding per slot (--spec, --draft, --draft-max, ...; the drafters run on rank 0,
  // an assistant that reads split KV heads on every rank in lockstep).
  SpecFlags spec;
};

// What a follower rank loads if rank 0's assistant drafts in lockstep: --spec mtp's --draft and
// --draft-quant (nothing for the other drafters).
LockstepDraft FollowerDraft(const SpecFlags& spec);

// Loads everything the server needs and starts the scheduler (and the tensor-parallel followers)
// with `scheduler_options`. The one place `g4 serve` loads a model.
Result<std::unique_ptr<ServingEngine>> LoadServingEngine(const ServeModelOptions& model,
                                                         const SchedulerOptions& scheduler_options);

}  // namespace g4::cli
