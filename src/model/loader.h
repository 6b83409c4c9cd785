// The one way to load a model: LoadModel(source, options). SOURCE is a Hugging Face checkpoint
// directory (config.json + safetensors, single or sharded) or a `g4 pack` artifact; options
// choose the weight format, the threads, and under tensor parallelism the rank to load.
//
//   G4_ASSIGN_OR_RETURN(auto model, LoadModel(dir, options));                   // whole model
//   G4_ASSIGN_OR_RETURN(auto model, LoadModel(dir, options.OnRanks(comm)));     // comm's rank
#pragma once

#include <memory>
#include <string>

#include "base/status.h"
#include "model/communicator.h"
#include "model/forward.h"
#include "model/plan.h"
#include "model/weights.h"

namespace g4 {

struct ModelOptions {
  int threads = 0;  // 0 = one per hardware thread (under tensor parallelism: per rank on the host)
  LoadOptions load;
  // Reorder q8/q4 matrices into the active kernels' layout (ToKernelLayout); off for `g4 pack`,
  // whose artifacts hold the row-major layout every machine reads.
  bool kernel_layout = true;
  // Tensor parallelism: load rank `rank` of `tp` (model/rank_plan.h; an artifact must have been
  // packed with `--tp tp` and the same LM-head placement).
  int rank = 0;
  int tp = 1;
  LmHeadPlacement lm_head = LmHeadPlacement::kSplitVocab;
  // When set, rank and tp are comm's, every rank loads together (if any rank fails, all return
  // an error: none is left waiting in a collective for a peer that gave up) and the model is
  // attached to comm.
  Communicator* comm = nullptr;

  // These options on comm's rank (the whole model when comm is null).
  ModelOptions OnRanks(Communicator* comm,
                       LmHeadPlacement lm_head = LmHeadPlacement::kSplitVocab) const;
};

Result<std::unique_ptr<Model>> LoadModel(const std::string& source,
                                         const ModelOptions& options = {});

// True when `status` only says that a peer rank failed to load; the peer's own status has the
// cause. Under mpirun a process other than rank 0 reports its error only when it is its own
// (a damaged section of its rank), so the cause is printed once.
bool IsPeerFailure(const Status& status);

}  // namespace g4
