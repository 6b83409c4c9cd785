// Tensor-parallel serving (`g4 serve --tp N`, or `mpirun -np N g4 serve`). Rank 0 runs the HTTP
// server and the Scheduler; the other ranks follow. Before each Forward the scheduler's engine
// thread hands the step to a StepBroadcaster (a StepListener), which sends it to the followers;
// each follower (FollowSteps) runs the same Forward on its own slices and its own copy of the
// slots' KV caches (holding only its KV heads), so the collectives inside Forward pair up.
//
// Messages, all from rank 0, in this order:
//   start {slots, context, chunk, kv type, lockstep drafting}
//                                  once, after every rank has loaded: followers allocate caches
//                                  (and load the assistant, see below)
//   step  {n rows}, then the rows  per Forward: token, slot, position, wants logits
//   draft {slot, token, n}, then position, probability floor and hidden state
//                                  per assistant proposal, when drafting is in lockstep
//   stop                           at shutdown, or when rank 0 fails after the load
// The assistant drafter (--spec mtp) reads the target's KV cache. Where every rank holds all the
// KV heads it reads (E2B), rank 0 drafts alone; where tensor parallelism splits them (E4B, 12B),
// every rank loads it and runs each of rank 0's proposals on its own copy of that slot's cache,
// the attention summed over the ranks inside Assistant::Draft.
// A follower's caches track rank 0's by position alone: a slot's first row in a step is at the
// position rank 0's cache is at, which rank 0 may have rewound (prefix reuse) or reset since.
// Sampling, tokenizing and every byte of output stay on rank 0.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "base/status.h"
#include "kernels/kv_format.h"
#include "model/assistant.h"
#include "model/communicator.h"
#include "model/forward.h"
#include "model/loader.h"
#include "parallel/in_process_communicator.h"
#include "runtime/scheduler.h"

namespace g4 {

// One row of a step message.
struct WireRow {
  int64_t pos;
  int32_t token;
  int32_t slot;
  int32_t want_logits;
  int32_t unused;
};

// The assistant checkpoint or artifact (and the format its matrices load in) that follower ranks
// load when rank 0's start message says drafting runs in lockstep; empty without --spec mtp.
struct LockstepDraft {
  std::string path;
  WeightType quant = WeightType::kBF16;
};

// Runs on a follower rank until rank 0 says stop (OK), or returns an error for a message that
// makes no sense (then rank 0 cannot go on either). `model` holds this rank's share.
Status FollowSteps(Model& model, Communicator* comm, const LockstepDraft& draft = {});

// Rank 0's side: the rank group, the load, and the messages.
class TensorParallelLeader : public StepListener {
 public:
  // tp ranks: this process's MPI world when launched by mpirun (its other processes run
  // FollowSteps, see RunServeFollower), else tp in-process ranks whose followers are threads.
  static Result<std::unique_ptr<TensorParallelLeader>> Create(int tp);
  ~TensorParallelLeader() override;  // Stop()

  Communicator* comm() const { return comm_; }
  bool over_mpi() const { return over_mpi_; }

  // Loads rank 0's share while every other rank loads its own (in-process: started here). If any
  // rank fails, all do, and the followers have returned.
  // In-process followers are given `draft`; under mpirun each process has its own (the same
  // flags).
  Result<std::unique_ptr<Model>> Load(const std::string& dir, const ModelOptions& options,
                                      const LockstepDraft& draft = {});
  // Tells the followers the slot layout (the scheduler's). After a successful Load, before the
  // first step. With `draft_in_lockstep` (rank 0's assistant splits KV heads over the ranks) the
  // followers load their LockstepDraft too, and an error here means one of them could not.
  Status Start(int slots, int context, int chunk, KvType kv_type = KvType::kF32,
               bool draft_in_lockstep = false);
  void BeforeForward(const std::vector<BatchRow>& rows, const std::vector<int>& row_slots) override;
  void BeforePropose(int slot, const DraftRequest& request) override;
  // Tells the followers to stop (if they are following) and joins in-process follower threads.
  // After the scheduler has stopped; idempotent.
  void Stop();

 private:
  TensorParallelLeader() = default;

  Communicator* comm_ = nullptr;
  bool over_mpi_ = false;
  std::unique_ptr<InProcessGroup> group_;
  std::unique_ptr<Communicator> own_comm_;  // in-process rank 0
  std::vector<std::thread> followers_;
  std::vector<WireRow> wire_;
  bool following_ = false;  // the followers loaded and wait for messages
  bool draft_in_lockstep_ = false;
  int32_t hidden_ = 0;  // the model's hidden size: the floats of a draft message's state
};

// A follower process under mpirun: loads its share of `dir` with rank 0 and follows until rank 0
// says stop. Returns the process exit code; writes nothing unless following fails.
int RunServeFollower(const std::string& dir, const ModelOptions& options,
                     const LockstepDraft& draft = {});

}  // namespace g4
